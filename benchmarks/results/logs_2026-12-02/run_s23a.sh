#!/bin/bash
# Session 23, call 1: attempt 48 (mla_mid_q8s softmax in attempt 45's form; .carry/lib_a48, branch s22-mid8-smax) -
# the fp8 GPU format cases on it, then a JAX A/B against HEAD's library (helix_jax/_lib) on fp8, alternating, two rounds;
# then the bf16 seesaw's timeline (standalone driver built with -DHELIX_SS_TRACE, .carry/mla_trace: TMA evict-first and
# multicast, H=128 G=1 B=64) and its load-path breakdown (whole / main / loads-only / math-only) at H=128.
export PYTHONPATH=$PWD
L=$OUT/s23a.log
nvidia-smi -L > $L
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >> $L
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_a48 timeout 200 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -q -x \
  -k "fp8 and (ffi or deterministic)" >> $L 2>&1
echo "pytest fp8 formats (lib_a48) rc $?" >> $L
bench() {  # name, then env assignments
  local n=$1; shift
  env "$@" timeout 60 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 16,64 \
    --hg 16x4,128x1 --kv-dtypes fp8_e4m3 --no-ceilings --name s23a_$n --out /tmp/s23a > /tmp/s23a_$n.log 2>&1
  echo "== bench $n ($*) rc $?" >> $L
  grep -E "backend=" /tmp/s23a_$n.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' | cut -c1-200 >> $L
}
for r in 1 2; do
  bench a48_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_a48
  bench head_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
done
timeout 200 .carry/mla_trace load 128 tma_multicast > $OUT/s23a_trace.log 2>&1; echo "trace rc $?" >> $L
grep -E "passing|^trace|^tile|^ *[0-9]+ |^load" $OUT/s23a_trace.log >> $L
tail -5 $L
