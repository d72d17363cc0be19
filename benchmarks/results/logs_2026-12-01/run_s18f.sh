#!/bin/bash
# Session 18, call 6: the decoding seesaw's register split, producer 88 / consumers 208 (no spills; this library)
# against call 5's 72 / 216 (.carry/lib_r72), alternating; then the nvfp4 FFI format tests on this library.
export PYTHONPATH=$PWD
nvidia-smi -L
B="timeout 60 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --no-ceilings --B 16,64 --hg 16x4,128x1 --kv-dtypes nvfp4"
for r in 1 2; do
  for v in r88 r72; do
    if [ $v = r72 ]; then export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_r72; else unset HELIX_JAX_FFI_LIB_DIR; fi
    $B --name s18f_${v}_$r --out $OUT > $OUT/s18f_${v}_$r.log 2>&1; echo "$v round $r rc $?"
    grep "backend=" $OUT/s18f_${v}_$r.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' | cut -c1-110
  done
done
unset HELIX_JAX_FFI_LIB_DIR
echo "== formats, nvfp4 ffi (r88)"
timeout 200 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k "nvfp4 and ffi" -q > $OUT/s18f_formats.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s18f_formats.log | cut -c1-300 | tail -12
