#!/bin/bash
# Session 27, call 3: the standalone driver (built here, .carry/mla_standalone; sources as committed plus a one-term
# reference-point run in "s8") on the fp8 G*H > 16 cases: the s8 checks (TMA / cp.async two-term fast chains, variant 512
# with V^T by ldmatrix, the one-term kernel as a reference point, the alternative A-register order expected to FAIL),
# then compute-sanitizer memcheck / racecheck / synccheck on them; the timeline of mla_mid_q8s (two terms and one) from the
# trace build (.carry/mla_standalone_trace).
L=$OUT/s27c.log
nvidia-smi -L > $L
bin=.carry/mla_standalone
timeout 90 $bin s8 999 > /tmp/s8.log 2>&1
echo "== s8 999 rc $?" >> $L; cat /tmp/s8.log >> $L
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool $bin s8 999 > /tmp/s8_$tool.log 2>&1
  echo "== s8 999 under $tool rc $?" >> $L
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|hazard|s8 checks" /tmp/s8_$tool.log | head -8 >> $L
done
timeout 120 .carry/mla_standalone_trace s8trace > /tmp/tr2.log 2>&1
echo "== s8trace (two terms) rc $?" >> $L; grep -E "s8trace|^ *[0-9]+ |tile|us" /tmp/tr2.log | head -60 >> $L
timeout 120 .carry/mla_standalone_trace s8trace one > /tmp/tr1.log 2>&1
echo "== s8trace one rc $?" >> $L; grep -E "s8trace|^ *[0-9]+ |tile|us" /tmp/tr1.log | head -60 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
