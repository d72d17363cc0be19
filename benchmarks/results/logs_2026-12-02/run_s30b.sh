#!/bin/bash
# Session 30, call 2: mla_mid_q8w with a four-tile ring (Q one term, [64 rows], in the room of Q's lo rows), built with
# HELIX_W8_VOTE=0 (.carry/lib_w4_0: S of tile j + 1 always issued before the softmax of tile j) and =1 (.carry/lib_w4_1:
# only where tile j + 1 has landed, by a warpgroup-wide vote; else the softmax first). The one-term GPU cases under each,
# then two alternating rounds against mla_mid_q8s (one term) at H=16 G=4 and H=128 G=1, B=64, L=64K; last the nvfp4
# no-staging bf16-math case that call 1's limit cut (HEAD's kernels).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s30b.log
nvidia-smi -L > $L
ok=""
for v in 0 1; do
  start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_w4_$v HELIX_MLA_DECODE_MID8=ws HELIX_MLA_DECODE_FP8_Q=one timeout 120 python3 -m pytest \
    -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_formats.py -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" -s > /tmp/t$v.log 2>&1
  echo "== lib_w4_$v ws one-term GPU cases rc $? $(( $(date +%s) - start )) s" >> $L
  grep -E "FAILED|ERROR|passed|failed|one-term Q|rising max|rel error" /tmp/t$v.log | cut -c1-170 >> $L
  grep -q "13 passed" /tmp/t$v.log && ok="$ok $v"
done
export AB_TMP=/tmp AB_TIMEOUT=70
A="--B 64 --L 65536 --iterations 20 --hg 16x4,128x1 --kv-dtypes fp8_e4m3"
for r in 1 2; do
  for v in $ok; do
    ab_bench w4_${v}_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_w4_$v HELIX_MLA_DECODE_MID8=ws HELIX_MLA_DECODE_FP8_Q=one
  done
  ab_bench s8_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_w4_0 HELIX_MLA_DECODE_MID8=seesaw HELIX_MLA_DECODE_FP8_Q=one
done
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_w4_0 timeout 130 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider \
  tests/test_mla_decode_formats.py -k "without_staging and bf16" > /tmp/d.log 2>&1
echo "== -k \"without_staging and bf16\" rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed" /tmp/d.log | sed -e 's/^tests\/test_mla_decode_formats.py:://' | cut -c1-150 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
