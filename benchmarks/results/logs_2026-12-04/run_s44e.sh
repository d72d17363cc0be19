#!/bin/bash
# Session 44, call 5, carry ["helix_jax/_lib"]: the landed library (attempts 92-93; SASS-identical to call 3's lib_q2la).
# (1) pytest GPU contract, f16 and rising-max cases; (2) compute-sanitizer memcheck and synccheck on the seesaw kernels
# (benchmarks/mla_decode_sanitize.py: bf16 / fp8 / nvfp4 pages, G*H = 80, two row tiles), racecheck with the seesaw off
# clusters (HELIX_MLA_DECODE_LOAD=tma_evict_first; racecheck fails internally on cluster launches, session 43);
# (3) the issue shapes with the ceilings once more, on this machine.
export PYTHONPATH=$PWD
L=$OUT/s44e.log
nvidia-smi -L > $L
timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "(test_gpu_contract and ffi) or rising_max or contract_f16" > /tmp/pt.log 2>&1
echo "== pytest contract [landed] rc $?" >> $L
grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt.log | cut -c1-200 | head -20 >> $L
opt="--kernel-name regex:mla_seesaw"
compute-sanitizer --help 2>&1 | grep -q -- "--kernel-name" || opt="--filter kns=mla_seesaw"
for tool in memcheck synccheck racecheck; do
  envs="XLA_PYTHON_CLIENT_ALLOCATOR=platform"
  [ $tool = racecheck ] && envs="$envs HELIX_MLA_DECODE_LOAD=tma_evict_first"
  env $envs timeout 150 compute-sanitizer --tool $tool $opt python3 benchmarks/mla_decode_sanitize.py > /tmp/cs_$tool.log 2>&1
  echo "== compute-sanitizer $tool ($envs, $opt) rc $?" >> $L
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|Invalid|rror|sanitize case" /tmp/cs_$tool.log | head -12 >> $L
done
A2="--backends ffi --B 1,16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
timeout 100 python3 benchmarks/mla_decode.py $A2 --kv-dtypes bf16 --name mla_decode_s44_final2 --out $OUT > /tmp/d1.log 2>&1
echo "== bench final2 [landed] rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' | cut -c1-260 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
