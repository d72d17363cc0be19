#!/bin/bash
# Session 40, call 2, carry ["helix_jax/_lib"]: call 1's diagnostic again, more rounds (its two rounds disagreed: the
# folded table ran 1.893 then 1.700 ms). Main's library, H=128 G=1 B=64 L=64K: the random page table against the same
# table folded onto 128 pages (9.4 MB, L2-resident), 512 pages (37.7 MB) and 4096 pages (302 MB, past L2), rotated over
# four rounds of 20 calls, then 400 back-to-back calls of random and 128; H=128 G=4 B=16 random / 128 over three rounds.
# nvidia-smi samples the SM clock and power every 50 ms (s40b_smi.csv); each measurement prints its wall-clock span.
export PYTHONPATH=$PWD
L=$OUT/s40b.log
nvidia-smi -L > $L
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv -lms 50 > $OUT/s40b_smi.csv 2>&1 &
SMI=$!
HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib timeout 400 python3 - >> $L 2>&1 <<'PY'
import time
import jax, jax.numpy as jnp
from benchmarks import common
from benchmarks.mla_decode import make_inputs, decode_call
from helix_jax.cache import MLAPages
f = decode_call("ffi")
def run(B, G, plan):
    H, L = 128, 65536
    ql, qr, cl, kr, t, bd = make_inputs(jax.random.key(7), B, L, G, H, 64, jnp.bfloat16)
    pages = MLAPages(cl, kr)
    flops = 2.0 * B * G * H * L * 1088
    tabs = {"random": t, "fold128": t % 128, "fold512": t % 512, "fold4096": t % 4096}
    for r, names, it in plan:
        for name in names:
            tab = tabs[name]
            jax.block_until_ready(f(ql, qr, pages, tab, bd))
            t0 = time.strftime("%H:%M:%S")
            ms, _ = common.time_kernels_ms(f, ql, qr, pages, tab, bd, iterations=it)
            print(f"diag B={B} G={G} H={H} table={name} r{r} it={it} [{t0}-{time.strftime('%H:%M:%S')}]: ms={ms:.4f} "
                  f"tflop_per_s={flops / ms / 1e9:.1f}", flush=True)
order = ["random", "fold128", "fold512", "fold4096"]
run(64, 1, [(r, order[r:] + order[:r], 20) for r in range(4)] + [(4, ["random", "fold128"], 400), (5, ["fold128", "random"], 400)])
run(16, 4, [(r, ["random", "fold128"] if r % 2 == 0 else ["fold128", "random"], 20) for r in range(3)])
PY
echo "== diag rc $?" >> $L
kill $SMI
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
