#!/bin/bash
# Prepared in session 34 for the next session (main, the landed library built by ffi/build.sh into helix_jax/_lib and
# carried as [".carry"] with .carry/lib_land = that library and the CPU one). Should `auto` run the pair schedule
# (PAIR_MC=right) at 4 row tiles too (G*H = 256: H=128 G=2, H=64 G=4)? Session 34 saw +1.5 % / +4 % on the median at
# B=64 but a 3.6-3.96 ms spread at H=64 G=4 (power cap). Three alternating rounds, B = 16 / 64, with nvidia-smi sampling
# the SM clock and power every 50 ms, so rounds run at a lower clock can be told apart.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s35a.log
nvidia-smi -L > $L
export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_land AB_TMP=/tmp AB_TIMEOUT=80
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 50 > $OUT/s35a_smi.csv &
SMI=$!
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x2,64x4"
for r in 1 2 3; do
  echo "== $(date +%T) round $r" >> $L
  ab_bench auto_r$r $L $A
  echo "== $(date +%T)" >> $L
  ab_bench pair_r$r $L $A -- HELIX_MLA_DECODE_SCHED=pair
done
echo "== $(date +%T) end" >> $L
kill $SMI
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
