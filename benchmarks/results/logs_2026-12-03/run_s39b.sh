#!/bin/bash
# Session 39, call 2, carry ["helix_jax/_lib", ".carry/lib_spare"]: attempt 81 as its own instantiations (mla_seesaw kVar
# bit 256; the plain grid's kernels SASS-identical to main's). .carry/lib_spare = this tree's library, helix_jax/_lib = main's.
# (1) lib_spare: the 9 bf16 contract cases twice under the default, LOAD=tma_evict_first, LOAD=cpasync and SPARE=off;
#     the f16 cases and the bad-value error;
# (2) timing, two alternating rounds lib_spare / main at H=128 G = 4, 8, 1 (B = 16, 64); 400 back-to-back calls at
#     H=128 G=4 B=64;
# (3) the issue shapes with the ceilings in one run (lib_spare).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s39b.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
NEW=$PWD/.carry/lib_spare MAIN=$PWD/helix_jax/_lib
for v in "" "HELIX_MLA_DECODE_LOAD=tma_evict_first" "HELIX_MLA_DECODE_LOAD=cpasync" "HELIX_MLA_DECODE_SPARE=off"; do
  start=$(date +%s)
  env HELIX_JAX_FFI_LIB_DIR=$NEW $v timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > /tmp/rep.log 2>&1
  echo "== repeat [${v:-default}] rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' /tmp/rep.log), clean $(grep -c ' 0 oracle failures, 0 differ' /tmp/rep.log)" >> $L
  grep -iE "fail|differ|error" /tmp/rep.log | grep -v " 0 oracle failures, 0 differ" | head -5 >> $L
done
HELIX_JAX_FFI_LIB_DIR=$NEW timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_contract.py -k "test_gpu_contract_f16 or (bad_env and spare)" > /tmp/f16.log 2>&1
echo "== pytest f16 + bad spare (lib_spare) rc $?: $(tail -1 /tmp/f16.log)" >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x4,128x8,128x1"
for r in 1 2; do
  ab_bench spare_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$NEW
  ab_bench main_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
done
S="--B 64 --L 65536 --iterations 400 --kv-dtypes bf16 --hg 128x4"
ab_bench sus_spare $L $S -- HELIX_JAX_FFI_LIB_DIR=$NEW
ab_bench sus_main $L $S -- HELIX_JAX_FFI_LIB_DIR=$MAIN
A="--backends ffi --B 1,16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
HELIX_JAX_FFI_LIB_DIR=$NEW timeout 150 python3 benchmarks/mla_decode.py $A --kv-dtypes bf16 --name mla_decode_s39_spare --out $OUT > /tmp/d1.log 2>&1
echo "== bench final rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
