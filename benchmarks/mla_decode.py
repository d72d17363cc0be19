"""Benchmark the bounded MLA decode backends against the device's measured ceilings.

  python3 benchmarks/mla_decode.py [--backends xla,pallas,ffi] [--B 1,16,64,128] [--L 8192,65536]
                                   [--G 1,2,4,8] [--H 16,128] [--hg 16x1,16x4,128x1] [--page-size 64]
                                   [--kv-dtypes bf16,fp8_e4m3,nvfp4] [--out benchmarks/results]

KV formats (``--kv-dtypes``): bf16 pages, or FP8Pages / NVFP4Pages quantized on the device from the same
random bf16 pools (scales from the data); queries stay bf16. Each record carries ``bytes_per_token``
(1152 / 576 / 324) and ``speedup_vs_bf16`` = bf16 ms / this ms for the same backend and shape.

Per record: ms (CUPTI kernel time per call, median), KV TB/s (B*L*bytes_per_token / time),
TFLOP/s (2*B*G*H*L*(576+512) / time), the fraction of the roofline floor
max(bytes / copy ceiling, FLOPs / matmul ceiling) and ``kernel_us``: the call's kernels in launch order with
their median times in microseconds (GPU only; e.g. the FFI op's schedule / main / combine kernels). Combos that cannot fit or would take too long
for a backend are skipped and listed in the output. Writes mla_decode_<date>.json + .md.
"""
from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from benchmarks import common  # noqa: E402
from helix_jax import quant  # noqa: E402
from helix_jax.cache import FP8Pages, MLAPages, NVFP4Pages  # noqa: E402
from helix_jax.ops.mla_decode import mla_decode  # noqa: E402

IMPL = {"xla": "reference", "pallas": "pallas", "ffi": "ffi"}
COLUMNS = ["backend", "kv_dtype", "B", "L", "G", "H", "page_size", "ms", "kv_tb_per_s", "tflop_per_s",
           "frac_roofline", "bytes_per_token", "speedup_vs_bf16", "kernel_us"]


def ints(s):
    return [int(x) for x in s.split(",") if x]


