#!/bin/bash
# Session 26, call 1. Attempt 57: V^T in shared memory for mla_mid_q8s's one-term form (HELIX_MLA_DECODE_FP8_PV=smem:
# the producer warpgroup transposes each tile, PV reads V^T by descriptor, a ring of two raw tiles; helix_jax/_lib).
# Attempt 58: the owner publishes each tile's running max before its exponentials (kVar bit 18, barrier mfull; library
# .carry/s26/lib_em, built with -DHELIX_S8_EARLY_MAX: the fast chains, regs and smem). Smoke tests of both first (the
# one-term cases against the rounded-Q oracle, determinism, the error budget), then fp8 one-term regs / smem with and
# without attempt 58, two-term fast with 58, and bf16, in alternating rounds.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s26a.log
nvidia-smi -L > $L
EM=$PWD/.carry/s26/lib_em
for lib in $PWD/helix_jax/_lib $EM; do
  HELIX_JAX_FFI_LIB_DIR=$lib HELIX_MLA_DECODE_FP8_Q=one HELIX_MLA_DECODE_FP8_PV=smem timeout 150 python3 -m pytest -m gpu -q -s \
    -x tests/test_mla_decode_formats.py -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" > /tmp/t1.log 2>&1
  echo "pytest smem smoke ${lib#$PWD/} rc $?" >> $L
  grep -E "one-term|rel error|passed|failed|Error|error:|assert" /tmp/t1.log | head -30 >> $L
done
HELIX_JAX_FFI_LIB_DIR=$EM HELIX_MLA_DECODE_FP8_Q=one timeout 100 python3 -m pytest -m gpu -q -x \
  tests/test_mla_decode_formats.py -k "test_gpu_fp8_q_terms" > /tmp/t2.log 2>&1
echo "pytest regs+em smoke rc $?" >> $L; grep -E "passed|failed" /tmp/t2.log | tail -2 >> $L
HELIX_JAX_FFI_LIB_DIR=$EM timeout 100 python3 -m pytest -m gpu -q -x tests/test_mla_decode_formats.py \
  -k "fp8_e4m3 and ffi and (test_gpu_formats or deterministic)" > /tmp/t3.log 2>&1
echo "pytest two-term + em default fp8 FFI cases rc $?" >> $L; grep -E "passed|failed" /tmp/t3.log | tail -2 >> $L
export AB_TMP=/tmp AB_TIMEOUT=90
A="--B 64 --L 65536 --hg 128x1,16x4,64x4 --iterations 20"
O1="HELIX_MLA_DECODE_FP8_Q=one"
for r in 1 2; do
  ab_bench smem_r$r $L $A --kv-dtypes fp8_e4m3 -- $O1 HELIX_MLA_DECODE_FP8_PV=smem
  ab_bench smem_em_r$r $L $A --kv-dtypes fp8_e4m3 -- $O1 HELIX_MLA_DECODE_FP8_PV=smem HELIX_JAX_FFI_LIB_DIR=$EM
  ab_bench regs_r$r $L $A --kv-dtypes fp8_e4m3 -- $O1 HELIX_MLA_DECODE_FP8_PV=regs
  ab_bench regs_em_r$r $L $A --kv-dtypes fp8_e4m3 -- $O1 HELIX_MLA_DECODE_FP8_PV=regs HELIX_JAX_FFI_LIB_DIR=$EM
  ab_bench bf16_r$r $L $A --kv-dtypes bf16
done
ab_bench two_fast $L --B 64 --L 65536 --hg 16x4 --iterations 20 --kv-dtypes fp8_e4m3
ab_bench two_fast_em $L --B 64 --L 65536 --hg 16x4 --iterations 20 --kv-dtypes fp8_e4m3 -- HELIX_JAX_FFI_LIB_DIR=$EM
tail -3 $L
