#!/bin/bash
# Session 30, call 3: where mla_mid_q8w's S warpgroup (S + softmax of every tile, ~1.5 us per tile in calls 1-2) stalls,
# per SASS instruction: Nsight Compute source counters (SM clock not locked), one-term fp8, H=16 G=4 B=64 L=64K, one
# launch, .carry/lib_w4_0 (the patch s30_ws_softmax_wg.patch as built); ranked by benchmarks/ncu_hotspots.py.
export PYTHONPATH=$PWD HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_w4_0 HELIX_MLA_DECODE_MID8=ws HELIX_MLA_DECODE_FP8_Q=one
L=$OUT/s30c.log
nvidia-smi -L > $L
timeout 240 ncu --kernel-name regex:mla_mid_q8w --launch-skip 1 --launch-count 1 --clock-control none \
  --section SourceCounters --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  --import-source no -o /tmp/s30c python3 benchmarks/mla_decode_profile.py --kv-dtype fp8_e4m3 --B 64 --L 65536 --H 16 \
  --G 4 --calls 3 > /tmp/s30c_ncu.log 2>&1
echo "ncu rc $?" >> $L
tail -4 /tmp/s30c_ncu.log >> $L
ncu -i /tmp/s30c.ncu-rep --page details > /tmp/s30c_details.log 2>&1
grep -E "Duration|Issue Slots|Eligible|Active Warps|No Eligible|Warp Cycles|Executed Ipc|Pipe" /tmp/s30c_details.log | head -30 >> $L
ncu -i /tmp/s30c.ncu-rep --page source --csv --print-source sass > /tmp/s30c_source.csv 2>&1
echo "source page rc $? lines $(wc -l < /tmp/s30c_source.csv)" >> $L
python3 benchmarks/ncu_hotspots.py --top 50 /tmp/s30c_source.csv >> $L 2>&1
echo "hotspots rc $?" >> $L
gzip -9 -c /tmp/s30c_source.csv > $OUT/s30c_source.csv.gz
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
