#!/bin/bash
# Session 40, call 3, carry ["helix_jax/_lib", ".carry/flashmla_fold"]: does FlashMLA gain from an L2-resident cache as
# ours does (call 2: 20-call rounds ~6 % faster with the table folded onto 128 pages, 400-call runs 13 % at a 13 % higher
# clock)? .carry/flashmla_fold = benchmarks/flashmla_reference.cu with FLASHMLA_REF_FOLD (FlashMLA 9241ae3, CUTLASS
# 147f5673, built as in session 37). H=128 G=1 B=64 L=64K, three alternating rounds of 20 calls: FlashMLA random / fold
# 128, ours random / fold 128 (main's library); then 400 back-to-back calls of each; nvidia-smi every 50 ms (s40c_smi.csv).
export PYTHONPATH=$PWD
L=$OUT/s40c.log
nvidia-smi -L > $L
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv -lms 50 > $OUT/s40c_smi.csv 2>&1 &
SMI=$!
fm() {  # label fold iterations
  echo "== flashmla $1 fold=$2 it=$3 $(date +%T.%N | cut -c1-12)" >> $L
  FLASHMLA_REF_FOLD=$2 timeout 120 .carry/flashmla_fold $3 64:1:128:65536 2>&1 | grep -E "check|flashmla" >> $L
}
ours() {  # label iterations order...
  local lab=$1 it=$2; shift 2
  HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib timeout 150 python3 - "$lab" "$it" "$@" >> $L 2>&1 <<'PY'
import sys, time
import jax, jax.numpy as jnp
from benchmarks import common
from benchmarks.mla_decode import make_inputs, decode_call
from helix_jax.cache import MLAPages
lab, it, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
f = decode_call("ffi")
B, G, H, L = 64, 1, 128, 65536
ql, qr, cl, kr, t, bd = make_inputs(jax.random.key(7), B, L, G, H, 64, jnp.bfloat16)
pages = MLAPages(cl, kr)
tabs = {"random": t, "fold128": t % 128}
for name in names:
    tab = tabs[name]
    jax.block_until_ready(f(ql, qr, pages, tab, bd))
    t0 = time.strftime("%H:%M:%S")
    ms, _ = common.time_kernels_ms(f, ql, qr, pages, tab, bd, iterations=it)
    print(f"ours {lab} table={name} it={it} [{t0}-{time.strftime('%H:%M:%S')}]: ms={ms:.4f} "
          f"tflop_per_s={2.0 * B * G * H * L * 1088 / ms / 1e9:.1f}", flush=True)
PY
}
for r in 1 2 3; do
  if [ $r = 2 ]; then fm r$r 128 20; fm r$r 0 20; ours r$r 20 fold128 random
  else fm r$r 0 20; fm r$r 128 20; ours r$r 20 random fold128; fi
done
fm s 0 400; sleep 3; fm s 128 400; sleep 3
ours s1 400 random; sleep 3; ours s2 400 fold128
kill $SMI
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
