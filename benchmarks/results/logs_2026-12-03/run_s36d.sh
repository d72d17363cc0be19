#!/bin/bash
# Session 36, call 4, from main with carry [".carry"]: attempt 76 (.carry/lib_sw2 = main's library) against main's
# kernels before it (.carry/lib_base) at 4 row tiles, B=64, under sustained load, where the 20-call rounds move +-5 %
# with the power cap: 400 back-to-back calls per run (the median of their CUPTI times), three alternating rounds, with
# nvidia-smi every 50 ms.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s36d.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
SW=$PWD/.carry/lib_sw2 BASE=$PWD/.carry/lib_base
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader -lms 50 > $OUT/s36d_smi.csv &
SMI=$!
A="--B 64 --L 65536 --iterations 400 --kv-dtypes bf16 --hg 64x4,128x2"
for r in 1 2 3; do
  echo "== $(date +%T.%N | cut -c1-12)" >> $L
  ab_bench sus_sw2_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$SW
  echo "== $(date +%T.%N | cut -c1-12)" >> $L
  ab_bench sus_base_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$BASE
done
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 64x4,128x2"
for r in 1 2; do
  ab_bench sw2_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$SW
  ab_bench base_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$BASE
done
echo "== $(date +%T.%N | cut -c1-12) end" >> $L
kill $SMI
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
