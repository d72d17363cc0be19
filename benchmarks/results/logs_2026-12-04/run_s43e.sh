#!/bin/bash
# Session 43, call 5, carry [".carry/lib_comb3"]: the issue shapes with the ceilings under lib_comb3, the library that
# landed (call 4's final run measured lib_comb2, the A/B winner by summed ms; lib_comb3 had the lower combine times).
export PYTHONPATH=$PWD
L=$OUT/s43e.log
nvidia-smi -L > $L
A2="--backends ffi --B 1,16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_comb3 timeout 110 python3 benchmarks/mla_decode.py $A2 --kv-dtypes bf16 --name mla_decode_s43_final2 --out $OUT > /tmp/d1.log 2>&1
echo "== bench final [comb3] rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' | cut -c1-260 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
