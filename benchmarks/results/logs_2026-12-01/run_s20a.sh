#!/bin/bash
# Prepared in session 19 (no device lent), run in session 20 on branch wip/nv4-l2-f16; call 1 of 3: standalone checks and
# breakdowns, then the JAX benchmark of bf16 and fp8 (the nvfp4 lines moved to run_s20b.sh to fit the 600-s call). Carry helix_jax/_lib and .carry/ss4_trace (the standalone built with -DHELIX_SS_TRACE).
#  - ss8 999: the fp8 decoding seesaw (mla_seesaw kLoad 5) against the double reference (smoke: 60 s)
#  - ss8: its main-kernel time beside the bf16 seesaw and mla_mid_q8s, the load + decode pipeline alone, the math alone
#  - ss4: the same for the nvfp4 decoding seesaw (L2 prefetch on / off, f16 math) and CTA (0, 0)'s timeline
#  - JAX benchmark (ffi, L=64K, B 16/64, H=16 G=4 and H=128 G=1): bf16; fp8 with HELIX_MLA_DECODE_MID8=decode and with the default (mla_mid_q8s)
export PYTHONPATH=$PWD
nvidia-smi -L
echo "== ss8 checks"; timeout 60 ./.carry/ss4_trace ss8 999 > $OUT/s20a_ss8chk.log 2>&1; echo "rc $?"
grep -E "ss8 case|FAIL|PASS|passing|error" $OUT/s20a_ss8chk.log | cut -c1-160 | tail -30
echo "== ss8 timings"; timeout 90 ./.carry/ss4_trace ss8 > $OUT/s20a_ss8.log 2>&1; echo "rc $?"
grep "ss8 B=" $OUT/s20a_ss8.log | cut -c1-260
echo "== ss4"; timeout 100 ./.carry/ss4_trace ss4 > $OUT/s20a_ss4.log 2>&1; echo "rc $?"
cat $OUT/s20a_ss4.log
B="timeout 80 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --no-ceilings --B 16,64 --hg 16x4,128x1"
run() {  # name, kv dtype, env...
  local name=$1 dt=$2; shift 2
  env "$@" $B --kv-dtypes $dt --name s20a_$name --out $OUT > $OUT/s20a_$name.log 2>&1; echo "$name rc $?"
  grep "backend=" $OUT/s20a_$name.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' | cut -c1-110
}
run bf16 bf16
run fp8_decode fp8_e4m3 HELIX_MLA_DECODE_MID8=decode
run fp8_mid8s fp8_e4m3 HELIX_MLA_DECODE_MID8=auto
