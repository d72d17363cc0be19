#!/bin/bash
# Session 39, call 1, carry ["helix_jax/_lib", ".carry/lib_spare"]: attempt 81, the seesaw's spare units (the row-tile
# groups that do not divide the device's units take one more, narrower part). .carry/lib_spare = this tree's library,
# helix_jax/_lib = main's.
# (1) lib_spare: the 9 bf16 contract cases (two new: 16 row tiles in clusters, 5 row tiles without) twice under the
#     default, LOAD=tma_evict_first, LOAD=cpasync and SPARE=off; the f16 cases (one at 16 row tiles);
# (2) timing, two alternating rounds: lib_spare default / lib_spare SPARE=off / main, at the shapes with spare units
#     (H=128 G=4 B=16, 64; G=8 B=16) and without (H=128 G=1 B=64, H=64 G=4 B=16: the walk's cost alone).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s39a.log
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
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x4,128x1"
for r in 1 2; do
  ab_bench spare_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$NEW
  ab_bench off_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$NEW HELIX_MLA_DECODE_SPARE=off
  ab_bench main_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
done
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
