#!/usr/bin/env bash
# (kVar 4096 and driver mode `s8t` live on branch wip/mid8-transposer; see benchmarks/NOTES.md session 16, attempt 34)
# session 16, call 3: mla_mid_q8s with a transposing warpgroup (kVar 4096: V^T written to shared memory by a fourth
# warpgroup, PV reads A from it): standalone checks (every mid case, TMA and cp.async tiles) and the ring-wrapping
# case, timings against the default mla_mid_q8s and the bf16 seesaw, then memcheck / racecheck on the ring-wrapping case.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 60 .carry/mla_standalone s8t 999 > $OUT/s16_3_s8t_checks.log 2>&1
rc=$?; echo "s8t checks rc=$rc"; grep -E "^s8t|o rel err" $OUT/s16_3_s8t_checks.log | cut -c1-100
for a in 20480 20608 16384; do
  timeout 40 .carry/mla_standalone m8chk $a > $OUT/s16_3_m8chk.log 2>&1
  echo "m8chk $a rc=$?"; grep -E "o rel err" $OUT/s16_3_m8chk.log | head -2
done
if [ $rc -eq 0 ]; then
  timeout 200 .carry/mla_standalone s8t 2>&1 | grep -E "^s8t B" | tee $OUT/s16_3_s8t_timings.log
  for tool in memcheck racecheck; do
    timeout 150 compute-sanitizer --tool $tool .carry/mla_standalone m8chk 20480 > $OUT/s16_3_$tool.log 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|o rel err" $OUT/s16_3_$tool.log | head -4
  done
fi
