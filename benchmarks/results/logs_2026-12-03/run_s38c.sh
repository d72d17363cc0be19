#!/bin/bash
# Session 38, call 3, carry ["helix_jax/_lib", ".carry/lib_auto"]: `auto` = the seesaw schedule everywhere (host code
# only: SsSched; the kernels are SASS-identical to main's, cuobjdump). .carry/lib_auto = this tree's library,
# helix_jax/_lib = main's.
# (1) lib_auto: the 7 bf16 contract cases twice (oracle + bitwise; G*H >= 256 now runs the seesaw) and the f16 cases
#     at G*H >= 256;
# (2) the row-tile counts call 2 did not measure, on main's library: auto (pair) / SCHED=seesaw at H=128 G = 2, 8;
# (3) the issue shapes with the ceilings in one run (lib_auto);
# (4) 400 back-to-back calls lib_auto / main at H=64 G=4 and H=128 G=4, B=64.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s38c.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
NEW=$PWD/.carry/lib_auto MAIN=$PWD/helix_jax/_lib
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$NEW timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/s38c_rep_auto.log 2>&1
echo "== repeat auto rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' $OUT/s38c_rep_auto.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/s38c_rep_auto.log)" >> $L
HELIX_JAX_FFI_LIB_DIR=$NEW timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_contract.py -k "f16" > /tmp/f16.log 2>&1
echo "== pytest f16 (lib_auto) rc $?: $(tail -1 /tmp/f16.log)" >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x2,128x8"
for r in 1 2; do
  ab_bench auto_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
  ab_bench seesaw_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN HELIX_MLA_DECODE_SCHED=seesaw
done
A="--backends ffi --B 1,16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
HELIX_JAX_FFI_LIB_DIR=$NEW timeout 150 python3 benchmarks/mla_decode.py $A --kv-dtypes bf16 --name mla_decode_s38_final --out $OUT > /tmp/d1.log 2>&1
echo "== bench final rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
S="--B 64 --L 65536 --iterations 400 --kv-dtypes bf16 --hg 64x4,128x4"
ab_bench sus_new $L $S -- HELIX_JAX_FFI_LIB_DIR=$NEW
ab_bench sus_main $L $S -- HELIX_JAX_FFI_LIB_DIR=$MAIN
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
