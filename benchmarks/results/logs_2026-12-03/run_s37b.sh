#!/bin/bash
# Session 37, call 2, from main with carry ["helix_jax/_lib", ".carry"]: FlashMLA's order runs 16 % slower in our kernel
# (SCHED=pair LOAD=tma_evict_first, 1.936 ms) than in FlashMLA's (1.667 ms) on call 1's machine. Where the warps of each
# stall, per SASS instruction (Nsight Compute source counters + warp-state / instruction / scheduler sections, one
# launch, clock not locked), H=128 G=1 B=64 L=64K bf16; CSVs come back gzipped for a per-region, per-reason comparison.
export PYTHONPATH=$PWD
L=$OUT/s37b.log
nvidia-smi -L > $L
S="--section SourceCounters --section WarpStateStats --section SchedulerStats --section InstructionStats --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --import-source no"
timeout 200 ncu --kernel-name regex:flash_fwd_splitkv_mla_kernel --launch-skip 3 --launch-count 1 --clock-control none $S \
  -o /tmp/f .carry/flashmla_reference 1 64:1:128:65536 > /tmp/f_ncu.log 2>&1
echo "== ncu flashmla rc $?" >> $L
ncu -i /tmp/f.ncu-rep --page source --csv --print-source sass > /tmp/f_source.csv 2>&1
ncu -i /tmp/f.ncu-rep --page details --csv > $OUT/s37b_flashmla_details.csv 2>&1
python3 benchmarks/ncu_hotspots.py --top 30 /tmp/f_source.csv >> $L 2>&1
gzip -9 -c /tmp/f_source.csv > $OUT/s37b_flashmla_source.csv.gz
for v in pairself seesaw; do
  E=""; [ $v = pairself ] && E="HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_evict_first"
  env $E timeout 200 ncu --kernel-name regex:mla_seesaw --launch-skip 1 --launch-count 1 \
    --clock-control none $S -o /tmp/h_$v python3 benchmarks/mla_decode_profile.py --kv-dtype bf16 --B 64 --L 65536 --H 128 --G 1 \
    --calls 2 > /tmp/h_ncu_$v.log 2>&1
  echo "== ncu helix $v rc $?" >> $L
  ncu -i /tmp/h_$v.ncu-rep --page source --csv --print-source sass > /tmp/h_source_$v.csv 2>&1
  ncu -i /tmp/h_$v.ncu-rep --page details --csv > $OUT/s37b_${v}_details.csv 2>&1
  python3 benchmarks/ncu_hotspots.py --top 30 /tmp/h_source_$v.csv >> $L 2>&1
  gzip -9 -c /tmp/h_source_$v.csv > $OUT/s37b_${v}_source.csv.gz
done
sed -i "s#$PWD/#\$PWD/#g" $L
head -c 3000 $L
