#!/bin/bash
# Session 22, call 5 (the last device minutes): attempt 47 (the decoding seesaws skip the non-owner's O rescale where no
# row of a warp moved its max; .carry/lib_kdec, branch s22-kdecskip) against the committed library (helix_jax/_lib) on
# nvfp4, alternating, two rounds; issue 4's bf16 shapes on the committed library with the ceilings in the same run; then
# the nvfp4 GPU format cases on lib_kdec.
export PYTHONPATH=$PWD
L=$OUT/s22e.log
nvidia-smi -L > $L
bench() {  # name, then env assignments
  local n=$1; shift
  env "$@" timeout 60 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 16,64 \
    --hg 16x4,128x1 --kv-dtypes nvfp4 --no-ceilings --name s22e_$n --out /tmp/s22e > /tmp/s22e_$n.log 2>&1
  echo "== bench $n ($*) rc $?" >> $L
  grep -E "backend=" /tmp/s22e_$n.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' | cut -c1-200 >> $L
}
for r in 1 2; do
  bench kdec_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_kdec
  bench head_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
done
timeout 80 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 16,64 --hg 16x1,16x4,128x1,128x4,64x4 \
  --kv-dtypes bf16 --name mla_decode_s22_targets --out $OUT > /tmp/s22e_targets.log 2>&1; echo "targets rc $?" >> $L
grep -E "ceilings|backend=" /tmp/s22e_targets.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' | cut -c1-220 >> $L
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_kdec timeout 170 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -q -x \
  -k "(test_gpu_formats or test_gpu_r2_examples or test_gpu_ffi_formats_are_deterministic or f16_queries) and nvfp4 and (ffi or f16_queries)" >> $L 2>&1
echo "pytest nvfp4 formats (lib_kdec) rc $?" >> $L
tail -3 $L
