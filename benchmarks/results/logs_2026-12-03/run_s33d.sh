#!/bin/bash
# Session 33, fourth call: is attempt 72 (.carry/lib_mcp, HELIX_MLA_DECODE_SCHED=pair + LOAD=tma_multicast) ahead of main's
# seesaw (.carry/lib_head) wherever a query group has two or more tokens? Two alternating rounds, bf16, L=64K,
# H=128 G = 2 / 4 / 8 and H=64 G=4, B = 16 / 64. Run from a checkout of wip/pair-mcp with carry [".carry"].
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s33d.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=120
A="--B 16,64 --L 65536 --iterations 20 --hg 128x2,128x4,128x8,64x4 --kv-dtypes bf16"
for r in 1 2; do
  ab_bench mcp_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_mcp HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_multicast
  ab_bench main_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
done
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
