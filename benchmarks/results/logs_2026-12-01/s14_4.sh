#!/usr/bin/env bash
# session 14, call 4: Nsight Compute on one mla_mid_q8s launch (one P term) and one mla_mid_q8 launch, B=64 G=4 H=16 fp8.
for v in 1 0; do
  timeout 240 ncu --kernel-name regex:mla_mid_q8 --launch-skip 1 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section SourceCounters \
    .carry/mla_standalone s8prof $v > $OUT/s14_4_ncu_$v.log 2>&1
  echo "ncu $v rc=$?"
done
