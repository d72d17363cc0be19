#!/bin/bash
# Session 20, call 5: compute-sanitizer on the decoding seesaws (the standalone's new `dschk` mode: the ring-wrapping case,
# 16 x 8192 tokens, G=4, H=16). racecheck sees the producers' generic in-place writes against every thread's generic
# reads (the fp8 form reads raw blocks 4-8 ahead of producer barriers before overwriting them; TMA writes it does not
# see); memcheck the bounds of every access. Carry .carry/mla_standalone (built with -lineinfo).
nvidia-smi -L
for v in nv4 fp8 nv4bf16; do
  timeout 30 .carry/mla_standalone dschk $v > $OUT/s20e_$v.log 2>&1; echo "dschk $v rc=$?"; grep -E "o rel err|dschk" $OUT/s20e_$v.log | head -3
done
run() {  # tool, variant
  timeout 100 compute-sanitizer --tool $1 .carry/mla_standalone dschk $2 > $OUT/s20e_$1_$2.log 2>&1
  echo "$1 $2 rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|o rel err|dschk" $OUT/s20e_$1_$2.log | head -4
}
run racecheck fp8
run racecheck nv4
run memcheck nv4
run memcheck fp8
run memcheck nv4bf16
cd $OUT && tar czf s20e_logs.tgz s20e_* --remove-files 2>/dev/null; ls $OUT
