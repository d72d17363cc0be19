#!/bin/bash
# Session 39, call 5, carry ["helix_jax/_lib"]: the other GPU tests that walk GPU_CASES (now with 16 row tiles in clusters
# and 5 without), on the tree that lands: every pair-schedule row and the TMA L2 promotion (the segment-cost rows did not fit the device time left).
export PYTHONPATH=$PWD
L=$OUT/s39e.log
nvidia-smi -L > $L
timeout 330 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "pair_schedule or tma_l2" > /tmp/pt.log 2>&1
echo "== pytest rc $?" >> $L
grep -E "^(PASSED|FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt.log | cut -c1-200 | head -40 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
