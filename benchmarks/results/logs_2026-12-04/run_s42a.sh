#!/bin/bash
# Session 42, call 2, carry ["helix_jax/_lib", ".carry/lib_lazy"]: attempt 86 (the seesaw's lazy pass: exponentials
# against the running max with no row max, verified by the per-thread row sums <= 2^8, the exact pass otherwise;
# `lib_lazy`) against main's library (helix_jax/_lib). (1) pytest under lib_lazy: the new rising-max cases (bf16, f16),
# the GPU contract cases (ffi), the f16 cases; the rising-max cases under main too; (2) the 9 bf16 / f16 contract cases
# twice (oracle + bitwise) under lib_lazy; (3) three alternating timing rounds main / lazy.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s42a.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
LAZY=$PWD/.carry/lib_lazy MAIN=$PWD/helix_jax/_lib
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4,16x4"
ab_bench main_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
ab_bench lazy_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$LAZY
HELIX_JAX_FFI_LIB_DIR=$LAZY timeout 200 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "(test_gpu_contract and ffi) or rising_max or contract_f16" > /tmp/pt.log 2>&1
echo "== pytest [lazy] rc $?" >> $L
grep -E "^(PASSED|FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt.log | cut -c1-200 | head -40 >> $L
HELIX_JAX_FFI_LIB_DIR=$MAIN timeout 60 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "rising_max" > /tmp/pt2.log 2>&1
echo "== pytest [main] rising_max rc $?" >> $L
grep -E "passed|failed" /tmp/pt2.log | tail -2 >> $L
for d in bf16 f16; do
  start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$LAZY timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 --dtype $d > /tmp/rep.log 2>&1
  echo "== repeat [lazy $d] rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' /tmp/rep.log), clean $(grep -c ' 0 oracle failures, 0 differ' /tmp/rep.log)" >> $L
  grep -iE "fail|differ|error" /tmp/rep.log | grep -v " 0 oracle failures, 0 differ" | head -5 >> $L
done
ab_bench lazy_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$LAZY
ab_bench main_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
ab_bench main_r3 $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
ab_bench lazy_r3 $L $A -- HELIX_JAX_FFI_LIB_DIR=$LAZY
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
