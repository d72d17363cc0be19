#!/usr/bin/env bash
# session 14, call 5: mla_mid_q8s as built for the library (one E4M3 P term, 24 / 240 registers): standalone checks and
# timings, compute-sanitizer on the ring-wrapping case, the JAX benchmark fp8 vs bf16 at H=16 G in {2, 4} (auto = seesaw,
# then lockstep).
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 200 .carry/mla_standalone s8 > $OUT/s14_5_s8.log 2>&1
echo "s8 rc=$?"; grep -E "^s8" $OUT/s14_5_s8.log
for t in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $t .carry/mla_standalone m8chk 16384 > $OUT/s14_5_$t.log 2>&1
  echo "$t rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASS|FAIL|rel err" $OUT/s14_5_$t.log | head -4
done
timeout 120 compute-sanitizer --tool racecheck .carry/mla_standalone m8chk 16512 > $OUT/s14_5_racecheck_cpasync.log 2>&1
echo "racecheck cp.async rc=$?"; grep -E "RACECHECK SUMMARY|PASS|FAIL" $OUT/s14_5_racecheck_cpasync.log | head -3
for m in auto lockstep; do
  HELIX_MLA_DECODE_MID8=$m timeout 150 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16,fp8_e4m3 --B 16,64,128 --L 65536 \
    --hg 16x4,16x2 --iterations 20 --name s14_5_$m --out $OUT > $OUT/s14_5_bench_$m.log 2>&1
  echo "bench $m rc=$?"; grep -E "copy|matmul" $OUT/s14_5_bench_$m.log | head -2; grep "^| ffi" $OUT/s14_5_$m*.md | cut -d'|' -f2-16
done
