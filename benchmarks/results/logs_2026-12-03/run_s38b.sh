#!/bin/bash
# Session 38, call 2, from main with carry ["helix_jax/_lib"] (main's library): since attempt 79 (session 37) took the
# spills out of both the seesaw and the multicast pair kernels, does `auto`'s choice of schedule still hold?
# (1) two alternating 20-call rounds: auto / SCHED=pair / SCHED=pair PAIR_MC=both / SCHED=seesaw at H=128 G=1 (auto:
#     seesaw, 2 row tiles), H=64 G=4 (auto: pair, 4 row tiles) and H=128 G=4 (auto: pair, 8 row tiles), B = 16, 64;
# (2) 400 back-to-back calls at B=64: auto / SCHED=pair at H=128 G=1, auto / SCHED=seesaw at H=64 G=4;
# (3) Nsight Compute source counters of the landed seesaw at H=128 G=1 B=64 (one launch, clock not locked): where its
#     warps wait now (session 37's profile was of the kernel before attempt 79).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s38b.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,64x4,128x4"
for r in 1 2; do
  ab_bench auto_r$r $L $A
  ab_bench pair_r$r $L $A -- HELIX_MLA_DECODE_SCHED=pair
  ab_bench pairboth_r$r $L $A -- HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_PAIR_MC=both
  ab_bench seesaw_r$r $L $A -- HELIX_MLA_DECODE_SCHED=seesaw
done
S="--B 64 --L 65536 --iterations 400 --kv-dtypes bf16"
ab_bench sus_auto $L $S --hg 128x1,64x4
ab_bench sus_pair $L $S --hg 128x1 -- HELIX_MLA_DECODE_SCHED=pair
ab_bench sus_seesaw $L $S --hg 64x4 -- HELIX_MLA_DECODE_SCHED=seesaw
ab_bench sus_auto2 $L $S --hg 128x1,64x4
SEC="--section SourceCounters --section WarpStateStats --section SchedulerStats --section InstructionStats --section SpeedOfLight --section MemoryWorkloadAnalysis --import-source no"
timeout 200 ncu --kernel-name regex:mla_seesaw --launch-skip 1 --launch-count 1 --clock-control none $SEC -o /tmp/h_ss \
  python3 benchmarks/mla_decode_profile.py --kv-dtype bf16 --B 64 --L 65536 --H 128 --G 1 --calls 2 > /tmp/h_ncu.log 2>&1
echo "== ncu seesaw rc $?" >> $L
ncu -i /tmp/h_ss.ncu-rep --page source --csv --print-source sass > /tmp/h_source.csv 2>&1
ncu -i /tmp/h_ss.ncu-rep --page details --csv > $OUT/s38b_seesaw_details.csv 2>&1
python3 benchmarks/ncu_hotspots.py --top 30 /tmp/h_source.csv >> $L 2>&1
gzip -9 -c /tmp/h_source.csv > $OUT/s38b_seesaw_source.csv.gz
grep -E '"(Elapsed Cycles|Duration|Executed Instructions|L2 Hit Rate|Compute \(SM\) Throughput|Memory Throughput|Issued Warp Per Scheduler|No Eligible)"' $OUT/s38b_seesaw_details.csv | cut -d, -f12- | head -20 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
