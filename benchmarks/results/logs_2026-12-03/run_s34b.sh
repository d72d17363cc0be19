#!/bin/bash
# Session 34, from a checkout of branch wip/pair-hybrid-main with carry [".carry"] (.carry/lib_a74 built from it, the
# CPU library beside it). Attempt 73 (HELIX_MLA_DECODE_PAIR_MC=left|right: one buffer half of the multicast pair kernel
# loaded by each CTA alone) and attempt 74 (HELIX_MLA_DECODE_SS_ALONE=own|ownrope|other: buffer roles of the multicast
# seesaw loaded by each CTA alone). (1) the 7 contract cases twice under each; (2) two alternating rounds: the seesaw
# forms at H=128 G=1 and H=64 G=4, the pair forms at H=128 G=4, B = 16 / 64, L=64K.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s34b.log
nvidia-smi -L > $L
export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_a74
rep() {  # NAME VAR=VAL...
  local name=$1; shift
  local start=$(date +%s)
  env "$@" timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/rep_$name.log 2>&1
  echo "== repeat $name ($*) rc $? $(( $(date +%s) - start )) s" >> $L
  echo "   cases $(grep -c ' runs, ' $OUT/rep_$name.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/rep_$name.log)" >> $L
  grep -E "FAILED|differs|Error|error" $OUT/rep_$name.log | head -3 | cut -c1-200 >> $L
}
S="HELIX_MLA_DECODE_SCHED=seesaw HELIX_MLA_DECODE_LOAD=tma_multicast"
P="HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_multicast"
for m in own ownrope other; do rep ss_$m $S HELIX_MLA_DECODE_SS_ALONE=$m; done
for m in left right; do rep pair_$m $P HELIX_MLA_DECODE_PAIR_MC=$m; done
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16"
for r in 1 2; do
  ab_bench ss_r$r $L $A --hg 128x1,64x4 -- $S
  for m in own ownrope other; do ab_bench ss_${m}_r$r $L $A --hg 128x1,64x4 -- $S HELIX_MLA_DECODE_SS_ALONE=$m; done
  ab_bench pair_r$r $L $A --hg 128x4 -- $P
  for m in left right; do ab_bench pair_${m}_r$r $L $A --hg 128x4 -- $P HELIX_MLA_DECODE_PAIR_MC=$m; done
done
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
