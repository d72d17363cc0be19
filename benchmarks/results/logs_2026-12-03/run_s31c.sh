#!/bin/bash
# Session 31, call 3: attempt 66, the pair schedule (HELIX_MLA_DECODE_SCHED=pair: tiles in pairs with one running max per
# pair and the four PVs of a pair in flight together, FlashMLA's order; .carry/lib_pair = HEAD + the schedule): every GPU
# contract case twice against the float64 oracle and bitwise (multicast and evict-first loads), then alternating rounds
# against the landed seesaw at H=128 G=1 / G=4 and H=64 G=4, B = 16 / 64, L=64K, bf16.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s31c.log
nvidia-smi -L > $L
for load in auto tma_evict_first; do
  start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pair HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=$load timeout 170 \
    python3 benchmarks/mla_decode_repeat.py --runs 2 > /tmp/rep_$load.log 2>&1
  echo "== repeat pair load=$load rc $? $(( $(date +%s) - start )) s" >> $L
  tail -12 /tmp/rep_$load.log | cut -c1-220 >> $L
done
export AB_TMP=/tmp AB_TIMEOUT=90
A="--B 16,64 --L 65536 --iterations 20 --hg 128x1,128x4,64x4 --kv-dtypes bf16"
for r in 1 2; do
  ab_bench pair_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pair HELIX_MLA_DECODE_SCHED=pair
  ab_bench ss_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pair
done
ab_bench pair_ef $L --B 64 --L 65536 --iterations 20 --hg 128x1,128x4 --kv-dtypes bf16 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pair HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_evict_first
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
