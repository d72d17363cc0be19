#!/bin/bash
# Session 40, call 5, carry [".carry/drv", ".carry/flashmla_fold"]: on one machine, our seesaw's math alone (the standalone
# driver's `load` mode: whole / main-only / loads-only / math-only at H=128 G=1 B=64, multicast; .carry/drv is session 39's
# driver, whose default kernels are main's) against FlashMLA fed from HBM and from L2 (FLASHMLA_REF_FOLD=128), twice.
L=$OUT/s40e.log
nvidia-smi -L > $L
for r in 1 2; do
  timeout 150 .carry/drv/mla_standalone load 128 tma_multicast > /tmp/drv.log 2>&1
  echo "== standalone r$r rc $?: $(grep -c PASS /tmp/drv.log) PASS, $(grep -c FAIL /tmp/drv.log) FAIL" >> $L
  grep -E "^load B=(64|16) G=(1|4) H=128 tma_multicast" /tmp/drv.log >> $L
  for f in 0 128; do
    echo "== flashmla r$r fold=$f" >> $L
    FLASHMLA_REF_FOLD=$f timeout 60 .carry/flashmla_fold 20 64:1:128:65536 2>&1 | grep -E "FAIL|flashmla" >> $L
  done
done
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
