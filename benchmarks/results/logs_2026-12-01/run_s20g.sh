#!/bin/bash
# Session 20, call 7: call 6's bf16 control again with the driver fixed (its `dschk bf16` compared the bf16 kernel with
# the nvfp4-dequantized reference values: FAIL by construction); then `ss8` (checks + timings) on the driver whose ss4 / ss8
# modes now share their timing-case setup (DsTimingCase).
nvidia-smi -L
timeout 30 .carry/mla_standalone dschk bf16 > $OUT/s20g_bf16.log 2>&1; echo "dschk bf16 rc=$?"; grep -E "o rel err|dschk" $OUT/s20g_bf16.log
timeout 150 compute-sanitizer --tool racecheck .carry/mla_standalone dschk bf16 > $OUT/s20g_racecheck_bf16.log 2>&1
echo "racecheck bf16 rc=$?"; grep -E "RACECHECK SUMMARY|o rel err|dschk" $OUT/s20g_racecheck_bf16.log | head -4
grep -A2 "Error: Race" $OUT/s20g_racecheck_bf16.log | grep -o "cuh:[0-9]*\( \[[0-9]* hazards\]\)\?" | head -20
timeout 90 .carry/mla_standalone ss8 > $OUT/s20g_ss8.log 2>&1; echo "ss8 rc=$?"; grep -E "passing|ss8 B=" $OUT/s20g_ss8.log | cut -c1-260
cd $OUT && tar czf s20g_logs.tgz s20g_* --remove-files 2>/dev/null; ls $OUT
