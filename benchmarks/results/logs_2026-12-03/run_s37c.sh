#!/bin/bash
# Session 37, call 3, from main + the HELIX_GRID_ROWS_FIRST switch, carry ["helix_jax/_lib", ".carry"]:
# call 2 found FlashMLA's two row-tile CTAs of a part missing L2 together (L2 hit rate 0.9 %, L2 throughput 75 %) where our
# pair form with consumer-issued evict-first copies hits 35 % at 84 % L2 throughput: FlashMLA launches a part's row tiles
# next to each other (grid (m blocks, parts)), ours 66 CTAs apart (grid (parts, row tiles)). .carry/lib_rows = main's
# kernels built with -DHELIX_GRID_ROWS_FIRST=1 (grid (row tiles, parts), clusters 2 x 1 x 1); helix_jax/_lib = main.
# (1) lib_rows: the 7 bf16 contract cases and the fp8 cases twice (oracle + bitwise);
# (2) two alternating rounds rows / main, default schedule and SCHED=pair LOAD=tma_evict_first, bf16 H=128 G=1 / 4 and
#     H=64 G=4 at B = 16 / 64; fp8 H=128 G=1 and H=16 G=4 at B=64.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s37c.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
ROWS=$PWD/.carry/lib_rows MAIN=$PWD/helix_jax/_lib
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$ROWS timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/s37c_rep_rows.log 2>&1
echo "== repeat rows rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' $OUT/s37c_rep_rows.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/s37c_rep_rows.log)" >> $L
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$ROWS timeout 80 python3 benchmarks/mla_decode_repeat.py --suite formats --fmt fp8_e4m3 --runs 2 > $OUT/s37c_rep_rows_fp8.log 2>&1
echo "== repeat rows fp8 rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' $OUT/s37c_rep_rows_fp8.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/s37c_rep_rows_fp8.log)" >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4"
P="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1"
F="--B 64 --L 65536 --iterations 20 --kv-dtypes fp8_e4m3 --hg 128x1,16x4"
for r in 1 2; do
  ab_bench rows_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$ROWS
  ab_bench main_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
  ab_bench rows_pair_r$r $L $P -- HELIX_JAX_FFI_LIB_DIR=$ROWS HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_evict_first
  ab_bench main_pair_r$r $L $P -- HELIX_JAX_FFI_LIB_DIR=$MAIN HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_evict_first
  ab_bench rows_fp8_r$r $L $F -- HELIX_JAX_FFI_LIB_DIR=$ROWS
  ab_bench main_fp8_r$r $L $F -- HELIX_JAX_FFI_LIB_DIR=$MAIN
done
echo "== $(date +%T.%N | cut -c1-12) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
