#!/usr/bin/env bash
# session 15, call 1: fp8 pages at G*H > 64 through mla_mid_q8s / mla_mid_q8 (one CTA per 64 query rows): standalone
# checks (both kernels, new cases with 2-4 row tiles) and timings, then the JAX benchmark at the large-G*H shapes with
# the ceilings in the same call.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 200 .carry/mla_standalone s8 > $OUT/s15_1_s8.log 2>&1
echo "s8 rc=$?"; grep -E "^s8|FAIL|err" $OUT/s15_1_s8.log | head -60
timeout 100 .carry/mla_standalone m8 999 > $OUT/s15_1_m8.log 2>&1
echo "m8 rc=$?"; grep -E "^m8|FAIL" $OUT/s15_1_m8.log
timeout 200 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16,fp8_e4m3 --B 1,16,64 --L 65536 \
  --hg 128x1,128x4,64x4,64x2 --iterations 20 --name mla_decode_s15_bigfp8 --out $OUT > $OUT/s15_1_bench.log 2>&1
echo "bench rc=$?"; grep -E "copy|matmul" $OUT/s15_1_bench.log | head -2; grep "^| ffi" $OUT/mla_decode_s15_bigfp8*.md | cut -d'|' -f2-16
