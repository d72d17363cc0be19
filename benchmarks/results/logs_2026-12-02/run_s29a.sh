#!/bin/bash
# Session 29, call 1: branch wip/seg-cost merged (.carry/lib_sc; the split-KV schedule's segment-start cost as
# HELIX_MLA_DECODE_SEG_COST). The standalone driver's device-plan check over random costs and its kernel checks under cost
# 1 and 16; the GPU contract cases plus the new seg-cost tests (contract, fp8 and nvfp4 determinism cases under costs
# 16 and 64; bad values); then two alternating rounds of SEG_COST = 1 / 8 / 20 on bf16 (H=128 G=1, H=16 G=4) and fp8
# (two terms H=16 G=4 and H=128 G=1, one term H=16 G=4), B=64, L=64K.
export PYTHONPATH=$PWD HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_sc
. benchmarks/ab_bench.sh
L=$OUT/s29a.log
nvidia-smi -L > $L
for c in 1 16; do
  HELIX_MLA_DECODE_SEG_COST=$c timeout 100 .carry/mla_standalone small > /tmp/sa_$c.log 2>&1
  echo "== standalone small SEG_COST=$c rc $?" >> $L
  grep -E "device part plans|PASS|FAIL|checks|error" /tmp/sa_$c.log | head -30 >> $L
done
timeout 240 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "seg_cost or (test_gpu_contract and not load_paths)" > /tmp/t1.log 2>&1
echo "pytest contract + seg cost rc $?" >> $L; grep -E "passed|failed|FAILED|Error" /tmp/t1.log | tail -12 >> $L
export AB_TMP=/tmp AB_TIMEOUT=60
A="--B 64 --L 65536 --iterations 20"
for r in 1 2; do
  for c in 1 8 20; do
    ab_bench bf16_c${c}_r$r $L $A --hg 128x1,16x4 --kv-dtypes bf16 -- HELIX_MLA_DECODE_SEG_COST=$c
    ab_bench fp8_c${c}_r$r $L $A --hg 16x4,128x1 --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_SEG_COST=$c
    ab_bench one_c${c}_r$r $L $A --hg 16x4 --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_SEG_COST=$c HELIX_MLA_DECODE_FP8_Q=one
  done
done
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
