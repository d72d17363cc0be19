#!/usr/bin/env bash
# session 15, call 7: the R2 examples at G*H = 128 (two 64-row CTAs of mla_mid_q8s, f32 S by default) on every GPU
# backend and format, and the fp8 FFI ones under both HELIX_MLA_DECODE_MID8 kernels.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_formats.py -k "test_gpu_r2_examples" > $OUT/s15_7_r2.log 2>&1
echo "r2 rc=$?"; grep -E "passed|failed|FAILED" $OUT/s15_7_r2.log | tail -6
for v in seesaw lockstep; do
  HELIX_MLA_DECODE_MID8=$v timeout 45 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_formats.py -k "test_gpu_r2_examples and fp8_e4m3 and ffi and 32" > $OUT/s15_7_r2_$v.log 2>&1
  echo "r2 $v rc=$?"; grep -E "passed|failed|FAILED" $OUT/s15_7_r2_$v.log | tail -3
done
