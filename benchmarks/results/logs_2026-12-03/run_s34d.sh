#!/bin/bash
# Session 34, from branch land73 with carry [".carry"] (.carry/lib_land): two alternating rounds auto (the seesaw at
# 4 row tiles) against HELIX_MLA_DECODE_SCHED=pair (PAIR_MC=right) at H=128 G=2 and H=64 G=4, B = 16 / 64, L=64K.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s34d.log
nvidia-smi -L > $L
export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_land AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x2,64x4"
for r in 1 2; do
  ab_bench auto_r$r $L $A
  ab_bench pair_r$r $L $A -- HELIX_MLA_DECODE_SCHED=pair
done
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
