#!/bin/bash
# Session 44, call 1, carry ["helix_jax/_lib", ".carry/lib_q3", ".carry/lib_q2"]: attempt 92, the split point of S_j
# (HELIX_SS_SPLIT: S_j's blocks issued before the other WG's PV_{j-1}; main 4, lib_q3 3, lib_q2 2; the 16-bit seesaws
# only). (1) three alternating timing rounds main / q3 / q2; (2) pytest GPU contract, f16 and rising-max cases under q3
# and q2; (3) per-kernel times of the last round.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s44a.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
L1=$PWD/helix_jax/_lib L2=$PWD/.carry/lib_q3 L3=$PWD/.carry/lib_q2
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4,16x4"
ab_bench head_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench q3_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench q2_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L3
for n in q3 q2; do
  D=$L2; [ $n = q2 ] && D=$L3
  HELIX_JAX_FFI_LIB_DIR=$D timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
    -k "(test_gpu_contract and ffi) or rising_max or contract_f16" > /tmp/pt_$n.log 2>&1
  echo "== pytest contract [$n] rc $?" >> $L
  grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt_$n.log | cut -c1-200 | head -20 >> $L
done
ab_bench q2_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L3
ab_bench q3_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench head_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench head_r3 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench q3_r3 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench q2_r3 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L3
for n in head q3 q2; do
  grep -h "backend=.*kernel_us" /tmp/ab_${n}_r3.log | sed -e "s/.*B=\([0-9]*\) .*G=\([0-9]*\) H=\([0-9]*\) .*kernel_us=/$n B=\1 G=\2 H=\3 /" >> $L
done
echo "== winner $(ab_winner $L)" >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
