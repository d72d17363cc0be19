#!/bin/bash
# Session 26, call 4. Attempt 59: mla_mid_q8s's softmax adds the rounded weights as f16x2 pairs (HADD2) instead of
# converting each to f32 (the fast chains; .carry/s26/lib_b, -DHELIX_S8_F16SUM -DHELIX_S8_EXP=1); attempt 60: that plus
# one 4-byte P^T store per token quad and row (the pair of lane ^ 1 by a shuffle; lib_ab, EXP=3). GPU tests of lib_b
# (one-term cases against the rounded-Q oracle, determinism, budget; the default fp8 FFI formats / determinism), then
# fp8 one-term against call 3's library (lib_c3) and bf16, two alternating rounds, and two-term fast, one round.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s26d.log
nvidia-smi -L > $L
C=$PWD/.carry/s26
HELIX_JAX_FFI_LIB_DIR=$C/lib_b HELIX_MLA_DECODE_FP8_Q=one timeout 60 python3 -m pytest -m gpu -q -s \
  tests/test_mla_decode_formats.py -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" > /tmp/t_b.log 2>&1
echo "pytest one-term lib_b rc $?" >> $L
grep -E "one-term|rel error|passed|failed|Error|error:" /tmp/t_b.log | head -12 >> $L
HELIX_JAX_FFI_LIB_DIR=$C/lib_b timeout 60 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py \
  -k "fp8_e4m3 and ffi and (test_gpu_formats or deterministic)" > /tmp/u_b.log 2>&1
echo "pytest default fp8 FFI lib_b rc $?" >> $L; grep -E "passed|failed" /tmp/u_b.log | tail -2 >> $L
export AB_TMP=/tmp AB_TIMEOUT=40
B="--B 64 --L 65536 --hg 128x1,16x4 --iterations 20"
for r in 1 2; do
  for n in c3 b ab; do ab_bench ${n}_one_r$r $L $B --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one HELIX_JAX_FFI_LIB_DIR=$C/lib_$n; done
  ab_bench bf16_r$r $L $B --kv-dtypes bf16 -- HELIX_JAX_FFI_LIB_DIR=$C/lib_c3
done
for n in c3 b; do ab_bench ${n}_two $L --B 64 --L 65536 --hg 16x4 --iterations 20 --kv-dtypes fp8_e4m3 -- HELIX_JAX_FFI_LIB_DIR=$C/lib_$n; done
tail -3 $L
