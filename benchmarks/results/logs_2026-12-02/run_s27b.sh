#!/bin/bash
# Session 27, call 2: attempt 61 as landed (V^T by ldmatrix.trans in the one-term kernels and in variant 512; the two-term
# fast chains keep the old form, SASS identical to session 26's). GPU tests of the fp8 formats (one-term under both S
# accumulations, determinism, f32 chains, every default fp8 FFI format, determinism and R2); variant 512 (the default
# past 64 rows) against session 26's library; then the issue shapes with the ceilings in the same run (bf16 and fp8
# default) and fp8 under FP8_Q=one.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s27b.log
nvidia-smi -L > $L
HELIX_MLA_DECODE_FP8_Q=one timeout 100 python3 -m pytest -m gpu -q -s tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" > /tmp/t1.log 2>&1
echo "pytest one-term rc $?" >> $L
grep -E "one-term|rel error|passed|failed|Error|error:" /tmp/t1.log | head -16 >> $L
timeout 200 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_one_term_q or fp8_s_f32 or fp8_mid_kernel or (fp8_e4m3 and ffi and (test_gpu_formats or deterministic or r2))" > /tmp/t2.log 2>&1
echo "pytest fp8 FFI (default, f32 chains, one-term subprocesses) rc $?" >> $L; grep -E "passed|failed|FAILED|Error" /tmp/t2.log | tail -8 >> $L
export AB_TMP=/tmp AB_TIMEOUT=40
for r in 1 2; do
  ab_bench new512_r$r $L --B 64 --L 65536 --hg 128x1 --iterations 20 --kv-dtypes fp8_e4m3
  ab_bench head512_r$r $L --B 64 --L 65536 --hg 128x1 --iterations 20 --kv-dtypes fp8_e4m3 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
done
A="--backends ffi --B 16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
timeout 200 python3 benchmarks/mla_decode.py $A --kv-dtypes bf16,fp8_e4m3 --name mla_decode_s27_formats --out $OUT > /tmp/d1.log 2>&1
echo "bench default rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
HELIX_MLA_DECODE_FP8_Q=one timeout 100 python3 benchmarks/mla_decode.py $A --kv-dtypes fp8_e4m3 --no-ceilings \
  --name mla_decode_s27_fp8_q_one --out $OUT > /tmp/d2.log 2>&1
echo "bench FP8_Q=one rc $?" >> $L
grep -E "backend=" /tmp/d2.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
