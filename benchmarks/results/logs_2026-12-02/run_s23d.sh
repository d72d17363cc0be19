#!/bin/bash
# Session 23, call 4: the rest of call 3's plain-tile nvfp4 variant test (bf16 math; the f16 case passed in call 3 before
# the step's time limit), and attempt 49 (kLoad 2) once more against the library before it (.carry/lib_head) at the
# kLoad 2 shape, H=16 G=4 (one row tile), alternating, three rounds.
export PYTHONPATH=$PWD
L=$OUT/s23d.log
nvidia-smi -L > $L
bench() {  # name, then env assignments
  local n=$1; shift
  env "$@" timeout 60 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 30 --B 16,64,128 \
    --hg 16x4 --kv-dtypes bf16 --no-ceilings --name s23d_$n --out /tmp/s23d > /tmp/s23d_$n.log 2>&1
  echo "== bench $n ($*) rc $?" >> $L
  grep -E "backend=" /tmp/s23d_$n.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' -e 's/ frac_roofline.*//' | cut -c1-200 >> $L
}
for r in 1 2 3; do
  bench a49_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
  bench head_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
done
timeout 200 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -q -k "without_staging_slot and bf16" >> $L 2>&1
echo "pytest nvfp4 plain-tile variant (bf16 math) rc $?" >> $L
tail -4 $L
