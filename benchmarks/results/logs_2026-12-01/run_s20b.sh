#!/bin/bash
# Prepared in session 19 (no device lent), run in session 20 on branch wip/nv4-l2-f16; call 2 of 3: the nvfp4 JAX benchmark
# lines, then GPU tests of what the branch changes (run_s20c.sh: the contract and the env-selected variants).
#  - nvfp4 FFI format tests and the f16-query tests of both formats (the nvfp4 decoding seesaw's f16 form, the prefetch)
#  - (run_s20c.sh) the contract tests; here the small-G*H format cases (SmColumnSums / SmMergeConsumers changed mla_small_gh and the
#    raw-tile kernels' machine code)
export PYTHONPATH=$PWD
nvidia-smi -L
B="timeout 80 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --no-ceilings --B 16,64 --hg 16x4,128x1"
run() {  # name, kv dtype, env...
  local name=$1 dt=$2; shift 2
  env "$@" $B --kv-dtypes $dt --name s20b_$name --out $OUT > $OUT/s20b_$name.log 2>&1; echo "$name rc $?"
  grep "backend=" $OUT/s20b_$name.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' | cut -c1-110
}
run nv4_l2on nvfp4 HELIX_MLA_DECODE_NV4_L2=on
run nv4_l2off nvfp4 HELIX_MLA_DECODE_NV4_L2=off
run nv4_f16math nvfp4 HELIX_MLA_DECODE_NV4_MATH=f16
echo "== nvfp4 ffi + f16 queries"
timeout 260 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k "(nvfp4 and ffi) or f16_queries" -q > $OUT/s20b_nv4.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s20b_nv4.log | cut -c1-300 | tail -12
echo "== fp8 ffi (mla_small_q8's segment end changed)"
timeout 200 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k "fp8 and ffi" -q > $OUT/s20b_fp8.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s20b_fp8.log | cut -c1-300 | tail -12
cd $OUT && tar czf s20b_logs.tgz s20b_* --remove-files 2>/dev/null; ls $OUT
