#!/bin/bash
# Session 44, call 8, carry ["helix_jax/_lib"]: the landed library (attempts 92, 93, 95; attempt 95's XOR addresses in
# every seesaw, so the decoding seesaws changed too: their 16-bit kernels are SASS-identical to call 7's lib_px).
# (1) pytest GPU contract, f16 and rising-max cases, the fp8 / nvfp4 format cases; (2) the issue shapes with the ceilings.
export PYTHONPATH=$PWD
L=$OUT/s44h.log
nvidia-smi -L > $L
timeout 100 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "(test_gpu_contract and ffi) or rising_max or contract_f16" > /tmp/pt.log 2>&1
echo "== pytest contract [landed] rc $?" >> $L
grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt.log | cut -c1-200 | head -20 >> $L
timeout 150 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_formats.py \
  -k "ffi and test_gpu_formats and not f16" > /tmp/pt2.log 2>&1
echo "== pytest formats [landed] rc $?" >> $L
grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt2.log | cut -c1-200 | head -20 >> $L
A2="--backends ffi --B 1,16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
timeout 90 python3 benchmarks/mla_decode.py $A2 --kv-dtypes bf16 --name mla_decode_s44_final3 --out $OUT > /tmp/d1.log 2>&1
echo "== bench final3 [landed] rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' | cut -c1-260 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
