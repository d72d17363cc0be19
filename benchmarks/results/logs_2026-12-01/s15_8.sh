#!/usr/bin/env bash
# session 15, call 8 (short: the last device minutes): mla_mid_q8s's f32 S with two chains per 32-token half (probe bit
# 1024) against four: lse on the 80- and 64-row cases, then timings at H=128 G=1 and H=16 G=4 (B=64, L=64K).
for a in "17920 5 16" "17920 4 16" "16896 4 16"; do
  timeout 30 .carry/mla_standalone m8chk $a > $OUT/s15_8_m8chk.log 2>&1
  echo "m8chk $a rc=$?"; grep -E "o rel err" $OUT/s15_8_m8chk.log | head -2
done
timeout 60 .carry/mla_standalone s8big 2>&1 | tee $OUT/s15_8_s8big.log
