#!/bin/bash
# Session 27, call 5: call 4's whole-call view of mla_mid_q8s again, with clock64 beside globaltimer at every CTA's
# consumer start and end (the mean SM clock over the call): one term and two terms, B=64 L=64K, H=16 G=4 and H=128 G=1.
L=$OUT/s27e.log
nvidia-smi -L > $L
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv >> $L
timeout 120 .carry/mla_standalone_trace s8trace one > /tmp/tr1.log 2>&1
echo "== s8trace one rc $?" >> $L; grep -E "s8cta|CTA|step-to-step" /tmp/tr1.log >> $L
timeout 120 .carry/mla_standalone_trace s8trace > /tmp/tr2.log 2>&1
echo "== s8trace (two terms) rc $?" >> $L; grep -E "s8cta|CTA|step-to-step" /tmp/tr2.log >> $L
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
