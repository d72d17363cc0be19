#!/usr/bin/env bash
# session 15, call 3: mla_mid_q8s variant 512 (S chains per 32-token half and latent block, added in f32): standalone
# checks (lse bound 1e-2) and timings, sanitizers on an 80-row case, the JAX benchmark with the default (fast) and the f32
# S accumulation, then the GPU format tests with HELIX_MLA_DECODE_FP8_S=f32 for the whole process.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 200 .carry/mla_standalone s8 > $OUT/s15_3_s8.log 2>&1
echo "s8 rc=$?"; grep -E "^s8|^  o rel|FAIL|variant 512" $OUT/s15_3_s8.log | grep -v "alternative" | tail -80 | cut -c1-230
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool .carry/mla_standalone m8chk 16896 5 16 > $OUT/s15_3_${tool}.log 2>&1
  echo "$tool 16896 rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|o rel err" $OUT/s15_3_${tool}.log | head -3
done
B="--B 16,64 --L 65536 --hg 128x1,128x4,64x4,16x4 --iterations 20 --out $OUT"
timeout 170 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16,fp8_e4m3 $B --name mla_decode_s15_fast > $OUT/s15_3_bench_fast.log 2>&1
echo "bench fast rc=$?"; grep -E "copy|matmul" $OUT/s15_3_bench_fast.log | head -2; grep "^| ffi" $OUT/mla_decode_s15_fast*.md | cut -d'|' -f2-13
HELIX_MLA_DECODE_FP8_S=f32 timeout 120 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes fp8_e4m3 --no-ceilings $B --name mla_decode_s15_f32s > $OUT/s15_3_bench_f32.log 2>&1
echo "bench f32 rc=$?"; grep "^| ffi" $OUT/mla_decode_s15_f32s*.md | cut -d'|' -f2-13
HELIX_MLA_DECODE_FP8_S=f32 timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_formats.py -k "fp8_e4m3 and ffi" > $OUT/s15_3_formats_f32.log 2>&1
echo "formats f32 rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/s15_3_formats_f32.log | tail -8
