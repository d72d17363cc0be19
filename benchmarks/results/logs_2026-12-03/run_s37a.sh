#!/bin/bash
# Session 37, call 1, from main with carry ["helix_jax/_lib", ".carry"]: is FlashMLA's per-cycle lead structural?
# .carry/flashmla_reference = FlashMLA 9241ae3 as session 31 built it; .carry/fm_x = the same kernel with an idle third
# warpgroup (384 threads, setmaxnreg 240 / 24, as our kernels carry a producer warpgroup); .carry/fm_c = the same kernel
# launched in 2 x 1 x 1 clusters (our multicast kernels' co-scheduling), no code change. Both are local build-time
# patches of FlashMLA's sources (not in this repository). Beside them, main's seesaw (default) and main's pair schedule
# with consumer-issued evict-first copies (SCHED=pair LOAD=tma_evict_first: FlashMLA's order in our kernel).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s37a.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
SH="64:1:128:65536 16:1:128:65536 64:4:64:65536"
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,64x4"
for r in 1 2; do
  for v in flashmla_reference fm_x fm_c; do
    echo "== $(date +%T.%N | cut -c1-12) $v r$r" >> $L
    timeout 60 .carry/$v 20 $SH >> $L 2>&1
  done
  ab_bench seesaw_r$r $L $A --
  ab_bench pairself_r$r $L $A -- HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_evict_first
done
for v in flashmla_reference fm_x fm_c; do
  echo "== $(date +%T.%N | cut -c1-12) $v 400 calls" >> $L
  timeout 60 .carry/$v 400 64:1:128:65536 >> $L 2>&1
done
echo "== $(date +%T.%N | cut -c1-12) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
