#!/bin/bash
# Session 35, call 3, from main 43f6f56 with carry [".carry", "helix_jax/_lib"] (helix_jax/_lib: 0ced1d9's library, its
# 110 kernels SASS-identical to 43f6f56's). (1) benchmarks/common.py's refactored torch timer: copy, bf16 and E4M3 matmul
# rates; (2) PAIR_MC right / both at 4 row tiles (H=128 G=2, H=64 G=4; B = 16 / 64), now that auto runs pair there, two
# alternating rounds; (3) issue 4's latency shape H=128 G=1 B=1 L=64K.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s35d.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
timeout 90 python3 -c "from benchmarks.common import *; print('ceilings: bf16 matmul %.1f, e4m3 matmul %.1f TFLOP/s, copy %.3f TB/s' % (matmul_tflop_per_s(), fp8_matmul_tflop_per_s(), copy_tb_per_s()))" >> $L 2>$OUT/ceil.err
echo "== ceilings rc $?" >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x2,64x4"
for r in 1 2; do
  ab_bench right_r$r $L $A
  ab_bench both_r$r $L $A -- HELIX_MLA_DECODE_PAIR_MC=both
done
ab_bench b1 $L --B 1 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
