#!/bin/bash
# Session 31, call 1: FlashMLA's dense sm90 decode (benchmarks/flashmla_reference.cu, built from FlashMLA 9241ae3 and
# CUTLASS 147f5673 into the ignored .carry/) over issue 4's bf16 shapes, its float64 check first, alternating with our
# FFI kernel (HEAD's library, .carry/lib_head) on the same shapes, B in {16, 64}, L=64K, page 64, with the ceilings.
export PYTHONPATH=$PWD
L=$OUT/s31a.log
nvidia-smi -L > $L
nvidia-smi --query-gpu=power.limit,clocks.max.sm,clocks.max.mem --format=csv >> $L
for r in 1 2; do
  echo "== flashmla round $r" >> $L
  timeout 120 .carry/flashmla_reference 20 >> $L 2>&1; echo "rc $?" >> $L
  echo "== helix ffi round $r" >> $L
  C=--no-ceilings; [ $r -eq 1 ] && C=
  HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head timeout 200 python3 benchmarks/mla_decode.py --backends ffi $C --iterations 20 \
    --B 1,16,64 --L 65536 --hg 128x1,128x4,64x4,16x1,16x4 --kv-dtypes bf16 --name s31a_r$r --out $OUT > /tmp/b.log 2>&1
  echo "rc $?" >> $L
  grep -E "ceiling|copy|matmul|backend=" /tmp/b.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
done
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
