#!/bin/bash
# Session 43, call 3, carry ["helix_jax/_lib", ".carry/lib_comb2", ".carry/probe"]: attempt 91, second form (`lib_comb2` =
# main + the combine with 1-8 warps per row, four segments per step, at most 3 blocks of 8 warps per SM) against main's
# library (helix_jax/_lib). (0) every seesaw CTA's start / end / SM in one call, the slowest CTAs named (standalone driver
# built with -DHELIX_SS_TRACE, mode spread), the combine kernels alone (mode comb); (1) pytest
# under lib_comb2: GPU contract cases (ffi), f16 and rising-max cases, the fp8 / nvfp4 format cases (their rows always go
# through the combine); (2) the bf16 and f16 repeat cases; (3) two alternating timing rounds.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s43c.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
L1=$PWD/helix_jax/_lib L2=$PWD/.carry/lib_comb2
timeout 90 .carry/probe/mla_standalone_trace spread > /tmp/spread.log 2>&1
echo "== spread rc $?" >> $L
grep -E "spread|error|rror" /tmp/spread.log | head -40 >> $L
timeout 60 .carry/probe/mla_standalone_trace comb > /tmp/comb.log 2>&1
echo "== comb (new narrow vs wide, standalone) rc $?" >> $L
grep -vE "^\s*$" /tmp/comb.log | tail -20 >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4,16x4"
ab_bench head_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench comb2_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
HELIX_JAX_FFI_LIB_DIR=$L2 timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "(test_gpu_contract and ffi) or rising_max or contract_f16" > /tmp/pt.log 2>&1
echo "== pytest contract [comb] rc $?" >> $L
grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt.log | cut -c1-200 | head -20 >> $L
HELIX_JAX_FFI_LIB_DIR=$L2 timeout 150 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_formats.py \
  -k "ffi and test_gpu_formats and not f16" > /tmp/pt2.log 2>&1
echo "== pytest formats [comb] rc $?" >> $L
grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt2.log | cut -c1-200 | head -20 >> $L
for dt in bf16 f16; do
  start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$L2 timeout 60 python3 benchmarks/mla_decode_repeat.py --runs 2 --dtype $dt > /tmp/rep.log 2>&1
  echo "== repeat [comb $dt] rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' /tmp/rep.log), clean $(grep -c ' 0 oracle failures, 0 differ' /tmp/rep.log)" >> $L
  grep -iE "fail|differ|error" /tmp/rep.log | grep -v " 0 oracle failures, 0 differ" | head -5 >> $L
done
ab_bench comb2_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench head_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
grep -h "backend=.*kernel_us" /tmp/ab_comb2_r2.log /tmp/ab_head_r2.log | sed -e 's/.*B=\([0-9]*\) .*G=\([0-9]*\) H=\([0-9]*\) .*kernel_us=/B=\1 G=\2 H=\3 /' >> $L
echo "== winner $(ab_winner $L)" >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
