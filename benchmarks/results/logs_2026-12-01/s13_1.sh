#!/usr/bin/env bash
# session 13, call 1: the self-fed seesaw variant (HELIX_MLA_DECODE_LOAD=tma_self: consumers load whole tiles j >= 2
# of a segment themselves). Standalone checks of every load path + load timings (every shape, two rounds per
# path); synccheck / racecheck on the small checks; JAX A/B of the load paths on the target shapes.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
S=./.carry/mla_standalone
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/s13_1_smi.log 2>&1
timeout 240 $S load > $OUT/s13_1_load.log 2>&1; echo rc=$? >> $OUT/s13_1_load.log
grep -E "part plans|passing|FAIL|rc=" $OUT/s13_1_load.log | sort | uniq -c
grep -E "^load" $OUT/s13_1_load.log | cut -c1-150
for t in synccheck racecheck; do
  timeout 150 compute-sanitizer --tool $t $S small > $OUT/s13_1_${t}.log 2>&1; echo "$t rc=$?"; tail -n 3 $OUT/s13_1_${t}.log
done
for r in 1 2; do for v in auto tma_self tma_evict_first; do
  HELIX_MLA_DECODE_LOAD=$v timeout 100 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16 --B 64 --L 65536 \
    --hg 128x1,64x4,16x4 --no-ceilings --iterations 10 --name s13_1_${v}_r$r --out $OUT > $OUT/s13_1_bench_${v}_r$r.log 2>&1
  echo "== $v r$r rc=$?"; grep "^| ffi" $OUT/s13_1_${v}_r$r*.md | cut -d'|' -f4-9,15
done; done
