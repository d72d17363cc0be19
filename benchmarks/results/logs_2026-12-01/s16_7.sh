#!/usr/bin/env bash
# session 16, call 7: is attempt 35's nondeterminism a race it opens, or one it exposes? The call-5 driver (default =
# the early read of the other tile's V^T, reverted since): the ring-wrapping case three times, then compute-sanitizer
# racecheck and initcheck on it; the same case through the HEAD-order variant is in every earlier log (5.51e-3, 13 runs).
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
for r in 1 2 3; do timeout 30 .carry/mla_standalone m8chk 16384 2>&1 | grep "o rel err" | sed "s/^/run $r: /"; done
for tool in racecheck initcheck; do
  timeout 150 compute-sanitizer --tool $tool .carry/mla_standalone m8chk 16384 > $OUT/s16_7_$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|o rel err|Error|Race|Uninitialized" $OUT/s16_7_$tool.log | sort | uniq -c | sort -rn | head -8
done
