#!/bin/bash
# Session 22, call 2: attempt 45 (the seesaw softmax: max on raw logits with the factor folded into the exponent FMA,
# bound compares skipped for tiles inside every bound of a warp, P stored by stmatrix; .carry/lib_smax, branch s22-smax)
# against the candidate library (skip + staging slot by default; .carry/lib_cand = helix_jax/_lib) under JAX,
# alternating; then the GPU tests: contract with lib_smax, the nvfp4 format cases with the candidate (staging slot default).
export PYTHONPATH=$PWD
L=$OUT/s22b.log
nvidia-smi -L > $L
bench() {  # name, then env assignments
  local n=$1; shift
  env "$@" timeout 100 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 16,64 \
    --hg $HG --no-ceilings --name s22b_$n --out /tmp/s22b $BENCH_ARGS > /tmp/s22b_$n.log 2>&1
  echo "== bench $n ($*) rc $?" >> $L
  grep -E "backend=" /tmp/s22b_$n.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' | cut -c1-200 >> $L
}
BENCH_ARGS="--kv-dtypes bf16"; HG=16x4,128x1,64x4
for r in 1 2; do
  bench smax_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_smax
  bench cand_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_cand
done
BENCH_ARGS="--kv-dtypes nvfp4"; HG=16x4,128x1
bench nv4_smax HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_smax
bench nv4_cand_off HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_cand HELIX_MLA_DECODE_NV4_STAGE=off
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_smax timeout 200 python3 -m pytest -m gpu tests/test_mla_decode_contract.py -q -x >> $L 2>&1
echo "pytest contract (lib_smax) rc $?" >> $L
timeout 250 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -q -x \
  -k "((test_gpu_formats or test_gpu_r2_examples or test_gpu_ffi_formats_are_deterministic or f16_queries) and nvfp4 and (ffi or f16_queries)) or staging_slot or nv4_stage" >> $L 2>&1
echo "pytest nvfp4 formats (candidate) rc $?" >> $L
tail -3 $L
