#!/bin/bash
# Session 27, call 4: where mla_mid_q8s's time outside its steady state goes. The trace build (.carry/mla_standalone_trace,
# -DHELIX_SS_TRACE) now also stamps every CTA's consumer start / end (globaltimer), its tiles and segments, and CTA 0's
# segment boundaries: s8trace (two terms, fast S) and s8trace one, B=64 L=64K, H=16 G=4 and H=128 G=1.
L=$OUT/s27d.log
nvidia-smi -L > $L
timeout 120 .carry/mla_standalone_trace s8trace one > /tmp/tr1.log 2>&1
echo "== s8trace one rc $?" >> $L; grep -E "s8trace|s8cta|CTA|^ *[0-9]+ |tile" /tmp/tr1.log | grep -v "^  4[0-9] \|^  5[01] " >> $L
timeout 120 .carry/mla_standalone_trace s8trace > /tmp/tr2.log 2>&1
echo "== s8trace (two terms) rc $?" >> $L; grep -E "s8trace|s8cta|CTA" /tmp/tr2.log >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
