#!/usr/bin/env bash
# session 12, call 3: per-CTA planning + segment partials in the activation dtype. A/B against the session-11
# library (.carry/lib_old), then the standalone checks (bf16 kernels, both combines, q8 / q4 / m8, small).
export XLA_PYTHON_CLIENT_PREALLOCATE=false
S=./.carry/mla_standalone
timeout 100 $S load 128 tma_evict_first > $OUT/s12_3_load.log 2>&1; echo rc=$? >> $OUT/s12_3_load.log
grep -E "part plans|passing|FAIL|^load|rc=|rel err" $OUT/s12_3_load.log | sort | uniq -c | sort -rn | head -20
grep -E "^load" $OUT/s12_3_load.log
for m in q8 q4 m8; do timeout 60 $S $m 999 > $OUT/s12_3_${m}.log 2>&1; echo rc=$? >> $OUT/s12_3_${m}.log; tail -n 2 $OUT/s12_3_${m}.log; done
timeout 90 $S small > $OUT/s12_3_small.log 2>&1; echo rc=$? >> $OUT/s12_3_small.log; grep -c FAIL $OUT/s12_3_small.log; tail -n 2 $OUT/s12_3_small.log
for r in 1 2; do for v in old new; do
  if [ $v = old ]; then export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_old; else unset HELIX_JAX_FFI_LIB_DIR; fi
  timeout 150 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16,fp8_e4m3 --B 1,16,64 --L 65536 --hg 128x1,16x1,16x4 \
    --no-ceilings --iterations 20 --name s12_3_${v}_r$r --out $OUT > $OUT/s12_3_bench_${v}_r$r.log 2>&1
  echo "== $v r$r rc=$?"; grep "^| ffi" $OUT/s12_3_${v}_r$r*.md | cut -d'|' -f3-9,16
done; done
