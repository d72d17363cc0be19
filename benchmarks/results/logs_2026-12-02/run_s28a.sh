#!/bin/bash
# Session 28, call 1: the lazy running max in mla_mid_q8s (kS8MaxSlack 0.75, on top of the no-register-sums form;
# .carry/lib_lazy): its GPU tests (one-term cases incl. the new rising-max case, the default fp8 FFI formats /
# determinism / R2, the rising-max case under two terms); then two alternating rounds against the landed library
# (.carry/lib_head) and session 27's no-register-sums build (.carry/lib_nrs1): one term at H=16 G=4 and H=128 G=1,
# the two-term default at H=16 G=4 and at H=128 G=1 (variant 512), B=64.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s28a.log
nvidia-smi -L > $L
LAZY=$PWD/.carry/lib_lazy
HELIX_JAX_FFI_LIB_DIR=$LAZY HELIX_MLA_DECODE_FP8_Q=one timeout 100 python3 -m pytest -m gpu -q -s tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" > /tmp/t1.log 2>&1
echo "pytest one-term rc $?" >> $L; grep -E "one-term|rising|rel error|passed|failed|Error" /tmp/t1.log | head -20 >> $L
HELIX_JAX_FFI_LIB_DIR=$LAZY timeout 150 python3 -m pytest -m gpu -q -s tests/test_mla_decode_formats.py \
  -k "(fp8_e4m3 and ffi and (test_gpu_formats or deterministic or r2)) or rising or test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" > /tmp/t2.log 2>&1
echo "pytest default fp8 FFI rc $?" >> $L; grep -E "rising|rel error|passed|failed|FAILED|Error" /tmp/t2.log | tail -12 >> $L
export AB_TMP=/tmp AB_TIMEOUT=45
B1="--B 64 --L 65536 --hg 16x4,128x1 --iterations 20 --kv-dtypes fp8_e4m3"
for r in 1 2; do
  for v in head nrs1 lazy; do
    ab_bench ${v}_one_r$r $L $B1 -- HELIX_MLA_DECODE_FP8_Q=one HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_$v
  done
  for v in head lazy; do
    ab_bench ${v}_two_r$r $L $B1 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_$v
  done
done
ab_bench lazy_bf16 $L --B 64 --L 65536 --hg 16x4,128x1 --iterations 20 --kv-dtypes bf16 -- HELIX_JAX_FFI_LIB_DIR=$LAZY
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
