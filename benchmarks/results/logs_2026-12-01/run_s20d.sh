#!/bin/bash
# Session 20, call 4 (branch wip/nv4-l2-f16 with HELIX_MLA_DECODE_NV4_MATH's default now f16): issue 6's format table with
# the ceilings in the same run, then the nvfp4 GPU tests of the new default, the bf16 opt-out and the bad-value errors.
export PYTHONPATH=$PWD
nvidia-smi -L
echo "== formats benchmark"
timeout 240 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 16,64 --hg 16x4,16x1,128x1,64x4 \
  --kv-dtypes bf16,fp8_e4m3,nvfp4 --name mla_decode_s20_formats --out $OUT > $OUT/s20d_bench.log 2>&1; echo rc $?
grep -E "Ceilings|ceiling|backend=" $OUT/s20d_bench.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' | cut -c1-300
echo "== nvfp4 tests"
timeout 330 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k "(nvfp4 and ffi) or f16_queries or nvfp4_bf16_math_variant or bad_nvfp4_env" -q > $OUT/s20d_nv4.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s20d_nv4.log | cut -c1-300 | tail -12
cd $OUT && tar czf s20d_logs.tgz s20d_* --remove-files 2>/dev/null; ls $OUT
