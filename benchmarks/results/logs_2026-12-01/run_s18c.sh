#!/bin/bash
# Session 18, call 3: the decoding seesaw (kLoad 4) with raw loads one tile ahead and the non-owner's early release of
# the previous tile (call 2's form deadlocked: the release waited for the whole next tile). Smoke run first (short
# timeouts), then the nvfp4 FFI format tests and the speed against bf16.
export PYTHONPATH=$PWD
nvidia-smi -L
B="python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --no-ceilings"
echo "== smoke"; timeout 60 $B --B 16 --hg 16x4 --kv-dtypes nvfp4 --name s18c_smoke --out $OUT > $OUT/s18c_smoke.log 2>&1; rc=$?; echo rc $rc
grep "backend=" $OUT/s18c_smoke.log | cut -c1-200
[ $rc -ne 0 ] && exit 1
echo "== formats, nvfp4 ffi"
timeout 200 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k "nvfp4 and ffi" -q -x > $OUT/s18c_formats.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s18c_formats.log | cut -c1-300 | tail -12
echo "== bench"
timeout 100 $B --B 16,64 --hg 16x4,128x1,64x4 --kv-dtypes bf16,nvfp4 --name s18c_nv4 --out $OUT > $OUT/s18c_bench.log 2>&1; echo rc $?
grep "backend=" $OUT/s18c_bench.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' | cut -c1-220
