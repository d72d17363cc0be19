#!/bin/bash
# Session 23, call 5: attempt 50 (the owner's PV over tokens 0-31 issued before the rest of its softmax; helix_jax/_lib)
# against HEAD's library (.carry/lib_head2: attempts 48-49) on bf16, alternating, two rounds; the load-path breakdown at
# H=128 (standalone driver .carry/mla_sa50, no trace); the GPU contract tests on the new library.
export PYTHONPATH=$PWD
L=$OUT/s23e.log
nvidia-smi -L > $L
bench() {  # name, then env assignments
  local n=$1; shift
  env "$@" timeout 80 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 16,64 \
    --hg 16x4,128x1,128x4,64x4 --kv-dtypes bf16 --no-ceilings --name s23e_$n --out /tmp/s23e > /tmp/s23e_$n.log 2>&1
  echo "== bench $n ($*) rc $?" >> $L
  grep -E "backend=" /tmp/s23e_$n.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' -e 's/ frac_roofline.*//' | cut -c1-200 >> $L
}
for r in 1 2; do
  bench a50_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
  bench head_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head2
done
if [ -x .carry/mla_sa50 ]; then
  timeout 100 .carry/mla_sa50 load 128 tma_multicast > $OUT/s23e_load.log 2>&1; echo "standalone rc $?" >> $L
  grep -E "passing|^load" $OUT/s23e_load.log >> $L
fi
timeout 200 python3 -m pytest -m gpu tests/test_mla_decode_contract.py -q -x >> $L 2>&1
echo "pytest contract (a50) rc $?" >> $L
tail -4 $L
