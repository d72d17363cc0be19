#!/bin/bash
# Session 18, call 5 (final library): the decoding seesaw for nvfp4 at G*H > 16 with the producer at 72 registers
# (consumers 216; call 4's 56 / 224 spilled in the decode). Smoke run; issue 6's shapes with ceilings (all three
# formats, the pipe kernel for comparison); the nvfp4 FFI format tests; the bf16 contract GPU tests (the seesaw's
# parameter block changed).
export PYTHONPATH=$PWD
nvidia-smi -L
B="python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20"
echo "== smoke"; timeout 60 $B --no-ceilings --B 16 --hg 16x4 --kv-dtypes nvfp4 --name s18e_smoke --out $OUT > $OUT/s18e_smoke.log 2>&1; rc=$?; echo rc $rc
grep "backend=" $OUT/s18e_smoke.log | cut -c1-200
[ $rc -ne 0 ] && exit 1
echo "== bench"
timeout 150 $B --B 16,64 --hg 16x4,16x1,128x1,64x4 --kv-dtypes bf16,fp8_e4m3,nvfp4 --name mla_decode_s18_formats --out $OUT > $OUT/s18e_bench.log 2>&1; echo rc $?
grep -E "ceilings|backend=" $OUT/s18e_bench.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' | cut -c1-230
HELIX_MLA_DECODE_DEQUANT=pipe timeout 80 $B --no-ceilings --B 16,64 --hg 16x4,128x1,64x4 --kv-dtypes nvfp4 --name s18e_pipe --out $OUT > $OUT/s18e_pipe.log 2>&1; echo rc $?
grep "backend=" $OUT/s18e_pipe.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' | cut -c1-230
echo "== formats, nvfp4 ffi"
timeout 200 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k "nvfp4 and ffi" -q > $OUT/s18e_formats.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s18e_formats.log | cut -c1-300 | tail -12
echo "== contract + append, gpu"
timeout 150 python3 -m pytest -m gpu tests/test_mla_decode_contract.py tests/test_append_kernel.py -k "not load_paths and not tma_l2" -q > $OUT/s18e_contract.log 2>&1; echo rc $?
grep -E "passed|failed|Error" $OUT/s18e_contract.log | cut -c1-300 | tail -6
