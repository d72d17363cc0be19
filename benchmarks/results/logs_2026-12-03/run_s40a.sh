#!/bin/bash
# Session 40, call 1, carry ["helix_jax/_lib", ".carry/lib_l2"]: attempt 82 (an L2 bulk prefetch of tile j + d by the
# seesaw's TMA producer before it waits for tile j's buffer; HELIX_MLA_DECODE_KV_L2 = off | 0 | 1 | 2, kernels of
# their own: mla_seesaw kVar bit 256). .carry/lib_l2 = this tree's library, helix_jax/_lib = main's.
# In this order (the most telling first, the 600 s limit may cut the tail): (1) lib_l2: the 9 bf16 contract cases
# twice under KV_L2 = 1 (oracle + bitwise); (2) timing round 1: main / lib_l2 off / 0 / 1 / 2 over B = 16, 64 and
# H x G = 128x1, 128x4, 64x4, 16x4; (3) a diagnostic with main's library: H=128 G=1 B=64 (and G=4 B=16) with the page
# table folded onto 128 pages (9.4 MB: every refill an L2 hit) against the random table, alternating, to bound what the
# memory side costs; (4) timing round 2; (5) the contract cases under KV_L2 = 0 and 2; the bad value's error.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s40a.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
NEW=$PWD/.carry/lib_l2 MAIN=$PWD/helix_jax/_lib
for v in 1; do
  start=$(date +%s)
  env HELIX_JAX_FFI_LIB_DIR=$NEW HELIX_MLA_DECODE_KV_L2=$v timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > /tmp/rep.log 2>&1
  echo "== repeat [KV_L2=$v] rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' /tmp/rep.log), clean $(grep -c ' 0 oracle failures, 0 differ' /tmp/rep.log)" >> $L
  grep -iE "fail|differ|error" /tmp/rep.log | grep -v " 0 oracle failures, 0 differ" | head -5 >> $L
done
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4,16x4"
round() {
  for v in main off 0 1 2; do
    if [ $v = main ]; then E="HELIX_JAX_FFI_LIB_DIR=$MAIN"; else E="HELIX_JAX_FFI_LIB_DIR=$NEW HELIX_MLA_DECODE_KV_L2=$v"; fi
    ab_bench ${v}_r$1 $L $A -- $E
  done
}
round 1
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$MAIN timeout 150 python3 - >> $L 2>&1 <<'PY'
import jax, jax.numpy as jnp
from benchmarks import common
from benchmarks.mla_decode import make_inputs, decode_call
from helix_jax.cache import MLAPages
f = decode_call("ffi")
for (B, G) in [(64, 1), (16, 4)]:
    H, L = 128, 65536
    ql, qr, cl, kr, t, bd = make_inputs(jax.random.key(7), B, L, G, H, 64, jnp.bfloat16)
    pages = MLAPages(cl, kr)
    flops = 2.0 * B * G * H * L * 1088
    for r in range(2):
        for name, tab in [("random", t), ("l2_128pages", t % 128)]:
            jax.block_until_ready(f(ql, qr, pages, tab, bd))
            ms, _ = common.time_kernels_ms(f, ql, qr, pages, tab, bd, iterations=20)
            print(f"diag B={B} G={G} H={H} table={name} r{r}: ms={ms:.4f} tflop_per_s={flops / ms / 1e9:.1f}", flush=True)
    del ql, qr, cl, kr, t, bd, pages
PY
echo "== diag rc $? $(( $(date +%s) - start )) s" >> $L
round 2
for v in 0 2; do
  start=$(date +%s)
  env HELIX_JAX_FFI_LIB_DIR=$NEW HELIX_MLA_DECODE_KV_L2=$v timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > /tmp/rep.log 2>&1
  echo "== repeat [KV_L2=$v] rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' /tmp/rep.log), clean $(grep -c ' 0 oracle failures, 0 differ' /tmp/rep.log)" >> $L
  grep -iE "fail|differ|error" /tmp/rep.log | grep -v " 0 oracle failures, 0 differ" | head -5 >> $L
done
HELIX_JAX_FFI_LIB_DIR=$NEW HELIX_MLA_DECODE_KV_L2=3 timeout 60 python3 - >> $L 2>&1 <<'PY'
import jax, jax.numpy as jnp
from benchmarks.mla_decode import make_inputs, decode_call
from helix_jax.cache import MLAPages
ql, qr, cl, kr, t, bd = make_inputs(jax.random.key(1), 2, 4096, 1, 128, 64, jnp.bfloat16)
try:
    jax.block_until_ready(decode_call("ffi")(ql, qr, MLAPages(cl, kr), t, bd)); print("== bad KV_L2: no error (WRONG)")
except Exception as e:
    print("== bad KV_L2:", type(e).__name__, [l for l in str(e).splitlines() if "KV_L2" in l][:1])
PY
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
