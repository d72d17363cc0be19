#!/bin/bash
# Session 25, call 5: attempt 56, mla_mid_q8s's softmax keeps each thread's partial row sums in registers (no quad
# reduction or sL / sE round trip per tile; the sums assembled once at the segment end) and its row constants per
# segment: HEAD's library (helix_jax/_lib) against the session-25 library before it (.carry/s25/lib_q1), fp8 with two
# Q terms (default) and one (FP8_Q=one), two alternating rounds; then the fp8 GPU format tests on it.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s25e.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
A="--B 64 --L 65536 --hg 128x1,16x4 --iterations 20 --kv-dtypes fp8_e4m3"
for r in 1 2; do
  ab_bench new_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
  ab_bench old_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/s25/lib_q1
  ab_bench new1_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib HELIX_MLA_DECODE_FP8_Q=one
  ab_bench old1_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/s25/lib_q1 HELIX_MLA_DECODE_FP8_Q=one
done
timeout 200 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_one_term_q or (fp8_e4m3 and ffi and (test_gpu_formats or deterministic or r2))" >> $L 2>&1
echo "pytest one-term + default fp8 FFI cases (HEAD's library) rc $?" >> $L
tail -3 $L
