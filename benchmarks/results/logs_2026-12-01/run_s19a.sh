#!/bin/bash
# Session 19, call 1: the nvfp4 decoding seesaw with the next raw tile's L2 prefetch (HELIX_MLA_DECODE_NV4_L2) and its
# f16 form enabled: standalone breakdown + timeline (.carry/ss4_trace, built with -DHELIX_SS_TRACE), the JAX benchmark
# with the prefetch on / off, then the nvfp4 FFI format tests and the f16-query tests (both formats).
export PYTHONPATH=$PWD
nvidia-smi -L
echo "== ss4 (standalone)"
timeout 100 ./.carry/ss4_trace ss4 > $OUT/s19a_ss4.log 2>&1; echo "rc $?"
cat $OUT/s19a_ss4.log | cut -c1-200
B="timeout 80 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --no-ceilings --B 16,64 --hg 16x4,128x1"
for r in 1 2; do
  for l2 in on off; do
    HELIX_MLA_DECODE_NV4_L2=$l2 $B --kv-dtypes nvfp4 --name s19a_${l2}_$r --out $OUT > $OUT/s19a_${l2}_$r.log 2>&1; echo "l2 $l2 round $r rc $?"
    grep "backend=" $OUT/s19a_${l2}_$r.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' | cut -c1-110
  done
done
$B --kv-dtypes bf16 --name s19a_bf16 --out $OUT > $OUT/s19a_bf16.log 2>&1; echo "bf16 rc $?"
grep "backend=" $OUT/s19a_bf16.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' | cut -c1-110
echo "== formats: nvfp4 ffi + f16 queries"
timeout 260 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k "(nvfp4 and ffi) or f16_queries" -q > $OUT/s19a_formats.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s19a_formats.log | cut -c1-300 | tail -15
