#!/bin/bash
# Session 37, call 5, from main + s37_rows_first_pair_rq.patch (switches at their default 0) with kSsProducerRegs /
# kSsConsumerRegs 56 / 224 (was 40 / 232), carry
# ["helix_jax/_lib", ".carry"]: call 2's source counters showed the seesaw producer's steady loop executing ~9 spill
# loads / stores per tile and warp (5.5 M local-memory requests per launch at H=128 G=1 B=64) on the path from a release
# to the refill's TMA. .carry/lib_reg: the seesaw kernels' spill instructions 55 -> 10 (kLoad 1-3), 12-22 -> 0 (the
# multicast pair kernels); no C75xx; sass_arrive_check 0. helix_jax/_lib = main.
# (1) lib_reg: the 7 bf16 contract cases twice (oracle + bitwise);
# (2) two alternating 20-call rounds reg / main over bf16 H=128 G=1 / 4, H=64 G=4, H=16 G=4 at B = 16 / 64;
# (3) sustained load, 400 back-to-back calls, reg / main / reg / main at H=128 G=1 B=64 and H=64 G=4 B=64.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s37e.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
REG=$PWD/.carry/lib_reg MAIN=$PWD/helix_jax/_lib
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$REG timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/s37e_rep_reg.log 2>&1
echo "== repeat reg rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' $OUT/s37e_rep_reg.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/s37e_rep_reg.log)" >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4,16x4"
for r in 1 2; do
  ab_bench reg_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$REG
  ab_bench main_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
done
S="--B 64 --L 65536 --iterations 400 --kv-dtypes bf16 --hg 128x1,64x4"
for r in 1 2; do
  echo "== $(date +%T.%N | cut -c1-12)" >> $L
  ab_bench sus_reg_r$r $L $S -- HELIX_JAX_FFI_LIB_DIR=$REG
  echo "== $(date +%T.%N | cut -c1-12)" >> $L
  ab_bench sus_main_r$r $L $S -- HELIX_JAX_FFI_LIB_DIR=$MAIN
done
echo "== $(date +%T.%N | cut -c1-12) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
