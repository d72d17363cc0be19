#!/usr/bin/env bash
# session 12, call 6: a third sample of the session's target shapes (bf16 ffi, ceilings measured in the same call).
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 200 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16 --B 1,64,128 --L 65536 --hg 16x4,128x1 \
  --iterations 20 --name mla_decode_s12_targets --out $OUT > $OUT/s12_6_bench.log 2>&1
echo "== rc=$?"; grep "ceilings" $OUT/s12_6_bench.log; grep "^| ffi" $OUT/mla_decode_s12_targets*.md | cut -d'|' -f4-9,10,11,12,15
