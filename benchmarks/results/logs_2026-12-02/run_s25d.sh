#!/bin/bash
# Session 25, call 4: the landed library (FP8_Q=one: three raw tiles, fast chain under auto): issue 4/6 shapes with the
# ceilings in the same run (bf16 + fp8 default), fp8 under FP8_Q=one in the same call; the one-term GPU test (two S
# accumulations), the bad-value test and the default fp8 FFI cases.
export PYTHONPATH=$PWD
L=$OUT/s25d.log
nvidia-smi -L > $L
A="--backends ffi --B 16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
timeout 240 python3 benchmarks/mla_decode.py $A --kv-dtypes bf16,fp8_e4m3 --name mla_decode_s25_formats --out $OUT > /tmp/d1.log 2>&1
echo "bench default rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
HELIX_MLA_DECODE_FP8_Q=one timeout 150 python3 benchmarks/mla_decode.py $A --kv-dtypes fp8_e4m3 --no-ceilings \
  --name mla_decode_s25_fp8_q_one --out $OUT > /tmp/d2.log 2>&1
echo "bench FP8_Q=one rc $?" >> $L
grep -E "backend=" /tmp/d2.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
timeout 200 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_one_term_q or fp8_q or (fp8_e4m3 and ffi and (test_gpu_formats or deterministic or r2))" >> $L 2>&1
echo "pytest one-term + bad FP8_Q + default fp8 FFI cases rc $?" >> $L
tail -3 $L
