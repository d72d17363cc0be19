#!/bin/bash
# Session 27, call 8: the landed form (every mla_mid_q8s kernel with the ldmatrix V^T; per-thread row sums for the one-term
# fast chain only, helix_jax/_lib): its GPU tests (one-term cases, the default fp8 FFI formats / determinism / R2); the
# one-term fast chain without the per-thread sums (.carry/lib_nrs1, -DHELIX_S8_NOREGSUMS1) against it, two alternating
# rounds at H=16 G=4 B=64; the landed two-term default and bf16 once for the same-run ratio.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s27h.log
nvidia-smi -L > $L
HELIX_MLA_DECODE_FP8_Q=one timeout 60 python3 -m pytest -m gpu -q -s tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" > /tmp/t1.log 2>&1
echo "pytest one-term rc $?" >> $L; grep -E "one-term|rel error|passed|failed" /tmp/t1.log | head -10 >> $L
timeout 80 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py \
  -k "fp8_e4m3 and ffi and (test_gpu_formats or deterministic or r2)" > /tmp/t2.log 2>&1
echo "pytest default fp8 FFI rc $?" >> $L; grep -E "passed|failed|FAILED" /tmp/t2.log | tail -4 >> $L
export AB_TMP=/tmp AB_TIMEOUT=35
B="--B 64 --L 65536 --hg 16x4 --iterations 20"
for r in 1 2; do
  ab_bench landed_one_r$r $L $B --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one
  ab_bench nrs1_one_r$r $L $B --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_nrs1
done
ab_bench landed_default $L $B --kv-dtypes bf16,fp8_e4m3
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
