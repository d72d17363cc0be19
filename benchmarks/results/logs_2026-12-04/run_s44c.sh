#!/bin/bash
# Session 44, call 3, carry ["helix_jax/_lib", ".carry/lib_q2", ".carry/lib_q2la"]: attempt 92 (S_j split after 2 blocks,
# lib_q2) and attempt 93 (lib_q2la = q2 + the owner's two buffer releases after its PV issue instead of inside the
# softmax chain) against main. (1) three alternating timing rounds; (2) under q2la: pytest GPU contract, f16 and rising-max
# cases, the bf16 and f16 repeat cases; (3) the issue shapes with the ceilings under the winner (q2la only if its tests passed).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s44c.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
L1=$PWD/helix_jax/_lib L2=$PWD/.carry/lib_q2 L3=$PWD/.carry/lib_q2la
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4,16x4"
ab_bench head_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench q2_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench q2la_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L3
ok=1
HELIX_JAX_FFI_LIB_DIR=$L3 timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "(test_gpu_contract and ffi) or rising_max or contract_f16" > /tmp/pt.log 2>&1
rc=$?; [ $rc -ne 0 ] && ok=0
echo "== pytest contract [q2la] rc $rc" >> $L
grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt.log | cut -c1-200 | head -20 >> $L
for dt in bf16 f16; do
  start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$L3 timeout 60 python3 benchmarks/mla_decode_repeat.py --runs 2 --dtype $dt > /tmp/rep.log 2>&1
  rc=$?; [ $rc -ne 0 ] && ok=0
  clean=$(grep -c ' 0 oracle failures, 0 differ' /tmp/rep.log); [ "$clean" != "$(grep -c ' runs, ' /tmp/rep.log)" ] && ok=0
  echo "== repeat [q2la $dt] rc $rc $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' /tmp/rep.log), clean $clean" >> $L
  grep -iE "fail|differ|error" /tmp/rep.log | grep -v " 0 oracle failures, 0 differ" | head -5 >> $L
done
ab_bench q2la_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L3
ab_bench q2_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench head_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench head_r3 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench q2_r3 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench q2la_r3 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L3
W=$(ab_winner $L)
[ "$W" = q2la ] && [ $ok = 0 ] && W=q2
echo "== winner $W (q2la tests ok: $ok)" >> $L
D=$L1; [ "$W" = q2 ] && D=$L2; [ "$W" = q2la ] && D=$L3
A2="--backends ffi --B 1,16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
HELIX_JAX_FFI_LIB_DIR=$D timeout 100 python3 benchmarks/mla_decode.py $A2 --kv-dtypes bf16 --name mla_decode_s44_final --out $OUT > /tmp/d1.log 2>&1
echo "== bench final [$W] rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' | cut -c1-260 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
