#!/bin/bash
# Session 22, call 4: attempt 46 (the bf16 seesaw consumers skip the per-block proxy fence on TMA-filled tiles;
# .carry/lib_fence, branch s22-fence) against the session's final library (helix_jax/_lib) under JAX, alternating, two
# rounds (with H=128 G=4 for the target table); then the GPU contract tests on lib_fence.
export PYTHONPATH=$PWD
L=$OUT/s22d.log
nvidia-smi -L > $L
bench() {  # name, then env assignments
  local n=$1; shift
  env "$@" timeout 100 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 16,64 \
    --hg 16x4,128x1,128x4,64x4 --kv-dtypes bf16 --no-ceilings --name s22d_$n --out /tmp/s22d > /tmp/s22d_$n.log 2>&1
  echo "== bench $n ($*) rc $?" >> $L
  grep -E "backend=" /tmp/s22d_$n.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' | cut -c1-200 >> $L
}
for r in 1 2; do
  bench fence_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_fence
  bench final_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
done
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_fence timeout 220 python3 -m pytest -m gpu tests/test_mla_decode_contract.py -q -x >> $L 2>&1
echo "pytest contract (lib_fence) rc $?" >> $L
tail -3 $L
