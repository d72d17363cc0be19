#!/bin/bash
# Session 27, call 7: the two-term fast chains with the ldmatrix V^T and without the per-thread row sums (the f32 per-tile
# sums of variant 512; -DHELIX_S8_LDSM_ALL, .carry/lib_all: STL / LDL 12 / 20 instead of 37 / 57) against the landed
# library (.carry/lib_c2). GPU tests of the default fp8 FFI formats and determinism on lib_all first; then fp8 (default)
# at H=16 G=4, B = 16 / 64, two alternating rounds.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s27g.log
nvidia-smi -L > $L
C=$PWD/.carry
HELIX_JAX_FFI_LIB_DIR=$C/lib_all timeout 150 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py \
  -k "fp8_e4m3 and ffi and (test_gpu_formats or deterministic or r2)" > /tmp/t.log 2>&1
echo "pytest default fp8 FFI lib_all rc $?" >> $L; grep -E "passed|failed|FAILED" /tmp/t.log | tail -6 >> $L
export AB_TMP=/tmp AB_TIMEOUT=40
for r in 1 2; do
  ab_bench all_r$r $L --B 16,64 --L 65536 --hg 16x4 --iterations 20 --kv-dtypes fp8_e4m3 -- HELIX_JAX_FFI_LIB_DIR=$C/lib_all
  ab_bench c2_r$r $L --B 16,64 --L 65536 --hg 16x4 --iterations 20 --kv-dtypes fp8_e4m3 -- HELIX_JAX_FFI_LIB_DIR=$C/lib_c2
done
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
