#!/bin/bash
# Session 32, call 4: attempt 68 (.carry/lib_desc). Call 3's test selection (-k ffi) left out the tests whose ids do not
# say "ffi" (the fp8 Q-term, rising-max, budget, determinism and env-variant tests, incl. test_gpu_fp8_one_term_q), and
# its one-term run compared against the unrounded oracle (8 failures, expected of one-term Q: the right test is
# test_gpu_fp8_one_term_q). (1) fp8 A/B, two more rounds (call 3 had one: H=16 G=4 desc faster, H=128 G=1 slower);
# (2) those tests on lib_desc.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s32d.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
F="--B 64 --L 65536 --iterations 20 --hg 16x4,128x1 --kv-dtypes fp8_e4m3"
for r in 2 3; do
  ab_bench head_f8_r$r $L $F -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
  ab_bench desc_f8_r$r $L $F -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_desc
done
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_desc timeout 380 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider \
  tests/test_mla_decode_contract.py tests/test_mla_decode_formats.py -k "not ffi" > /tmp/pt.log 2>&1
echo "== pytest -m gpu contract + formats -k 'not ffi' (lib_desc) rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "FAILED|ERROR|passed|failed" /tmp/pt.log | tail -12 | cut -c1-300 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
