#!/bin/bash
# Session 28, call 2: .carry/lib_nf = call 1's lazy max + no proxy fence before S on tiles TMA wrote whole
# (mla_mid_q8s): the fp8 GPU tests on it (one term: rounded-Q oracle, rising max, determinism, budget; two terms:
# every fp8 FFI format case, determinism, R2, q_terms, rising max); then two alternating rounds against the landed
# library (.carry/lib_head) and call 1's (.carry/lib_lazy), one and two terms at H=16 G=4 and H=128 G=1, B=64.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s28b.log
nvidia-smi -L > $L
NF=$PWD/.carry/lib_nf
HELIX_JAX_FFI_LIB_DIR=$NF HELIX_MLA_DECODE_FP8_Q=one timeout 120 python3 -m pytest -m gpu -q -s tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" > /tmp/t1.log 2>&1
echo "pytest one-term rc $?" >> $L; grep -E "one-term|rising|rel error|passed|failed|Error" /tmp/t1.log | head -20 >> $L
HELIX_JAX_FFI_LIB_DIR=$NF timeout 150 python3 -m pytest -m gpu -q -s tests/test_mla_decode_formats.py \
  -k "(fp8_e4m3 and ffi and (test_gpu_formats or deterministic or r2)) or test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" > /tmp/t2.log 2>&1
echo "pytest default fp8 FFI rc $?" >> $L; grep -E "rising|rel error|passed|failed|FAILED|Error" /tmp/t2.log | tail -12 >> $L
export AB_TMP=/tmp AB_TIMEOUT=45
B1="--B 64 --L 65536 --hg 16x4,128x1 --iterations 20 --kv-dtypes fp8_e4m3"
for r in 1 2; do
  for v in head lazy nf; do
    ab_bench ${v}_one_r$r $L $B1 -- HELIX_MLA_DECODE_FP8_Q=one HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_$v
  done
  for v in head lazy nf; do
    ab_bench ${v}_two_r$r $L $B1 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_$v
  done
done
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
