#!/bin/bash
# Session 38, call 4, from the tree that lands (`auto` = seesaw everywhere), carry ["helix_jax/_lib"] (its library,
# = call 3's lib_auto): (1) the new f16 row of test_gpu_contract_pair_schedule (the f16 pair kernels, now opt-in), its
# explicit-seesaw row and the f16 default cases; (2) the issue shapes with the ceilings in one run, on another machine.
export PYTHONPATH=$PWD
L=$OUT/s38d.log
nvidia-smi -L > $L
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "(pair_schedule and (f16 or seesaw)) or gpu_contract_f16" > /tmp/t.log 2>&1
echo "== pytest pair f16 / seesaw / f16 rc $?: $(tail -1 /tmp/t.log)" >> $L
grep -E "PASSED|FAILED|passed|failed" /tmp/t.log | tail -12 >> $L
A="--backends ffi --B 1,16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
timeout 150 python3 benchmarks/mla_decode.py $A --kv-dtypes bf16 --name mla_decode_s38_final2 --out $OUT > /tmp/d1.log 2>&1
echo "== bench final2 rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