def make_inputs(key, B, L, G, H, P, dtype):
    """Random pools with a random page permutation; bounds = causal per token (L-(G-1)+g)."""
    npp = -(-L // P)
    n = B * npp
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    c_lat = jax.random.normal(k1, (n, P, 512), dtype)
    k_rope = jax.random.normal(k2, (n, P, 64), dtype)
    table = jax.random.permutation(k3, n).astype(jnp.int32).reshape(B, npp)
    q_lat = jax.random.normal(k4, (B, G, H, 512), dtype)
    q_rope = jax.random.normal(k5, (B, G, H, 64), dtype)
    bounds = jnp.broadcast_to(L - (G - 1) + jnp.arange(G, dtype=jnp.int32), (B, G))
    return q_lat, q_rope, c_lat, k_rope, table, bounds


@jax.jit
def _quantize_fp8(c_lat, k_rope):
    s = quant.fp8_scale_from_amax(jnp.maximum(jnp.max(jnp.abs(c_lat)), jnp.max(jnp.abs(k_rope))).astype(jnp.float32))
    return FP8Pages(quant.quantize_fp8(c_lat, s), quant.quantize_fp8(k_rope, s), s.reshape(1))


@jax.jit
def _quantize_nvfp4(c_lat, k_rope):
    g = quant.nvfp4_global_scale_from_amax(
        jnp.maximum(jnp.max(jnp.abs(c_lat)), jnp.max(jnp.abs(k_rope))).astype(jnp.float32))
    c, csf = quant.quantize_nvfp4(c_lat, g)
    k, ksf = quant.quantize_nvfp4(k_rope, g)
    return NVFP4Pages(c, k, csf, ksf, g.reshape(1))


def decode_call(backend):
    """The jitted decode the benchmark times for ``backend`` (xla / pallas / ffi), softmax scale 1/sqrt(192)
    (benchmarks/mla_decode_profile.py runs the same call under Nsight Compute)."""
    scale = 1.0 / math.sqrt(192.0)

    @jax.jit
    def f(ql, qr, pg, pt, bd):
        return mla_decode(ql, qr, pg, pt, kv_bounds=bd, softmax_scale=scale, implementation=IMPL[backend])
    return f


def make_pages(kv_dtype, c_lat, k_rope):
    """The pages tuple of ``kv_dtype`` for the bf16 pools (quantized on the device)."""
    if kv_dtype == "bf16":
        return MLAPages(c_lat, k_rope)
    return (_quantize_fp8 if kv_dtype == "fp8_e4m3" else _quantize_nvfp4)(c_lat, k_rope)


def shapes(args):
    """(H, G) pairs: ``--hg 16x1,128x1`` if given, else the product of ``--H`` and ``--G``."""
    if args.hg:
        return [tuple(int(v) for v in x.split("x")) for x in args.hg.split(",") if x]
    return [(h, g) for h in ints(args.H) for g in ints(args.G)]


def naive_bytes(B, L, G, H):
    """Rough peak bytes of the jnp reference: f32 gathered KV + f32 logits/probs."""
    return B * L * 576 * 4 * 2 + B * G * H * L * 4 * 3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="xla,pallas,ffi")
    ap.add_argument("--B", default="1,16,64,128")
    ap.add_argument("--L", default="8192,65536")
    ap.add_argument("--G", default="1,2,4,8")
    ap.add_argument("--H", default="16,128")
    ap.add_argument("--hg", default="", help="HxG pairs (e.g. 16x1,16x4,128x1) instead of the --H x --G product")
    ap.add_argument("--kv-dtypes", default="bf16", help="comma list of bf16, fp8_e4m3, nvfp4 (bf16 first)")
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--naive-max-gb", type=float, default=24.0, help="skip the jnp reference above this footprint")
    ap.add_argument("--naive-max-flop", type=float, default=2e13, help="skip the jnp reference above this many FLOPs")
    ap.add_argument("--pallas-max-flop", type=float, default=2e14)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new combos after this many seconds")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent / "results"))
    ap.add_argument("--name", default="mla_decode")
    ap.add_argument("--no-ceilings", action="store_true")
    args = ap.parse_args(argv)

    t_start = time.time()
    backends = [b for b in args.backends.split(",") if b]
    kv_dtypes = [quant.check_kv_dtype(k) for k in args.kv_dtypes.split(",") if k]
    kv_dtypes.sort(key=lambda k: k != "bf16")   # bf16 first: the speedups refer to it
    small = jax.default_backend() == "cpu"
    ceil = ({"copy_tb_per_s": float("nan"), "matmul_tflop_per_s": float("nan")} if args.no_ceilings
            else common.ceilings(small=small))
    print(f"device: {common.device_line()}")
    print(f"ceilings: copy {ceil['copy_tb_per_s']:.3f} TB/s, bf16 matmul {ceil['matmul_tflop_per_s']:.1f} TFLOP/s",
          flush=True)
    records, skipped = [], []
    dtype = jnp.bfloat16
    P = args.page_size
    key = jax.random.key(0)
    for L in ints(args.L):
        for B in ints(args.B):
            for H, G in shapes(args):
                key, sub = jax.random.split(key)
                inputs = None
                for kv_dtype in kv_dtypes:
                    if time.time() - t_start > args.budget_s:
                        skipped.append(f"B={B} L={L} G={G} H={H} {kv_dtype}: all backends (time budget {args.budget_s:.0f}s)")
                        continue
                    if inputs is None:
                        inputs = make_inputs(sub, B, L, G, H, P, dtype)
                    q_lat, q_rope, c_lat, k_rope, table, bounds = inputs
                    pages = make_pages(kv_dtype, c_lat, k_rope)
                    bpt = quant.bytes_per_token(kv_dtype)
                    flops = 2.0 * B * G * H * L * (576 + 512)
                    kv_bytes = B * L * bpt
                    floor_ms = max(kv_bytes / (ceil["copy_tb_per_s"] * 1e12),
                                   flops / (ceil["matmul_tflop_per_s"] * 1e12)) * 1e3
                    for be in backends:
                        if be == "xla" and (naive_bytes(B, L, G, H) > args.naive_max_gb * 1e9
                                            or flops > args.naive_max_flop):
                            skipped.append(f"B={B} L={L} G={G} H={H}: xla (needs ~{naive_bytes(B, L, G, H) / 1e9:.0f} GB"
                                           f" / {flops:.1e} FLOP, over the naive limits)")
                            continue
                        if be == "pallas" and flops > args.pallas_max_flop:
                            skipped.append(f"B={B} L={L} G={G} H={H}: pallas ({flops:.1e} FLOP, too long without split-KV)")
                            continue
                        f = decode_call(be)
                        args_ = (q_lat, q_rope, pages, table, bounds)
                        try:
                            jax.block_until_ready(f(*args_))
                            ms, kernels = common.time_kernels_ms(f, *args_, iterations=args.iterations)
                        except Exception as e:  # noqa: BLE001 - report and keep going
                            skipped.append(f"B={B} L={L} G={G} H={H} {kv_dtype}: {be} failed: {type(e).__name__}: "
                                           f"{str(e)[:200]}")
                            continue
                        base = [r["ms"] for r in records if r["kv_dtype"] == "bf16" and r["backend"] == be
                                and (r["B"], r["L"], r["G"], r["H"], r["page_size"]) == (B, L, G, H, P)]
                        rec = dict(backend=be, kv_dtype=kv_dtype, B=B, L=L, G=G, H=H, page_size=P, ms=ms,
                                   kv_tb_per_s=kv_bytes / (ms * 1e-3) / 1e12, tflop_per_s=flops / (ms * 1e-3) / 1e12,
                                   frac_roofline=floor_ms / ms, bytes_per_token=bpt,
                                   speedup_vs_bf16=base[0] / ms if base else float("nan"),
                                   kernel_us=common.kernel_summary(kernels))
                        records.append(rec)
                        print(" ".join(f"{c}={common.markdown_table([rec], [c]).splitlines()[2][2:-2]}" for c in COLUMNS),
                              flush=True)
                    del pages
                del inputs
    payload = {"device": common.device_line(), "date": common.today(), "ceilings": ceil, "records": records,
               "skipped": skipped}
    notes = [f"skipped: {s}" for s in skipped]
    jp, mp = common.write_results(args.out, args.name, payload, COLUMNS, notes)
    print(common.markdown_table(records, COLUMNS))
    for s in skipped:
        print("skipped:", s)
    print(f"wrote {jp} and {mp}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
