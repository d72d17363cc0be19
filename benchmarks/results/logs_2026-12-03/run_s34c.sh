#!/bin/bash
# Session 34, from branch land73 with carry [".carry"]: .carry/lib_land (attempt 73 landed: HELIX_MLA_DECODE_PAIR_MC
# default right) and .carry/lib_main (main a3591d8's library). (1) the 7 contract cases twice, default environment;
# (2) two alternating rounds land / main at H=128 G = 1 / 4, B = 16 / 64, L=64K; (3) the GPU pytest cases of the pair
# schedule (each PAIR_MC form), the bad-env cases and the f16 cases at G*H >= 512. (2b) pair against auto (the
# seesaw) at H=128 G = 1 / 2 and H=64 G=4.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s34c.log
nvidia-smi -L > $L
export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_land
start=$(date +%s)
timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/rep_land.log 2>&1
echo "== repeat land rc $? $(( $(date +%s) - start )) s" >> $L
echo "   cases $(grep -c ' runs, ' $OUT/rep_land.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/rep_land.log)" >> $L
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4"
for r in 1 2; do
  ab_bench land_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_land
  ab_bench main_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_main
done
# (2b) does pair with PAIR_MC=right also pay at 4 row tiles or fewer (auto runs the seesaw there)?
A2="--B 64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x2,64x4"
for r in 1 2; do
  ab_bench auto4_r$r $L $A2 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_land
  ab_bench pair4_r$r $L $A2 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_land HELIX_MLA_DECODE_SCHED=pair
done
start=$(date +%s)
timeout 200 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "pair_schedule or bad_env or contract_f16" > $OUT/pt.log 2>&1
echo "== pytest rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pt.log | tail -14 | cut -c1-200 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
sed -i "s#rootdir: /work/main#rootdir: .#" $OUT/pt.log
cat $L
