"""Append-and-quantize of new KV rows: the jnp/XLA path of ``cache.append_kv`` vs the Pallas (Triton) kernel.

  python3 benchmarks/append.py [--B 1,64,256] [--G 4] [--pages 4096] [--page-size 64]
                               [--kv-dtypes bf16,fp8_e4m3,nvfp4] [--warps 1,4] [--appends 5] [--out DIR]
  python3 benchmarks/append.py --smoke --out /tmp/x      # CPU: tiny sizes, Pallas in interpret mode

Per (kv_dtype, B): one rank's pool of ``--pages`` pages x ``--page-size`` tokens filled with random codes,
B sequences with 16 random pages each, G new bf16 rows per sequence at consecutive slots (they straddle
pages). A jitted call performs K appends in a row (different rows and slots each, so nothing is shared)
on a pool that is not donated, so XLA copies it once per call; ``us`` = (T(K) - T(1)) / (K - 1) cancels
that copy and the launch of the call: the time of one append. T is the CUPTI kernel time of a call
(``jax.experimental.mosaic.gpu.profiler.measure``, all kernels summed, median of ``--iters``) on GPU and
wall time on CPU. Each Pallas record also says whether its K-append pools equal the XLA ones bit for
bit. Writes ``append_<date>.json`` and ``.md`` under ``--out`` and prints xla/pallas time ratios.
"""
from __future__ import annotations

import argparse
import functools
import json
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from benchmarks import common  # noqa: E402
from helix_jax import cache, quant  # noqa: E402
from helix_jax.cache import FP8Pages, MLAPages, NVFP4Pages  # noqa: E402

COLUMNS = ["backend", "num_warps", "kv_dtype", "B", "G", "us", "us_call_k1", "bit_exact", "xla_over_this", "error"]
PAGES_PER_SEQ = 16


def ints(s):
    return [int(x) for x in s.split(",") if x]


def make_pool(fmt, n, p, rng):
    """One rank's pages of ``fmt`` holding random codes (no NaN codes) and a data-independent scale."""
    def codes(*shape):
        c = rng.integers(0, 256, shape, dtype=np.uint8)
        return np.where((c & 0x7F) == 0x7F, c ^ 1, c)
    e4 = jnp.float8_e4m3fn
    if fmt == "bf16":
        return MLAPages(jnp.asarray(rng.normal(size=(n, p, 512)), jnp.bfloat16),
                        jnp.asarray(rng.normal(size=(n, p, 64)), jnp.bfloat16))
    if fmt == "fp8_e4m3":
        return FP8Pages(jnp.asarray(codes(n, p, 512)).view(e4), jnp.asarray(codes(n, p, 64)).view(e4),
                        jnp.asarray([quant.fp8_scale_from_amax(12.0)], jnp.float32))
    return NVFP4Pages(jnp.asarray(codes(n, p, 256)), jnp.asarray(codes(n, p, 32)),
                      jnp.asarray(codes(n, p, 32)).view(e4), jnp.asarray(codes(n, p, 4)).view(e4),
                      jnp.asarray([quant.NVFP4_KV_GLOBAL_SCALE], jnp.float32))


def make_inputs(b, g, k, n, p, rng):
    """Page table ``[B, 16]``, slots ``[K, B, G]`` (consecutive per append) and rows ``[K, B, G, .]`` bf16."""
    table = rng.permutation(n)[:b * PAGES_PER_SEQ].reshape(b, PAGES_PER_SEQ).astype(np.int32)
    cap = PAGES_PER_SEQ * p
    base = rng.integers(0, cap - k * g + 1, b)
    slots = base[None, :, None] + np.arange(k)[:, None, None] * g + np.arange(g)[None, None, :]
    c = jnp.asarray(rng.normal(0, 4, (k, b, g, 512)), jnp.bfloat16)
    kr = jnp.asarray(rng.normal(0, 4, (k, b, g, 64)), jnp.bfloat16)
    return jnp.asarray(table), jnp.asarray(slots.astype(np.int32)), c, kr


def appends(pages, table, slots, c, kr, *, impl, num_warps):
    """K appends in a row (unrolled): ``slots [K, B, G]``, ``c [K, B, G, 512]``, ``kr [K, B, G, 64]``."""
    for i in range(slots.shape[0]):
        if impl == "xla":
            pages = cache.append_kv(pages, table, slots[i], c[i], kr[i], implementation="xla")
        else:
            from helix_jax.ops.append import append_rows
            pages = append_rows(pages, table, slots[i], c[i], kr[i], num_warps=num_warps)
    return pages


def time_call(f, args, iters):
    """(median time of one call in us, kernel names of one call): CUPTI on GPU, wall clock on CPU."""
    if jax.default_backend() == "gpu":
        from jax.experimental.mosaic.gpu import profiler
        _, per_iter = profiler.measure(f, aggregate=False, iterations=iters)(*args)
        if per_iter is None:
            return float("nan"), []
        per_iter = per_iter if iters > 1 else [per_iter]
        return 1e3 * statistics.median(sum(t for _, t in it) for it in per_iter), [n for n, _ in per_iter[0]]
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(ts), []


