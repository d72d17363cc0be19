#!/bin/bash
# Session 43, call 4, carry ["helix_jax/_lib", ".carry/lib_comb2", ".carry/lib_comb3"]: attempt 91, third form (`lib_comb3`
# = lib_comb2's combine with a ballot-driven walk for one warp per row: lane k reads the segment range of the warp's k-th
# next row, the warp merges only the rows that need it). (1) pytest under lib_comb3: GPU contract cases (ffi), f16 and
# rising-max cases, the fp8 / nvfp4 format cases; (2) the bf16 repeat cases; (3) two alternating timing rounds of main /
# comb2 / comb3; (4) the issue shapes with the ceilings under the round's winner (a library that failed a test excluded).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s43d.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
L1=$PWD/helix_jax/_lib L2=$PWD/.carry/lib_comb2 L3=$PWD/.carry/lib_comb3
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4,16x4"
ab_bench head_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench comb2_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench comb3_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L3
ok3=1
HELIX_JAX_FFI_LIB_DIR=$L3 timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "(test_gpu_contract and ffi) or rising_max or contract_f16" > /tmp/pt.log 2>&1
rc=$?; [ $rc -ne 0 ] && ok3=0
echo "== pytest contract [comb3] rc $rc" >> $L
grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt.log | cut -c1-200 | head -20 >> $L
HELIX_JAX_FFI_LIB_DIR=$L3 timeout 150 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_formats.py \
  -k "ffi and test_gpu_formats and not f16" > /tmp/pt2.log 2>&1
rc=$?; [ $rc -ne 0 ] && ok3=0
echo "== pytest formats [comb3] rc $rc" >> $L
grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt2.log | cut -c1-200 | head -20 >> $L
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$L3 timeout 60 python3 benchmarks/mla_decode_repeat.py --runs 2 --dtype bf16 > /tmp/rep.log 2>&1
rc=$?; [ $rc -ne 0 ] && ok3=0
clean=$(grep -c ' 0 oracle failures, 0 differ' /tmp/rep.log); [ "$clean" != 10 ] && ok3=0
echo "== repeat [comb3 bf16] rc $rc $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' /tmp/rep.log), clean $clean" >> $L
grep -iE "fail|differ|error" /tmp/rep.log | grep -v " 0 oracle failures, 0 differ" | head -5 >> $L
ab_bench comb3_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L3
ab_bench comb2_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench head_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
for n in head comb2 comb3; do
  grep -h "backend=.*kernel_us" /tmp/ab_${n}_r2.log | sed -e "s/.*B=\([0-9]*\) .*G=\([0-9]*\) H=\([0-9]*\) .*kernel_us=/$n B=\1 G=\2 H=\3 /" >> $L
done
W=$(ab_winner $L)
[ "$W" = comb3 ] && [ $ok3 = 0 ] && W=comb2
echo "== winner $W (comb3 tests ok: $ok3)" >> $L
D=$L1; [ "$W" = comb2 ] && D=$L2; [ "$W" = comb3 ] && D=$L3
A2="--backends ffi --B 1,16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
HELIX_JAX_FFI_LIB_DIR=$D timeout 100 python3 benchmarks/mla_decode.py $A2 --kv-dtypes bf16 --name mla_decode_s43_final --out $OUT > /tmp/d1.log 2>&1
echo "== bench final [$W] rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' | cut -c1-260 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
