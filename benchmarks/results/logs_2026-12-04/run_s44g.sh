#!/bin/bash
# Session 44, call 7, carry ["helix_jax/_lib", ".carry/lib_px"]: attempt 95 (lib_px = the landed library + the owner's
# four P-store addresses as one swizzled address XOR 32 i, fewer instructions after S_j's wait) against the landed
# library. (1) pytest GPU contract, f16 and rising-max cases and the bf16 / f16 repeat cases under px; (2) three
# alternating timing rounds.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s44g.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
L1=$PWD/helix_jax/_lib L2=$PWD/.carry/lib_px
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4"
HELIX_JAX_FFI_LIB_DIR=$L2 timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "(test_gpu_contract and ffi) or rising_max or contract_f16" > /tmp/pt.log 2>&1
echo "== pytest contract [px] rc $?" >> $L
grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt.log | cut -c1-200 | head -20 >> $L
for dt in bf16 f16; do
  start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$L2 timeout 60 python3 benchmarks/mla_decode_repeat.py --runs 2 --dtype $dt > /tmp/rep.log 2>&1
  echo "== repeat [px $dt] rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' /tmp/rep.log), clean $(grep -c ' 0 oracle failures, 0 differ' /tmp/rep.log)" >> $L
  grep -iE "fail|differ|error" /tmp/rep.log | grep -v " 0 oracle failures, 0 differ" | head -5 >> $L
done
ab_bench head_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench px_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench px_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench head_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench head_r3 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench px_r3 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
echo "== winner $(ab_winner $L)" >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
