#!/bin/bash
# Session 26, call 3: the landed library (attempts 57 / 58 not kept; the one-term Q loader skips the unused lo rows).
# The GPU tests of the fp8 formats (one-term under both S accumulations with the new determinism cases, every default
# fp8 FFI format, determinism, R2, the bad-value cases); the issue shapes with the ceilings in the same run (bf16 and fp8
# default), fp8 under FP8_Q=one in the same call; the one-term form against session 25's library (HEAD before this
# session, .carry/s26/lib_head), two alternating rounds.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s26c.log
nvidia-smi -L > $L
timeout 240 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_one_term_q or fp8_q or test_gpu_fp8_q_terms or (fp8_e4m3 and ffi and (test_gpu_formats or deterministic or r2))" \
  >> $L 2>&1
echo "pytest one-term + determinism + bad FP8_Q + default fp8 FFI cases rc $?" >> $L
A="--backends ffi --B 16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
timeout 200 python3 benchmarks/mla_decode.py $A --kv-dtypes bf16,fp8_e4m3 --name mla_decode_s26_formats --out $OUT > /tmp/d1.log 2>&1
echo "bench default rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
HELIX_MLA_DECODE_FP8_Q=one timeout 100 python3 benchmarks/mla_decode.py $A --kv-dtypes fp8_e4m3 --no-ceilings \
  --name mla_decode_s26_fp8_q_one --out $OUT > /tmp/d2.log 2>&1
echo "bench FP8_Q=one rc $?" >> $L
grep -E "backend=" /tmp/d2.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
export AB_TMP=/tmp AB_TIMEOUT=60
B="--B 64 --L 65536 --hg 128x1,16x4 --iterations 20 --kv-dtypes fp8_e4m3"
for r in 1 2; do
  ab_bench new1_r$r $L $B -- HELIX_MLA_DECODE_FP8_Q=one
  ab_bench head1_r$r $L $B -- HELIX_MLA_DECODE_FP8_Q=one HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/s26/lib_head
done
tail -3 $L
