#!/usr/bin/env bash
# session 12, call 5: compute-sanitizer on the final kernels (per-CTA planning tables, 16-bit partials), then the
# issue's grid (bf16, ffi) with the device ceilings in the same call.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
S=./.carry/mla_standalone
timeout 150 compute-sanitizer --tool memcheck $S small > $OUT/s12_5_memcheck_small.log 2>&1; echo rc=$?; grep -E "ERROR SUMMARY|part plans|passing" $OUT/s12_5_memcheck_small.log | head
timeout 60 compute-sanitizer --tool memcheck $S m8chk 0 > $OUT/s12_5_memcheck_m8.log 2>&1; tail -n 2 $OUT/s12_5_memcheck_m8.log
timeout 220 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16 --B 1,16,64,128 --L 8192,65536 --hg 16x1,16x2,16x4,16x8,64x4,128x1,128x4 \
  --iterations 10 --budget-s 170 --name mla_decode_s12_grid --out $OUT > $OUT/s12_5_grid.log 2>&1
echo "== grid rc=$?"; grep "ceilings\|skipped" $OUT/s12_5_grid.log | head; grep "^| ffi" $OUT/mla_decode_s12_grid*.md | cut -d'|' -f4-9,12 | head -60
