#!/bin/bash
# Session 20, call 6: racecheck's control. Call 5 found 4 reports on the decoding seesaws, all on the consumers'
# named-barrier hand-offs (sM: softmax max of the other warpgroup's tile; sL: the segment's row sums), none on the
# producers' in-place decode. The bf16 seesaw runs the same consumer code: the same reports there say it is the tool
# (benchmarks/NOTES.md session 6: racecheck does not model bar.arrive -> bar.sync ordering).
nvidia-smi -L
timeout 30 .carry/mla_standalone dschk bf16 > $OUT/s20f_bf16.log 2>&1; echo "dschk bf16 rc=$?"; grep -E "o rel err|dschk" $OUT/s20f_bf16.log
timeout 150 compute-sanitizer --tool racecheck .carry/mla_standalone dschk bf16 > $OUT/s20f_racecheck_bf16.log 2>&1
echo "racecheck bf16 rc=$?"; grep -E "RACECHECK SUMMARY|o rel err|dschk" $OUT/s20f_racecheck_bf16.log | head -4
grep -A2 "Error: Race" $OUT/s20f_racecheck_bf16.log | grep -o "cuh:[0-9]*\( \[[0-9]* hazards\]\)\?" | head -20
timeout 100 compute-sanitizer --tool racecheck .carry/mla_standalone dschk nv4bf16 > $OUT/s20f_racecheck_nv4bf16.log 2>&1
echo "racecheck nv4bf16 rc=$?"; grep -E "RACECHECK SUMMARY|dschk" $OUT/s20f_racecheck_nv4bf16.log | head -3
cd $OUT && tar czf s20f_logs.tgz s20f_* --remove-files 2>/dev/null; ls $OUT
