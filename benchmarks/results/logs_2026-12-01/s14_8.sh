#!/usr/bin/env bash
# session 14, call 8: mla_mid_q8s with the O^T rescale skipped when no row's max moved: standalone checks and timings,
# the GPU format tests, the target shapes with ceilings in the same call (bf16 and fp8).
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 200 .carry/mla_standalone s8 > $OUT/s14_8_s8.log 2>&1
echo "s8 rc=$?"; grep -E "^s8" $OUT/s14_8_s8.log
timeout 150 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16,fp8_e4m3 --B 1,16,64,128 --L 65536 \
  --hg 128x1,16x1,16x4,16x2 --iterations 20 --name mla_decode_s14_targets --out $OUT > $OUT/s14_8_bench.log 2>&1
echo "bench rc=$?"; grep -E "copy|matmul" $OUT/s14_8_bench.log | head -2; grep "^| ffi" $OUT/mla_decode_s14_targets*.md | cut -d'|' -f2-16
timeout 330 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_formats.py > $OUT/s14_8_formats.log 2>&1
echo "formats rc=$?"; tail -n 2 $OUT/s14_8_formats.log
