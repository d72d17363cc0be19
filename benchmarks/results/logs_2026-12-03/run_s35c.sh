#!/bin/bash
# Session 35, call 2, from main with carry [".carry"]: helix_jax/_lib = main's library (the TmaKvBlock helper, SASS-
# identical to call 1's lib_tma; `auto` runs the pair schedule from 4 row tiles, G*H >= 256: host code only) and
# .carry/lib_land (576851f's library, `auto` = pair from 8 row tiles). (1) default environment: the 7 contract cases twice
# (case 4, H=128 G=2, now runs pair), pytest: the forced-seesaw pair-schedule case (cut by call 1's timeout), the f16
# cases and the bad-env cases; (2) two alternating rounds new / land at H=128 G=2 and H=64 G=4, B = 16 / 64; (3) the
# issue shapes with the ceilings in the same run: bf16 and fp8 (default and FP8_Q=one), nvfp4 at H=16 B=64.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s35c.log
nvidia-smi -L > $L
unset HELIX_JAX_FFI_LIB_DIR
start=$(date +%s)
timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/rep_main.log 2>&1
echo "== repeat main rc $? $(( $(date +%s) - start )) s" >> $L
echo "   cases $(grep -c ' runs, ' $OUT/rep_main.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/rep_main.log)" >> $L
start=$(date +%s)
timeout 120 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "pair_schedule and seesaw-auto or contract_f16 or bad_env" > $OUT/s35c_pt.log 2>&1
echo "== pytest rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/s35c_pt.log | tail -7 | cut -c1-200 >> $L
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x2,64x4"
for r in 1 2; do
  ab_bench new_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
  ab_bench land_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_land
done
A="--backends ffi --B 16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
timeout 200 python3 benchmarks/mla_decode.py $A --kv-dtypes bf16,fp8_e4m3 --name mla_decode_s35_final --out $OUT > /tmp/d1.log 2>&1
echo "== bench default rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
HELIX_MLA_DECODE_FP8_Q=one timeout 80 python3 benchmarks/mla_decode.py $A --kv-dtypes fp8_e4m3 --no-ceilings \
  --name mla_decode_s35_final_fp8_q_one --out $OUT > /tmp/d2.log 2>&1
echo "== bench FP8_Q=one rc $?" >> $L
grep -E "backend=" /tmp/d2.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
timeout 80 python3 benchmarks/mla_decode.py --backends ffi --B 64 --L 65536 --hg 16x1,16x4 --iterations 20 \
  --kv-dtypes bf16,nvfp4 --no-ceilings --name mla_decode_s35_nvfp4 --out $OUT > /tmp/d3.log 2>&1
echo "== bench nvfp4 rc $?" >> $L
grep -E "backend=" /tmp/d3.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
sed -i "s#rootdir: /work/main#rootdir: .#; s#$PWD/#\$PWD/#g" $OUT/s35c_pt.log
cat $L
