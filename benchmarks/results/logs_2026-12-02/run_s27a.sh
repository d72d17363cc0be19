#!/bin/bash
# Session 27, call 1. Attempt 61: mla_mid_q8s builds V^T by ldmatrix.trans (b16 pairs) and one byte permute per register
# (8 LDSM + 32 PRMT per tile and thread, was 16 LDS.64 + 64 PRMT), P^T in the matching k order with one 4-byte store per
# token quad and row (helix_jax/_lib); lib_pt16: the same with the old 2-byte P^T stores (-DHELIX_S8_PT16); lib_head:
# session 26's library. GPU tests of the new library first, then fp8 (one term and default) against both, and bf16.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s27a.log
nvidia-smi -L > $L
C=$PWD/.carry
HELIX_MLA_DECODE_FP8_Q=one timeout 90 python3 -m pytest -m gpu -q -s tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" > /tmp/t1.log 2>&1
echo "pytest one-term new rc $?" >> $L
grep -E "one-term|rel error|passed|failed|Error|error:" /tmp/t1.log | head -16 >> $L
timeout 150 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py \
  -k "(fp8_e4m3 and ffi) or fp8_s_f32 or fp8_mid_kernel" > /tmp/t2.log 2>&1
echo "pytest default fp8 FFI new rc $?" >> $L; grep -E "passed|failed|FAILED|Error" /tmp/t2.log | tail -8 >> $L
export AB_TMP=/tmp AB_TIMEOUT=40
B="--B 64 --L 65536 --hg 128x1,16x4 --iterations 20"
for r in 1 2; do
  ab_bench new_one_r$r $L $B --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
  ab_bench head_one_r$r $L $B --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one HELIX_JAX_FFI_LIB_DIR=$C/lib_head
  ab_bench pt16_one_r$r $L $B --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one HELIX_JAX_FFI_LIB_DIR=$C/lib_pt16
  ab_bench bf16_r$r $L $B --kv-dtypes bf16 -- HELIX_JAX_FFI_LIB_DIR=$C/lib_head
done
for n in new head; do
  d=$PWD/helix_jax/_lib; [ $n = head ] && d=$C/lib_head
  ab_bench ${n}_two $L --B 64 --L 65536 --hg 16x4 --iterations 20 --kv-dtypes fp8_e4m3 -- HELIX_JAX_FFI_LIB_DIR=$d
done
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
