#!/bin/bash
# Session 35, call 3 (replaces run_s35d.sh, which was refused twice), from branch wip/row-max2 with carry
# [".carry", "helix_jax/_lib"]: helix_jax/_lib = main's library (0ced1d9 / 43f6f56: identical SASS), .carry/lib_rm = this
# branch's (MaskedRowMax shared with mla_mid_q8s's softmax: the 16 mla_mid_q8s kernels' SASS changes, the rest identical).
# (1) the refactored ceiling probes (benchmarks/common.py); (2) lib_rm: the fp8 determinism cases twice (oracle + bitwise)
# under the default, FP8_Q=one and FP8_S=f32, and pytest's fp8 FFI format cases; two alternating fp8 rounds rm / main at
# H=16 G=4 and H=128 G=1, B=64, default and FP8_Q=one; (3) PAIR_MC right / both at 4 row tiles; (4) H=128 G=1 B=1.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s35e.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
timeout 90 python3 -c "from benchmarks.common import *; print('ceilings: bf16 matmul %.1f, e4m3 matmul %.1f TFLOP/s, copy %.3f TB/s' % (matmul_tflop_per_s(), fp8_matmul_tflop_per_s(), copy_tb_per_s()))" >> $L 2>$OUT/ceil.err
echo "== ceilings rc $?" >> $L
RM=$PWD/.carry/lib_rm MAIN=$PWD/helix_jax/_lib
for v in "" HELIX_MLA_DECODE_FP8_Q=one HELIX_MLA_DECODE_FP8_S=f32; do
  start=$(date +%s)
  env $v HELIX_JAX_FFI_LIB_DIR=$RM timeout 80 python3 benchmarks/mla_decode_repeat.py --suite formats --fmt fp8_e4m3 --runs 2 > $OUT/rep_fp8.log 2>&1
  echo "== repeat fp8 [$v] rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' $OUT/rep_fp8.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/rep_fp8.log)" >> $L
done
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$RM timeout 120 python3 -m pytest -m gpu -rfE -p no:cacheprovider tests/test_mla_decode_formats.py \
  -k "fp8 and ffi and (test_gpu_formats or r2_examples)" > $OUT/s35e_pt.log 2>&1
echo "== pytest fp8 rc $? $(( $(date +%s) - start )) s: $(tail -1 $OUT/s35e_pt.log)" >> $L
A="--B 64 --L 65536 --iterations 20 --kv-dtypes fp8_e4m3 --hg 16x4,128x1"
for r in 1 2; do
  ab_bench rm_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$RM
  ab_bench main_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN
  ab_bench rm_one_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$RM HELIX_MLA_DECODE_FP8_Q=one
  ab_bench main_one_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$MAIN HELIX_MLA_DECODE_FP8_Q=one
done
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x2,64x4"
ab_bench right $L $A
ab_bench both $L $A -- HELIX_MLA_DECODE_PAIR_MC=both
ab_bench b1 $L --B 1 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1
sed -i "s#$PWD/#\$PWD/#g" $L
sed -i "s#rootdir: /work/main#rootdir: .#; s#$PWD/#\$PWD/#g" $OUT/s35e_pt.log
cat $L
