#!/usr/bin/env bash
# session 16, call 6: the issue targets' shapes with the ceilings measured in the same call, on the session's final
# library (mla_mid_q8s machine code identical to HEAD f8279e0's; the seesaw and the other kernels unchanged).
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 280 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16,fp8_e4m3 --B 1,16,64 --L 65536 \
  --hg 128x1,128x4,64x4,16x4,16x1 --iterations 20 --budget-s 240 --name mla_decode_s16_targets --out $OUT > $OUT/s16_6_bench.log 2>&1
echo "bench rc=$?"; grep -E "ceiling|copy|matmul" $OUT/s16_6_bench.log | head -3; grep "^| ffi" $OUT/mla_decode_s16_targets*.md | cut -d'|' -f2-13
