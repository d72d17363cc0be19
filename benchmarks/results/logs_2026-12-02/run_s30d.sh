#!/bin/bash
# Session 30, call 4: mla_mid_q8w with the S warpgroup's descriptors as offsets from four base descriptors per tile
# (.carry/lib_wd; call 3's profile put ~20 % of the S warpgroup's stall samples on per-wgmma descriptor arithmetic). The
# one-term GPU cases under ws, then three alternating rounds of ws / mla_mid_q8s (one term) / bf16 at H=16 G=4 and
# H=128 G=1, B=64, L=64K, against call 2's lib_w4_0 (the same kernel with per-wgmma descriptors).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s30d.log
nvidia-smi -L > $L
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_wd HELIX_MLA_DECODE_MID8=ws HELIX_MLA_DECODE_FP8_Q=one timeout 120 python3 -m pytest \
  -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_formats.py -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" -s > /tmp/t.log 2>&1
echo "== lib_wd ws one-term GPU cases rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "FAILED|ERROR|passed|failed|one-term Q|rising max|rel error" /tmp/t.log | cut -c1-170 >> $L
export AB_TMP=/tmp AB_TIMEOUT=70
A="--B 64 --L 65536 --iterations 20 --hg 16x4,128x1"
if grep -q "13 passed" /tmp/t.log; then
  for r in 1 2 3; do
    ab_bench wd_r$r $L $A --kv-dtypes fp8_e4m3 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_wd HELIX_MLA_DECODE_MID8=ws HELIX_MLA_DECODE_FP8_Q=one
    ab_bench s8_r$r $L $A --kv-dtypes fp8_e4m3 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_wd HELIX_MLA_DECODE_MID8=seesaw HELIX_MLA_DECODE_FP8_Q=one
    [ $r -eq 1 ] && ab_bench w4_r$r $L $A --kv-dtypes fp8_e4m3 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_w4_0 HELIX_MLA_DECODE_MID8=ws HELIX_MLA_DECODE_FP8_Q=one
    ab_bench bf16_r$r $L $A --kv-dtypes bf16 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_wd
  done
fi
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
