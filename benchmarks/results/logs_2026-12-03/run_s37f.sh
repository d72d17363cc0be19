#!/bin/bash
# Session 37, call 6, from main + the setmaxnreg budgets 56 / 224 (the change landed), carry ["helix_jax/_lib", ".carry"]:
# .carry/lib_land = that tree's library (only the 20 non-decoding mla_seesaw kernels differ from main's, cuobjdump);
# helix_jax/_lib = main. Call 5 measured the same budgets in a library that also carried the session's (disabled)
# experiment switches, whose codegen differed slightly elsewhere; this call measures the library that lands.
# (1) lib_land: the 7 bf16 contract cases twice (oracle + bitwise);
# (2) the issue shapes with the ceilings in one run (bf16);
# (3) sustained load, 400 back-to-back calls, land / main at H=128 G=1 B=64 and H=64 G=4 B=64;
# (4) one 20-call round land / main.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s37f.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
LAND=$PWD/.carry/lib_land MAIN=$PWD/helix_jax/_lib
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$LAND timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/s37f_rep_land.log 2>&1
echo "== repeat land rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' $OUT/s37f_rep_land.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/s37f_rep_land.log)" >> $L
A="--backends ffi --B 1,16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
HELIX_JAX_FFI_LIB_DIR=$LAND timeout 150 python3 benchmarks/mla_decode.py $A --kv-dtypes bf16 --name mla_decode_s37_final --out $OUT > /tmp/d1.log 2>&1
echo "== bench final rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
S="--B 64 --L 65536 --iterations 400 --kv-dtypes bf16 --hg 128x1,64x4"
ab_bench sus_land $L $S -- HELIX_JAX_FFI_LIB_DIR=$LAND
ab_bench sus_main $L $S -- HELIX_JAX_FFI_LIB_DIR=$MAIN
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4,16x4"
ab_bench land_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$LAND
ab_bench main_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
echo "== $(date +%T.%N | cut -c1-12) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
