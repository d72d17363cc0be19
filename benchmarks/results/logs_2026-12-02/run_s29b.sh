#!/bin/bash
# Session 29, call 2: the landed candidate (.carry/lib_f: HELIX_MLA_DECODE_SEG_COST with auto = 8 for mla_mid_q8s, 1
# elsewhere) under the whole GPU file of the page formats (tests/test_mla_decode_formats.py, 98 cases), in two parts
# with their own limits so a cut part still reports what passed.
export PYTHONPATH=$PWD HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_f
L=$OUT/s29b.log
nvidia-smi -L > $L
run_part() {
  local name=$1 limit=$2 sel=$3
  local start=$(date +%s)
  timeout $limit python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/test_mla_decode_formats.py -k "$sel" \
    > /tmp/$name.log 2>&1
  local rc=$?
  echo "== formats part $name (-k \"$sel\") rc $rc $(( $(date +%s) - start )) s: $(grep -cE '^tests.*(PASSED|FAILED)|\.+' /tmp/$name.log) progress lines" >> $L
  grep -E "passed|failed|^FAILED|^ERROR|Error" /tmp/$name.log | tail -12 >> $L
}
run_part a 280 "test_gpu_formats or deterministic"
run_part b 280 "not (test_gpu_formats or deterministic)"
sed -i "s#$PWD/#\$PWD/#g" $L
tail -20 $L
