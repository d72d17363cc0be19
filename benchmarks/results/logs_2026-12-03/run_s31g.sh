#!/bin/bash
# Session 31, call 7: call 6's profile puts 35 % of our consumers' samples at S_j's first-block wait, where FlashMLA's
# chain hides the other warpgroup's PV inside the load latency. Our evict-first kernel has that order where the block is
# late (attempt 49's vote); the multicast kernel (the default where row tiles pair) keeps the fixed order. Alternating
# rounds of auto (multicast) and tma_evict_first at H=128 G=1 / G=4 and H=64 G=4, B = 16 / 64, L=64K bf16 (HEAD's library).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s31g.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --hg 128x1,128x4,64x4 --kv-dtypes bf16"
for r in 1 2; do
  ab_bench mc_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
  ab_bench ef_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head HELIX_MLA_DECODE_LOAD=tma_evict_first
done
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
