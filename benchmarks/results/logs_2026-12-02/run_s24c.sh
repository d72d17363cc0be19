#!/bin/bash
# Session 24, call 3: attempt 53 - producer warps 1-3 prefetch tile j+d's pool rows into L2 (plain prefetch.global.L2,
# no TMA work) once tile j's first block has landed (HELIX_MLA_DECODE_KV_L2_AHEAD=d, experiment build .carry/lib_s24c),
# against HEAD's seesaw (.carry/lib_head2: kLoad 2 / 3 SASS identical to HEAD's), alternating, two rounds; then the GPU
# contract cases under d=2 (three runs each, oracle + bitwise repeat).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s24c.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
A="--B 16,64 --L 65536 --hg 128x1,64x4,16x4 --kv-dtypes bf16 --iterations 20"
for r in 1 2; do
  ab_bench head_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head2
  for d in 1 2 3; do
    ab_bench d${d}_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_s24c HELIX_MLA_DECODE_KV_L2_AHEAD=$d
  done
done
ab_bench d0 $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_s24c HELIX_MLA_DECODE_KV_L2_AHEAD=0
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_s24c HELIX_MLA_DECODE_KV_L2_AHEAD=2 timeout 150 python3 benchmarks/mla_decode_repeat.py --runs 3 > /tmp/s24c_rep.log 2>&1
echo "contract repeat (d=2) rc $?" >> $L
tail -12 /tmp/s24c_rep.log >> $L
tail -3 $L
