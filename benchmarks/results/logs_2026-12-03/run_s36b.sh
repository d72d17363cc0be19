#!/bin/bash
# Session 36, call 2, from branch wip/static-w with carry [".carry"]: .carry/lib_sw (this branch: the seesaw's consumer
# code in one copy per warpgroup with w a compile-time constant, for the kLoad 3 kernels only: the multicast seesaw and
# the multicast pair kernels; the other 101 kernels SASS-identical to main's) and .carry/lib_base (main's kernels).
# (1) lib_sw: the 7 contract cases twice; pytest: the pair-schedule cases, the f16 cases; (2) three alternating rounds
# sw / base, bf16 H=128 G=1 / 4, H=64 G=4, B = 16 / 64, L=64K.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s36b.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
SW=$PWD/.carry/lib_sw BASE=$PWD/.carry/lib_base
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$SW timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/s36b_rep_sw.log 2>&1
echo "== repeat sw rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' $OUT/s36b_rep_sw.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/s36b_rep_sw.log)" >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4"
for r in 1 2 3; do
  ab_bench sw_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$SW
  ab_bench base_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$BASE
done
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$SW timeout 200 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "pair_schedule or f16" > $OUT/s36b_pt.log 2>&1
echo "== pytest sw rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/s36b_pt.log | tail -14 | cut -c1-200 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
sed -i "s#rootdir: /work/main#rootdir: .#; s#$PWD/#\$PWD/#g" $OUT/s36b_pt.log
cat $L
