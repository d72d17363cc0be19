#!/usr/bin/env bash
# session 12, call 4: per-CTA planning + 16-bit segment partials written as whole sectors (StPartRow). Standalone
# checks, the benchmark with the device ceilings measured in the same call, the GPU test suite.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
S=./.carry/mla_standalone
timeout 100 $S load 128 tma_evict_first > $OUT/s12_4_load.log 2>&1; echo rc=$? >> $OUT/s12_4_load.log
grep -E "part plans|passing|FAIL|rc=" $OUT/s12_4_load.log | sort | uniq -c; grep -E "^load" $OUT/s12_4_load.log
for m in q8 q4 m8; do timeout 60 $S $m 999 > $OUT/s12_4_${m}.log 2>&1; echo rc=$? >> $OUT/s12_4_${m}.log; tail -n 2 $OUT/s12_4_${m}.log; done
timeout 90 $S small > $OUT/s12_4_small.log 2>&1; echo rc=$? >> $OUT/s12_4_small.log; grep -c FAIL $OUT/s12_4_small.log; tail -n 2 $OUT/s12_4_small.log
timeout 150 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16,fp8_e4m3 --B 1,16,64 --L 65536 --hg 128x1,16x1,16x4 \
  --iterations 20 --name mla_decode_s12 --out $OUT > $OUT/s12_4_bench.log 2>&1
echo "== bench rc=$?"; grep "ceilings" $OUT/s12_4_bench.log; grep "^| ffi" $OUT/mla_decode_s12*.md | cut -d'|' -f3-9,12,16
timeout 330 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_append_kernel.py tests/test_mla_decode_contract.py tests/test_mla_decode_formats.py > $OUT/s12_4_gpu_suite.log 2>&1
echo "suite rc=$?"; tail -n 3 $OUT/s12_4_gpu_suite.log
