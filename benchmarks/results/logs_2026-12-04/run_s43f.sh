#!/bin/bash
# Session 43, call 6, carry [".carry/probe"]: the landed mla_combine under compute-sanitizer. The standalone driver
# (built from c1eabb4 + the combchk mode, no trace) runs four small cases whose combine takes 8 / 4 / 2 / 1 warps a row,
# each checked against the double reference; then memcheck, racecheck and synccheck on the combine kernel alone.
L=$OUT/s43f.log
nvidia-smi -L > $L
bin=.carry/probe/mla_standalone
timeout 60 $bin combchk > /tmp/cc.log 2>&1
echo "== combchk rc $?" >> $L
cat /tmp/cc.log >> $L
opt="--kernel-name kns=mla_combine"
compute-sanitizer --help 2>&1 | grep -q -- "--kernel-name" || opt="--filter kns=mla_combine"
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool $opt $bin combchk > /tmp/cs_$tool.log 2>&1
  echo "== compute-sanitizer $tool ($opt) rc $?" >> $L
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|combchk:|Invalid|rror" /tmp/cs_$tool.log | head -12 >> $L
done
echo "== $(date +%T) end" >> $L
cat $L
