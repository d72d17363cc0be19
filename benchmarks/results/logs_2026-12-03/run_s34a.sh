#!/bin/bash
# Prepared in session 33 (not run: the device budget was spent) for the next session's first call, from a checkout of
# branch wip/pair-hybrid with carry [".carry"] (.carry/lib_hyb built from that branch, the CPU library beside it).
# Attempt 73: the multicast pair kernel loads one buffer half in each CTA alone (HELIX_MLA_DECODE_PAIR_MC=left: the
# right half alone; right: the left half and the rope block alone), so that half's refill waits for its own CTA's
# release only (session 33's profile: the consumers' data waits are ~30 % of their samples under multicast).
# (1) the contract cases twice under each; (2) two alternating rounds seesaw / pair both / left / right at H=128
# G = 1 / 4, B = 16 / 64, L=64K; (3) the pytest pair cases for left / right and the bad-value case.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s34a.log
nvidia-smi -L > $L
export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_hyb
for m in left right; do
  start=$(date +%s)
  HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_multicast HELIX_MLA_DECODE_PAIR_MC=$m timeout 100 \
    python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/rep_$m.log 2>&1
  echo "== repeat $m rc $? $(( $(date +%s) - start )) s" >> $L
  tail -7 $OUT/rep_$m.log | cut -c1-160 >> $L
done
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --hg 128x1,128x4 --kv-dtypes bf16"
P="HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_multicast"
for r in 1 2; do
  ab_bench ss_r$r $L $A -- HELIX_MLA_DECODE_SCHED=seesaw
  ab_bench both_r$r $L $A -- $P
  ab_bench left_r$r $L $A -- $P HELIX_MLA_DECODE_PAIR_MC=left
  ab_bench right_r$r $L $A -- $P HELIX_MLA_DECODE_PAIR_MC=right
done
start=$(date +%s)
timeout 200 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "(pair_schedule and (left or right)) or bad_env" > $OUT/pt.log 2>&1
echo "== pytest rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pt.log | tail -8 | cut -c1-200 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
