#!/usr/bin/env bash
# session 15, call 2: HEAD's library with fp8 G*H > 64 on the mid kernels: the GPU suite (append + contract + formats,
# the formats' subprocess variants run every fp8 FFI case under both HELIX_MLA_DECODE_MID8 kernels), then
# compute-sanitizer on an 80-row (two row tiles) case of mla_mid_q8s (TMA and cp.async tiles).
export XLA_PYTHON_CLIENT_PREALLOCATE=false
for v in 16384 16512; do
  for tool in memcheck racecheck; do
    timeout 60 compute-sanitizer --tool $tool .carry/mla_standalone m8chk $v 5 16 > $OUT/s15_2_${tool}_$v.log 2>&1
    echo "$tool $v rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|o rel err" $OUT/s15_2_${tool}_$v.log | head -3
  done
done
timeout 480 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_append_kernel.py tests/test_mla_decode_contract.py \
  tests/test_mla_decode_formats.py > $OUT/s15_2_gpu_suite.log 2>&1
echo "suite rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/s15_2_gpu_suite.log | tail -12
