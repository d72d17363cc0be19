#!/usr/bin/env bash
# session 12, call 7: the planning warp writes its part's segments in parallel (one lane per sequence). Standalone
# checks; A/B against the session-11 library at H=128 G=4 (ffi.py's workspace formula switched to the old one for the
# old library's runs); the GPU ffi tests.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
S=./.carry/mla_standalone
timeout 80 $S load 128 tma_evict_first > $OUT/s12_7_load.log 2>&1; echo rc=$? >> $OUT/s12_7_load.log
grep -E "part plans|passing|FAIL|rc=" $OUT/s12_7_load.log | sort | uniq -c
for m in q8 m8; do timeout 40 $S $m 999 > $OUT/s12_7_${m}.log 2>&1; echo rc=$? >> $OUT/s12_7_${m}.log; tail -n 2 $OUT/s12_7_${m}.log; done
F=helix_jax/ops/mla_decode/ffi.py
cp $F /tmp/ffi_new.py
python3 - <<'PY'
import re
f="helix_jax/ops/mla_decode/ffi.py"; s=open(f).read()
i=s.index("    segs = batch + MAX_PARTS\n    row_tiles"); j=s.index("\n\n",i)
s=s[:i]+"    segs = batch + MAX_PARTS\n    return (_align(16 * segs) + _align(8 * MAX_PARTS) + _align(8 * batch) + _align(4 * segs * rows)\n            + _align(4 * segs * rows * 512))"+s[j:]
open("/tmp/ffi_old.py","w").write(s)
PY
for r in 1 2; do for v in old new; do
  if [ $v = old ]; then export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_old; cp /tmp/ffi_old.py $F; else unset HELIX_JAX_FFI_LIB_DIR; cp /tmp/ffi_new.py $F; fi
  timeout 100 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16 --B 16,64 --L 65536 --hg 128x4,128x1,16x4 \
    --no-ceilings --iterations 10 --name s12_7_${v}_r$r --out $OUT > $OUT/s12_7_bench_${v}_r$r.log 2>&1
  echo "== $v r$r rc=$?"; grep "^| ffi" $OUT/s12_7_${v}_r$r*.md | cut -d'|' -f4-9,15
done; done
cp /tmp/ffi_new.py $F; unset HELIX_JAX_FFI_LIB_DIR
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_contract.py tests/test_mla_decode_formats.py -k "ffi" > $OUT/s12_7_gpu.log 2>&1
echo "suite rc=$?"; tail -n 2 $OUT/s12_7_gpu.log
