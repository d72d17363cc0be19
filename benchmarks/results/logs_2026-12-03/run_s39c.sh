#!/bin/bash
# Session 39, call 3, carry ["helix_jax/_lib", ".carry/lib_spare", ".carry/drv"]: call 2 timed H=128 G=4 B=64 (20 calls) at 6.74 ms with
# spare units against main's 7.50-7.57 in both rounds, but level over 400 calls and at B=16. Here that shape alone, one
# process per run, three rounds alternating lib_spare / main / lib_spare with SPARE=off, then the same after B=16.
# First the standalone driver of this tree (.carry/drv): its device PlanPart against the host's schedule on 300 random
# batches, half of them with a spare part (xk), and its contract cases on every load path.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s39c.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
NEW=$PWD/.carry/lib_spare MAIN=$PWD/helix_jax/_lib
timeout 150 .carry/drv/mla_standalone load > $OUT/s39c_drv.log 2>&1
echo "== standalone load rc $?: $(grep -c PASS $OUT/s39c_drv.log) PASS, $(grep -c FAIL $OUT/s39c_drv.log) FAIL" >> $L
grep -E "device part plans|load paths passing|^load B=64 G=1 H=128 tma_multicast" $OUT/s39c_drv.log >> $L
A="--B 64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x4"
for r in 1 2 3; do
  ab_bench spare_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$NEW
  ab_bench main_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
  ab_bench off_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$NEW HELIX_MLA_DECODE_SPARE=off
done
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x4,128x8"
ab_bench main_b $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
ab_bench spare_b $L $A -- HELIX_JAX_FFI_LIB_DIR=$NEW
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L $OUT/s39c_drv.log
cat $L
