#!/bin/bash
# Session 29, call 3: the rest of tests/test_mla_decode_formats.py on .carry/lib_f (call 2's part b was cut by its limit
# with no summary), verbose so a cut part still lists what passed: b1 the fp8 cases of mla_mid_q8s (R2 examples, the Q
# terms, the rising max, one term, the error budget), b2 the rest (kernel variants in subprocesses, bad values).
export PYTHONPATH=$PWD HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_f
L=$OUT/s29c.log
nvidia-smi -L > $L
run_part() {
  local name=$1 limit=$2 sel=$3
  local start=$(date +%s)
  timeout $limit python3 -m pytest -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_formats.py -k "$sel" \
    > /tmp/$name.log 2>&1
  local rc=$?
  echo "== formats part $name (-k \"$sel\") rc $rc $(( $(date +%s) - start )) s" >> $L
  grep -E "PASSED|FAILED|ERROR|passed|failed" /tmp/$name.log | sed -e 's/^tests\/test_mla_decode_formats.py:://' | cut -c1-150 >> $L
}
run_part b1 250 "r2_examples or test_gpu_fp8_q_terms or one_term or error_budget"
run_part b2 250 "not (test_gpu_formats or deterministic or r2_examples or test_gpu_fp8_q_terms or one_term or error_budget)"
sed -i "s#$PWD/#\$PWD/#g" $L
tail -30 $L
