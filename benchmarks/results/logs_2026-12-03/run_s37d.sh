#!/bin/bash
# Session 37, call 4, from main + the HELIX_GRID_ROWS_FIRST and HELIX_PAIR_RQ switches, carry ["helix_jax/_lib", ".carry"]:
# call 2's source counters put 6.8 % of our pair form's samples (FlashMLA's order, SCHED=pair LOAD=tma_evict_first) at
# WG1's S_{t+3} rope-block wait: that block held P_{t+1} until WG0's P_{t+1} V_{t+1}, so it is refilled with the left
# half. .carry/lib_rq = rows-first grid + Q's rope block in registers (RS wgmmas), WG1's P in Q's rope block, tile t + 1's
# rope refilled with its right half (FlashMLA's rQ8 / sP1); .carry/lib_rows = rows-first only; helix_jax/_lib = main.
# (1) lib_rq under the pair form: the 7 bf16 contract cases twice (oracle + bitwise);
# (2) two alternating rounds: pair form on lib_rq / lib_rows, main's default, FlashMLA; H=128 G=1 B = 16 / 64, then the
#     pair form at H=64 G=4 and H=128 G=4.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s37d.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
RQ=$PWD/.carry/lib_rq ROWS=$PWD/.carry/lib_rows MAIN=$PWD/helix_jax/_lib
PAIR="HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_evict_first"
start=$(date +%s)
env HELIX_JAX_FFI_LIB_DIR=$RQ $PAIR timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/s37d_rep_rq.log 2>&1
echo "== repeat rq pair rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' $OUT/s37d_rep_rq.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/s37d_rep_rq.log)" >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1"
G="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 64x4,128x4"
for r in 1 2; do
  ab_bench rq_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$RQ $PAIR
  ab_bench rows_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$ROWS $PAIR
  ab_bench main_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
  echo "== $(date +%T.%N | cut -c1-12) flashmla r$r" >> $L
  timeout 60 .carry/flashmla_reference 20 64:1:128:65536 16:1:128:65536 | grep "^flashmla" >> $L 2>&1
done
for r in 1 2; do
  ab_bench rq_g4_r$r $L $G -- HELIX_JAX_FFI_LIB_DIR=$RQ $PAIR
  ab_bench main_g4_r$r $L $G -- HELIX_JAX_FFI_LIB_DIR=$MAIN
done
echo "== $(date +%T.%N | cut -c1-12) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
