#!/bin/bash
# Session 30, call 1: mla_mid_q8w (HELIX_MLA_DECODE_MID8=ws: the softmax in a warpgroup of its own, S of tile j + 1 under
# the softmax of tile j; one-term fast chain only), .carry/lib_w = HEAD + the new kernel. First its correctness (the
# one-term GPU cases under ws: rounded-Q oracle, determinism, rising max, error budget), then two alternating rounds of
# ws / seesaw (one term) and bf16 at H=16 G=4 and H=128 G=1, B=64, L=64K; last the three subprocess format cases that
# session 29 left (nvfp4 without staging x 2, the fp8 decoding seesaw), whose kernels are HEAD's.
export PYTHONPATH=$PWD HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_w
. benchmarks/ab_bench.sh
L=$OUT/s30a.log
nvidia-smi -L > $L
start=$(date +%s)
HELIX_MLA_DECODE_MID8=ws HELIX_MLA_DECODE_FP8_Q=one timeout 150 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider \
  tests/test_mla_decode_formats.py -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" -s > /tmp/t1.log 2>&1
rc=$?
echo "== ws one-term GPU cases rc $rc $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed|one-term Q|rising max|rel error" /tmp/t1.log | sed -e 's/^tests\/test_mla_decode_formats.py:://' | cut -c1-170 >> $L
export AB_TMP=/tmp AB_TIMEOUT=70
A="--B 64 --L 65536 --iterations 20"
if grep -q "13 passed" /tmp/t1.log; then
  for r in 1 2; do
    ab_bench ws_r$r $L $A --hg 16x4,128x1 --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_MID8=ws HELIX_MLA_DECODE_FP8_Q=one
    ab_bench s8_r$r $L $A --hg 16x4,128x1 --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_MID8=seesaw HELIX_MLA_DECODE_FP8_Q=one
    ab_bench bf16_r$r $L $A --hg 16x4,128x1 --kv-dtypes bf16 -- HELIX_MLA_DECODE_MID8=auto
  done
fi
for sel in "without_staging" "fp8_decode_variant"; do
  start=$(date +%s)
  timeout 150 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_formats.py -k "$sel" > /tmp/d.log 2>&1
  echo "== -k \"$sel\" rc $? $(( $(date +%s) - start )) s" >> $L
  grep -E "PASSED|FAILED|ERROR|passed|failed" /tmp/d.log | sed -e 's/^tests\/test_mla_decode_formats.py:://' | cut -c1-150 >> $L
done
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
