#!/bin/bash
# Session 24, call 2: where the bf16 seesaw's warps stall, per SASS instruction (Nsight Compute source counters, SM
# clock not locked), H=128 G=1 B=64 L=64K (multicast, HEAD's library), one launch; the source page as CSV.
export PYTHONPATH=$PWD HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head2
L=$OUT/s24b.log
nvidia-smi -L > $L
timeout 240 ncu --kernel-name regex:mla_seesaw --launch-skip 1 --launch-count 1 --clock-control none \
  --section SourceCounters --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  --import-source no -o /tmp/s24b python3 benchmarks/mla_decode_profile.py --kv-dtype bf16 --B 64 --L 65536 --H 128 \
  --G 1 --calls 3 > $OUT/s24b_ncu.log 2>&1
echo "ncu rc $?" >> $L
ncu -i /tmp/s24b.ncu-rep --page details > $OUT/s24b_details.log 2>&1
ncu -i /tmp/s24b.ncu-rep --page source --csv --print-source sass > $OUT/s24b_source.csv 2>&1
echo "source page rc $? lines $(wc -l < $OUT/s24b_source.csv)" >> $L
head -3 $OUT/s24b_source.csv | cut -c1-600 >> $L
gzip -9 $OUT/s24b_source.csv
tail -3 $L
