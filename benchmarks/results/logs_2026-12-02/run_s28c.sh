#!/bin/bash
# Session 28, call 3: the final library (.carry/lib_fin: the lazy max everywhere in mla_mid_q8s, no proxy fence before S
# on whole TMA tiles in the fast chains only; variant 512 as call 1's): the fp8 GPU tests (one term incl. the
# subprocess cases under both S accumulations, f32 chains, mid-kernel variants, every default fp8 FFI format,
# determinism, R2, rising max); one A/B round against the landed library; the issue shapes with the ceilings in the same
# run (bf16 and fp8 default) and fp8 under FP8_Q=one.
export PYTHONPATH=$PWD HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_fin
. benchmarks/ab_bench.sh
L=$OUT/s28c.log
nvidia-smi -L > $L
HELIX_MLA_DECODE_FP8_Q=one timeout 100 python3 -m pytest -m gpu -q -s tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" > /tmp/t1.log 2>&1
echo "pytest one-term rc $?" >> $L; grep -E "one-term|rising|rel error|passed|failed|Error" /tmp/t1.log | head -16 >> $L
timeout 220 python3 -m pytest -m gpu -q -s tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_one_term_q or fp8_s_f32 or fp8_mid_kernel or rising or (fp8_e4m3 and ffi and (test_gpu_formats or deterministic or r2))" > /tmp/t2.log 2>&1
echo "pytest fp8 FFI (default, f32 chains, one-term subprocesses, rising max) rc $?" >> $L
grep -E "rising|passed|failed|FAILED|Error" /tmp/t2.log | tail -8 >> $L
export AB_TMP=/tmp AB_TIMEOUT=45
B1="--B 64 --L 65536 --hg 16x4,128x1 --iterations 20 --kv-dtypes fp8_e4m3"
ab_bench fin_two $L $B1
ab_bench head_two $L $B1 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
A="--backends ffi --B 16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
timeout 200 python3 benchmarks/mla_decode.py $A --kv-dtypes bf16,fp8_e4m3 --name mla_decode_s28_formats --out $OUT > /tmp/d1.log 2>&1
echo "bench default rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
HELIX_MLA_DECODE_FP8_Q=one timeout 100 python3 benchmarks/mla_decode.py $A --kv-dtypes fp8_e4m3 --no-ceilings \
  --name mla_decode_s28_fp8_q_one --out $OUT > /tmp/d2.log 2>&1
echo "bench FP8_Q=one rc $?" >> $L
grep -E "backend=" /tmp/d2.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
