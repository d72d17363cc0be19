#!/bin/bash
# Session 28, call 5: the final library (.carry/lib_x = call 3's plus mla_small_q8 without the proxy fence before S on
# whole TMA tiles, tested in call 4): the issue shapes with the ceilings in the same run (bf16 and fp8 default) and fp8
# under FP8_Q=one.
export PYTHONPATH=$PWD HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_x
L=$OUT/s28e.log
nvidia-smi -L > $L
A="--backends ffi --B 16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
timeout 200 python3 benchmarks/mla_decode.py $A --kv-dtypes bf16,fp8_e4m3 --name mla_decode_s28_final --out $OUT > /tmp/d1.log 2>&1
echo "bench default rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
HELIX_MLA_DECODE_FP8_Q=one timeout 100 python3 benchmarks/mla_decode.py $A --kv-dtypes fp8_e4m3 --no-ceilings \
  --name mla_decode_s28_final_fp8_q_one --out $OUT > /tmp/d2.log 2>&1
echo "bench FP8_Q=one rc $?" >> $L
grep -E "backend=" /tmp/d2.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
