#!/bin/bash
# Session 25, call 3: where mla_mid_q8s's one-term form (FP8_Q=one3, fast chain) stalls, per SASS instruction (Nsight
# Compute source counters, SM clock not locked), H=16 G=4 B=64 L=64K, one launch; ranked by benchmarks/ncu_hotspots.py.
export PYTHONPATH=$PWD HELIX_MLA_DECODE_FP8_Q=one3
L=$OUT/s25c.log
nvidia-smi -L > $L
timeout 240 ncu --kernel-name regex:mla_mid_q8s --launch-skip 1 --launch-count 1 --clock-control none \
  --section SourceCounters --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  --import-source no -o /tmp/s25c python3 benchmarks/mla_decode_profile.py --kv-dtype fp8_e4m3 --B 64 --L 65536 --H 16 \
  --G 4 --calls 3 > /tmp/s25c_ncu.log 2>&1
echo "ncu rc $?" >> $L
tail -5 /tmp/s25c_ncu.log >> $L
ncu -i /tmp/s25c.ncu-rep --page details > /tmp/s25c_details.log 2>&1
grep -E "Issue Slots|Eligible|Active Warps|No Eligible|Warp Cycles|Executed Ipc|Pipe" /tmp/s25c_details.log | head -30 >> $L
ncu -i /tmp/s25c.ncu-rep --page source --csv --print-source sass > /tmp/s25c_source.csv 2>&1
echo "source page rc $? lines $(wc -l < /tmp/s25c_source.csv)" >> $L
python3 benchmarks/ncu_hotspots.py --top 40 /tmp/s25c_source.csv >> $L 2>&1
echo "hotspots rc $?" >> $L
gzip -9 -c /tmp/s25c_source.csv > $OUT/s25c_source.csv.gz
tail -3 $L
