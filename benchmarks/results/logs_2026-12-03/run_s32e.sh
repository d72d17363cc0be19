#!/bin/bash
# Session 32, call 5 (the budget's last minutes): the mla_mid_q8s tests call 4's timed-out pytest did not report, on
# .carry/lib_desc: Q terms (two, then one: against the rounded-Q oracle), rising max, budget, determinism.
export PYTHONPATH=$PWD
L=$OUT/s32e.log
nvidia-smi -L > $L
for q in two one; do
  start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_desc HELIX_MLA_DECODE_FP8_Q=$q timeout 100 python3 -m pytest -m gpu -q -rfE \
    -p no:cacheprovider tests/test_mla_decode_formats.py -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" > $OUT/pt_$q.log 2>&1
  echo "== FP8_Q=$q q-terms / rising max / budget / determinism (lib_desc) rc $? $(( $(date +%s) - start )) s" >> $L
  grep -E "FAILED|ERROR|passed|failed" $OUT/pt_$q.log | tail -6 | cut -c1-300 >> $L
done
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
