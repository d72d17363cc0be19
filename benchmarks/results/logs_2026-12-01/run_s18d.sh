#!/bin/bash
# Session 18, call 4: the decoding seesaw back in call 1's order (raw tile issued once the buffer is back), the
# producer at 56 registers (consumers 224; call 1: 40 / 232 with spills in the decode), the sign by one logic op,
# a block-level bound branch. Smoke run, the nvfp4 FFI format tests, then speed against bf16 and the pipe kernel.
export PYTHONPATH=$PWD
nvidia-smi -L
B="python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --no-ceilings"
echo "== smoke"; timeout 60 $B --B 16 --hg 16x4 --kv-dtypes nvfp4 --name s18d_smoke --out $OUT > $OUT/s18d_smoke.log 2>&1; rc=$?; echo rc $rc
grep "backend=" $OUT/s18d_smoke.log | cut -c1-200
[ $rc -ne 0 ] && exit 1
echo "== bench"
timeout 100 $B --B 16,64 --hg 16x4,128x1,64x4 --kv-dtypes bf16,nvfp4 --name s18d_nv4 --out $OUT > $OUT/s18d_bench.log 2>&1; echo rc $?
grep "backend=" $OUT/s18d_bench.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' | cut -c1-220
HELIX_MLA_DECODE_DEQUANT=pipe timeout 60 $B --B 64 --hg 16x4,128x1 --kv-dtypes nvfp4 --name s18d_pipe --out $OUT > $OUT/s18d_pipe.log 2>&1; echo rc $?
grep "backend=" $OUT/s18d_pipe.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' | cut -c1-220
echo "== formats, nvfp4 ffi"
timeout 200 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k "nvfp4 and ffi" -q -x > $OUT/s18d_formats.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s18d_formats.log | cut -c1-300 | tail -12
