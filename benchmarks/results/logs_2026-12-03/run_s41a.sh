#!/bin/bash
# Session 41, call 1, carry ["helix_jax/_lib", ".carry/lib_emu0x49", ".carry/lib_emu0x11", ".carry/lib_emu0x55",
# ".carry/lib_s5", ".carry/lib_s5e49", ".carry/lib_tree"]: attempt 83 (some of the seesaw softmax's 32 exp2 per thread on the FMA pipe,
# Exp2Fma; build macro HELIX_SS_EXP_FMA = a mask over the 8 column blocks: 0x11 -> 8, 0x49 -> 12, 0x55 -> 16 of 32) and
# attempt 84 (HELIX_SS_SPLIT=5: S_j's own V half and rope block before the other WG's tile j-1, was 4), alone and
# together (s5e49), and attempt 85 (lib_tree: a balanced max tree in MaskedRowMax, HELIX_SS_MAX_TREE=1). helix_jax/_lib = main's. (1) timing round 1 over all six libraries; (2) the 9 bf16 contract cases
# twice (oracle + bitwise) under emu0x55, s5e49 and tree, f16 under emu0x55; (3) timing round 2 in reverse order.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s41a.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4,16x4"
LIBS="main emu0x11 emu0x49 emu0x55 s5 s5e49 tree"
dir() { if [ $1 = main ]; then echo $PWD/helix_jax/_lib; else echo $PWD/.carry/lib_$1; fi; }
for v in $LIBS; do ab_bench ${v}_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$(dir $v); done
for v in "emu0x55 bf16" "s5e49 bf16" "emu0x55 f16" "tree bf16"; do
  set -- $v
  start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$(dir $1) timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 --dtype $2 > /tmp/rep.log 2>&1
  echo "== repeat [$1 $2] rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' /tmp/rep.log), clean $(grep -c ' 0 oracle failures, 0 differ' /tmp/rep.log)" >> $L
  grep -iE "fail|differ|error" /tmp/rep.log | grep -v " 0 oracle failures, 0 differ" | head -5 >> $L
done
for v in $(echo $LIBS | tr ' ' '\n' | tac); do ab_bench ${v}_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$(dir $v); done
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
