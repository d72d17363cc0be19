#!/usr/bin/env bash
# session 13, call 2: main's library (HEAD, the two review commits of session 12 not yet run on a GPU): pytest -m gpu
# (append + contract + formats), the target shapes with ceilings in the same call.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 150 python3 benchmarks/mla_decode.py --backends ffi --kv-dtypes bf16,fp8_e4m3 --B 1,64 --L 65536 \
  --hg 128x1,16x1,16x4 --iterations 20 --name mla_decode_s13_targets --out $OUT > $OUT/s13_2_bench.log 2>&1
echo "bench rc=$?"; grep -E "copy|matmul" $OUT/s13_2_bench.log | head -3; grep "^| ffi" $OUT/mla_decode_s13_targets*.md | cut -d'|' -f2-12
timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_append_kernel.py tests/test_mla_decode_contract.py tests/test_mla_decode_formats.py > $OUT/s13_2_gpu.log 2>&1
echo "suite rc=$?"; tail -n 3 $OUT/s13_2_gpu.log
