#!/usr/bin/env bash
# (the variant, kVar bit 2048, was removed after this call; see benchmarks/NOTES.md session 16, attempt 32)
# session 16, call 1: mla_mid_q8s's f32 S chains software-pipelined over two chain accumulators (bit 2048): standalone
# checks (every mid case, TMA and cp.async tiles), the 80-row case, timings against the waited chains and bf16; then
# the fp8 GPU format tests on a library whose f32 S (the default at G*H > 64) runs the pipelined chains.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 150 .carry/mla_standalone s8 999 > $OUT/s16_1_s8.log 2>&1
echo "s8 rc=$?"; grep -E "^s8|^  |o rel err" $OUT/s16_1_s8.log | grep -E "^s8|pipelined|o rel err" | cut -c1-110 | tail -60
for a in "18944 5 16" "16896 5 16" "19968 5 16" "18944 4 16"; do
  timeout 40 .carry/mla_standalone m8chk $a > $OUT/s16_1_m8chk.log 2>&1
  echo "m8chk $a rc=$?"; grep -E "o rel err" $OUT/s16_1_m8chk.log | head -2
done
timeout 100 .carry/mla_standalone s8big 2>&1 | tee $OUT/s16_1_s8big.log
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_formats.py \
  -k "fp8_e4m3 or mid_kernel_variants or s_f32_accumulation or bad_mid8 or bad_fp8" > $OUT/s16_1_formats.log 2>&1
echo "formats rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/s16_1_formats.log | tail -8