@jax.jit
def _mismatched_bytes(a, b):
    u8 = functools.partial(jax.lax.bitcast_convert_type, new_dtype=jnp.uint8)   # [..] or [.., itemsize]
    return sum(jnp.sum(u8(x) != u8(y)) for x, y in zip(a, b))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=ints, default=[1, 64, 256])
    ap.add_argument("--G", type=int, default=4)
    ap.add_argument("--pages", type=int, default=4096)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--kv-dtypes", default="bf16,fp8_e4m3,nvfp4")
    ap.add_argument("--warps", type=ints, default=[1, 4], help="Triton num_warps variants of the Pallas kernel")
    ap.add_argument("--appends", type=int, default=5, help="K appends per timed call (>= 2)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (CPU, interpret mode)")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"))
    a = ap.parse_args(argv)
    if a.smoke:
        a.B, a.pages, a.page_size, a.appends, a.iters, a.warps = [1, 4], 96, 16, 3, 3, [4]
    if a.appends < 2:
        ap.error("--appends must be >= 2 (the per-append time is a difference)")
    fmts = [quant.check_kv_dtype(f) for f in a.kv_dtypes.split(",") if f]
    if max(a.B) * PAGES_PER_SEQ > a.pages:
        ap.error(f"--pages {a.pages} cannot hold B={max(a.B)} x {PAGES_PER_SEQ} pages")
    rng = np.random.default_rng(0)
    t_start = time.perf_counter()
    records = []
    variants = [("xla", None)] + [("pallas", w) for w in a.warps]
    for fmt in fmts:
        pool = make_pool(fmt, a.pages, a.page_size, rng)
        for b in a.B:
            table, slots, c, kr = make_inputs(b, a.G, a.appends, a.pages, a.page_size, rng)
            ref = None
            for impl, w in variants:
                rec = {"backend": impl, "num_warps": w, "kv_dtype": fmt, "B": b, "G": a.G}
                try:   # one failing variant (e.g. a Triton compile error) must not lose the others
                    f = jax.jit(functools.partial(appends, impl=impl, num_warps=w))
                    t1, names = time_call(f, (pool, table, slots[:1], c[:1], kr[:1]), a.iters)
                    tk, _ = time_call(f, (pool, table, slots, c, kr), a.iters)
                    rec.update(us=(tk - t1) / (a.appends - 1), us_call_k1=t1, appends_per_call=a.appends,
                               pages=a.pages, page_size=a.page_size, kernels_k1=names)
                    out = f(pool, table, slots, c, kr)
                    if impl == "xla":
                        ref = out
                    elif ref is not None:
                        bad = int(_mismatched_bytes(out, ref))
                        rec.update(bit_exact=bad == 0, mismatched_bytes=bad)
                    del out
                except Exception as e:  # noqa: BLE001 - recorded and reported, exit status 1
                    rec["error"] = f"{type(e).__name__}: {e}"[:2000]
                    print(f"{fmt:9s} B={b:4d} {impl} warps={w}: FAILED {rec['error'][:300]}", flush=True)
                    records.append(rec)
                    continue
                records.append(rec)
                print(f"{fmt:9s} B={b:4d} G={a.G} {impl:6s} warps={w!s:4s} {rec['us']:9.2f} us/append "
                      f"(1-append call {t1:8.1f} us){'' if impl == 'xla' else '  bit_exact=' + str(rec['bit_exact'])}",
                      flush=True)
            del ref
        del pool
    by_key = {(r["kv_dtype"], r["B"]): r["us"] for r in records if r["backend"] == "xla" and "us" in r}
    print("\nxla / pallas time ratio (> 1: the kernel is faster):")
    for r in records:
        if r["backend"] == "pallas" and "us" in r and (r["kv_dtype"], r["B"]) in by_key:
            r["xla_over_this"] = by_key[(r["kv_dtype"], r["B"])] / r["us"] if r["us"] > 0 else float("nan")
            print(f"  {r['kv_dtype']:9s} B={r['B']:4d} warps={r['num_warps']}: {r['xla_over_this']:.2f}x")
    payload = {"date": common.today(), "device": common.device_line(), "records": records,
               "method": "us = (T(K appends) - T(1 append)) / (K - 1); T = CUPTI kernel time per call "
                         "(median) on GPU, wall time on CPU (Pallas interpret mode)",
               "runtime_s": time.perf_counter() - t_start}
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"append_{payload['date']}"
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
    md = [f"# append_kv: XLA vs Pallas ({payload['date']})", "", f"Device: {payload['device']}", "",
          f"Method: {payload['method']}; pool {a.pages} pages x {a.page_size} tokens, K = {a.appends}.", "",
          common.markdown_table(records, COLUMNS)]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    print(f"wrote {stem}.json/.md in {payload['runtime_s']:.1f} s")
    bad = [r for r in records if r.get("bit_exact") is False or "error" in r]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
