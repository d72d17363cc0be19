#!/usr/bin/env bash
# session 15, call 4: the final library (HELIX_MLA_DECODE_FP8_S=auto: fast S where G*H <= 64, f32 where G*H > 64; fp8
# G*H > 64 on mla_mid_q8s): two informational standalone error readings, then the whole GPU suite.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
for a in "16384 4 16" "0 5 16" "16384 5 16"; do
  timeout 60 .carry/mla_standalone m8chk $a > $OUT/s15_4_m8chk.log 2>&1
  echo "m8chk $a rc=$?"; grep -E "o rel err" $OUT/s15_4_m8chk.log | head -2
done
timeout 540 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_append_kernel.py tests/test_mla_decode_contract.py \
  tests/test_mla_decode_formats.py > $OUT/s15_4_gpu_suite.log 2>&1
echo "suite rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/s15_4_gpu_suite.log | tail -12
