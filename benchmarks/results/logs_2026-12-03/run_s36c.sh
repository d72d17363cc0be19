#!/bin/bash
# Session 36, call 3, from branch wip/static-w (attempt 76 as landed: the multicast pair kernel at exactly 4 row tiles
# with one consumer code copy per warpgroup, mla_seesaw kVar bit 128; every other kernel as main's) with carry
# [".carry"]: .carry/lib_sw2 (this branch's library) and .carry/lib_base (main's kernels).
# (1) lib_sw2: the 7 contract cases twice, pytest f16 cases (one new at G*H = 256) and the forced pair multicast case;
# (2) three alternating rounds sw2 / base at 4 row tiles (H=64 G=4, H=128 G=2; B = 16 / 64);
# (3) the issue shapes with the ceilings in one run (bf16 + fp8), as session 35's final run.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s36c.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
SW=$PWD/.carry/lib_sw2 BASE=$PWD/.carry/lib_base
export HELIX_JAX_FFI_LIB_DIR=$SW
start=$(date +%s)
timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/s36c_rep_sw2.log 2>&1
echo "== repeat sw2 rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' $OUT/s36c_rep_sw2.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/s36c_rep_sw2.log)" >> $L
start=$(date +%s)
timeout 120 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "f16 or pair-tma_multicast-right" > $OUT/s36c_pt.log 2>&1
echo "== pytest sw2 rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/s36c_pt.log | tail -6 | cut -c1-200 >> $L
start=$(date +%s)
timeout 120 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_decode_variant" > $OUT/s36c_pt_fmt.log 2>&1
echo "== pytest sw2 fp8 decode variant (its f16 kernel's SASS moved two zeroing instructions) rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/s36c_pt_fmt.log | tail -3 | cut -c1-200 >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 64x4,128x2"
for r in 1 2 3; do
  ab_bench sw2_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$SW
  ab_bench base_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$BASE
done
A="--backends ffi --B 16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
timeout 200 python3 benchmarks/mla_decode.py $A --kv-dtypes bf16,fp8_e4m3 --name mla_decode_s36_final --out $OUT > /tmp/d1.log 2>&1
echo "== bench default rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
sed -i "s#rootdir: /work/main#rootdir: .#; s#$PWD/#\$PWD/#g" $OUT/s36c_pt.log $OUT/s36c_pt_fmt.log
cat $L
