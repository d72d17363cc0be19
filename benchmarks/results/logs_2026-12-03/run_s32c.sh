#!/bin/bash
# Session 32, call 3: attempt 68, wgmma descriptors moved on by one add (DescAdd) instead of rebuilt from the address
# before every wgmma (seesaw S / PV, mla_mid_q8s S8Block / PV): .carry/lib_desc against .carry/lib_head (HEAD's kernels).
# (1) alternating A/B, bf16 H=128 G=1 / G=4 B = 16 / 64, H=64 G=4, and fp8 H=16 G=4 (default and one-term Q), H=128 G=1;
# (2) the GPU contract and format tests on lib_desc, and the one-term fp8 cases.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s32c.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
A="--B 16,64 --L 65536 --iterations 20 --hg 128x1,128x4,64x4 --kv-dtypes bf16"
F="--B 64 --L 65536 --iterations 20 --hg 16x4,128x1 --kv-dtypes fp8_e4m3"
for r in 1 2; do
  ab_bench desc_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_desc
  ab_bench head_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
done
ab_bench desc_f8 $L $F -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_desc
ab_bench head_f8 $L $F -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
ab_bench desc_f8one $L $F -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_desc HELIX_MLA_DECODE_FP8_Q=one
ab_bench head_f8one $L $F -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head HELIX_MLA_DECODE_FP8_Q=one
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_desc timeout 260 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider \
  tests/test_mla_decode_contract.py tests/test_mla_decode_formats.py -k "ffi" > /tmp/pt.log 2>&1
echo "== pytest -m gpu contract + formats -k ffi (lib_desc) rc $? $(( $(date +%s) - start )) s" >> $L
tail -4 /tmp/pt.log | cut -c1-300 >> $L
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_desc HELIX_MLA_DECODE_FP8_Q=one timeout 80 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider \
  tests/test_mla_decode_formats.py -k "test_gpu_formats and fp8_e4m3 and ffi" > /tmp/pt1.log 2>&1
echo "== pytest one-term fp8 (lib_desc) rc $? $(( $(date +%s) - start )) s" >> $L
tail -3 /tmp/pt1.log | cut -c1-300 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
