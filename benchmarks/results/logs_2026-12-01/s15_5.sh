#!/usr/bin/env bash
# session 15, call 5: mla_mid_q8s's lse from the unrounded weights' sum (o still normalised by the E4M3-rounded sum):
# standalone checks (fast and f32 S), the 80-row case, the fp8 FFI GPU format tests (default, subprocess variants, and
# HELIX_MLA_DECODE_FP8_S=fast for information), then fp8 vs bf16 at two shapes in one call.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 120 .carry/mla_standalone s8 999 > $OUT/s15_5_s8.log 2>&1
echo "s8 rc=$?"; grep -E "^s8|o rel err" $OUT/s15_5_s8.log | cut -c1-120 | paste -sd' ' | sed 's/s8 case/\ns8 case/g'
for a in "16384 5 16" "16896 5 16" "16384 4 16"; do
  timeout 60 .carry/mla_standalone m8chk $a > $OUT/s15_5_m8chk.log 2>&1
  echo "m8chk $a rc=$?"; grep -E "o rel err" $OUT/s15_5_m8chk.log | head -2
done
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_formats.py \
  -k "(fp8_e4m3 and ffi) or mid_kernel_variants or s_f32_accumulation or bad_mid8 or bad_fp8" > $OUT/s15_5_formats.log 2>&1
echo "formats rc=$?"; grep -E "passed|failed|FAILED" $OUT/s15_5_formats.log | tail -6
HELIX_MLA_DECODE_FP8_S=fast timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_formats.py \
  -k "test_gpu_formats and fp8_e4m3 and ffi" > $OUT/s15_5_formats_fast.log 2>&1
echo "formats fast rc=$?"; grep -E "passed|failed|FAILED|lse max" $OUT/s15_5_formats_fast.log | tail -6
timeout 100 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16,fp8_e4m3 --B 64 --L 65536 --hg 128x1,16x4 \
  --iterations 20 --no-ceilings --name mla_decode_s15_exactlse --out $OUT > $OUT/s15_5_bench.log 2>&1
echo "bench rc=$?"; grep "^| ffi" $OUT/mla_decode_s15_exactlse*.md | cut -d'|' -f2-13
