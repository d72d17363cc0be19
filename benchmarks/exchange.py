"""Helix exchange cost per layer against the decode it follows, and the whole Helix step at cp vs cp=1.

For T = B*G query tokens in {1, 8, 64, 512} (G = 4 where B*G allows), H = 128 heads, bf16, each rank
holding its 1/cp of L = 64K tokens per sequence:

  * exchange = sanitize+pack -> all-to-all -> combine, per variant: ``ffi_peer`` (the default on GPU:
    custom call ``helix_exchange_peer``, a send kernel storing sanitized, packed rows straight into the
    peer's buffer over NVLink, then a combine kernel that first waits for the peer's rows), ``ffi``
    (custom calls around ``lax.all_to_all`` = NCCL), ``packed`` (same one-payload layout in jnp),
    ``unpacked`` (two all-to-alls, split on a non-leading axis); split into its kernels (pack /
    all-to-all / combine / other; the peer send kernel counts as all-to-all);
  * the all-to-all bandwidth (bytes leaving a rank / all-to-all time) against the link. For ``ffi``
    the all-to-all time is NCCL's kernel; for ``ffi_peer`` it is the exchange minus the ``ffi``
    variant's combine kernel (same math, no wait) minus other kernels: the send, the wait for the
    peer's rows inside the combine, and the pack that the send fuses;
  * the combine kernel's bandwidth against an elementwise copy of the same bytes;
  * the per-rank bf16 decode of the same step (``ops.mla_decode``, best backend available);
  * the whole per-rank Helix step (ledger metadata -> decode -> exchange) at cp and at cp=1 on one
    device holding the whole KV (the append is left out: without donation it would copy the pool).

Times are per-device kernel times from CUPTI (``jax.experimental.mosaic.gpu.profiler.measure``:
kernel time summed over the devices, divided by the device count; median of ``--reps`` calls) and,
for context, wall-clock per call. On CPU the script runs a small smoke configuration with wall-clock
times only. Writes ``<out>/exchange_<date>.{json,md}``.

    NCCL_NVLS_ENABLE=0 python benchmarks/exchange.py [--cp 2] [--tokens 1,8,64,512] [--check]
"""
from __future__ import annotations

import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")   # never NVLink multicast on shared hosts

import argparse
import json
import math
import pathlib
import statistics
import time

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from benchmarks import common  # noqa: E402
from helix_jax import ledger  # noqa: E402
from helix_jax.exchange import exchange_and_combine, exchange_and_combine_unpacked  # noqa: E402
from helix_jax.mesh import make_cp_mesh  # noqa: E402
from helix_jax.ops import exchange as ex  # noqa: E402
from helix_jax.ops.mla_decode import api as decode_api  # noqa: E402
from helix_jax.ops.mla_decode import mla_decode  # noqa: E402

D, DR = 512, 64
NVLINK_GB_S = 478.0           # 18 NVLinks between the two H200s, each way
GROUP_FOR_T = {1: (1, 1), 8: (2, 4), 64: (16, 4), 512: (128, 4)}


# ------------------------------------------------------------------------------------------ timing
def _on_gpu():
    return jax.default_backend() == "gpu"


def _classify(name: str) -> str:
    n = name.lower()
    if "sanitizepack" in n:
        return "pack"
    if "combinekernel" in n:
        return "combine"
    if "nccl" in n or "all_to_all" in n or "alltoall" in n or "peersend" in n:
        return "a2a"
    if "mla_" in n:
        return "decode"
    return "other"


def kernel_time(f, *args, devices: int, reps: int, per: int = 1, per_class: bool = False):
    """Per-device kernel ms per call / ``per`` (median over reps) and its breakdown by kernel class: the
    breakdown of the median rep, or with ``per_class`` each class's own median over the reps (a class
    absent from a rep counts 0 there)."""
    if not _on_gpu():
        return None, {}
    from jax.experimental.mosaic.gpu.profiler import measure

    totals, parts = [], []
    for _ in range(reps):
        _, ks = measure(f, aggregate=False)(*args)
        ks = ks or []
        totals.append(sum(t for _, t in ks) / devices / per)
        b = {}
        for name, t in ks:
            b[_classify(name)] = b.get(_classify(name), 0.0) + t / devices / per
        parts.append(b)
    if per_class:
        return statistics.median(totals), {k: statistics.median([b.get(k, 0.0) for b in parts])
                                           for k in set().union(*parts)}
    i = int(np.argsort(totals)[len(totals) // 2])
    return statistics.median(totals), parts[i]


def wall_time(f, *args, n: int, per: int = 1):
    """Wall-clock ms per call / ``per`` of back-to-back dispatches (includes launch gaps, host work)."""
    jax.block_until_ready(f(*args))
    t = time.perf_counter()
    for _ in range(n):
        r = f(*args)
    jax.block_until_ready(r)
    return (time.perf_counter() - t) / n / per * 1e3


def _dep(x, like):
    """A zero that XLA cannot fold (NaN-preserving) from one element of ``x``, to chain iterations."""
    return jnp.minimum(jnp.abs(x.reshape(-1)[0].astype(jnp.float32)), 0.0).astype(like.dtype)


# ------------------------------------------------------------------------------------------ inputs
def _sharded(mesh, shape, dtype, key, spec):
    """Random array generated directly in its sharding (no host round trip)."""
    def gen():
        x = jax.random.normal(jax.random.key(key), shape, jnp.float32)
        return x.astype(dtype)
    return jax.jit(gen, out_shardings=NamedSharding(mesh, spec))()


def exchange_fn(mesh, variant, chain: int):
    """``chain`` back-to-back exchanges in one program, each one's LSE input depending on the last
    one's output (steady state: the first all-to-all absorbs the devices' launch skew). Every
    output is returned so no part of any exchange can be dead code."""
    cp = int(mesh.shape["cp"])
    groups = ex.peer_groups(mesh, "cp")

    def one(o, l, m):
        if variant == "unpacked":
            return exchange_and_combine_unpacked(o, l, m, axis_name="cp", cp_size=cp)
        if variant == "ffi_peer":
            return exchange_and_combine(o, l, m, axis_name="cp", cp_size=cp, implementation="ffi", transport="peer",
                                        peer_groups=groups)
        impl = "ffi" if variant == "ffi" else "reference"
        return exchange_and_combine(o, l, m, axis_name="cp", cp_size=cp, implementation=impl,
                                    transport="collective")

    def body(o, l, m):
        o, l, m = o[0], l[0], m[0]                               # [B, G, H, D], [B, G, H], [B, G]
        outs = []
        for _ in range(chain):
            out, lo = one(o, l, m)
            outs.append((out, lo))
            l = l + _dep(lo, l)
            if variant == "unpacked":   # its data all-to-all reads only o: XLA would hoist it out of the chain
                o = o + _dep(lo, o)
        return outs

    spec = (P(None, None, "cp"), P(None, None, "cp"))
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("cp"),) * 3, out_specs=[spec] * chain,
                                 check_vma=False))


def step_fn(mesh, *, page_size, softmax_scale, decode_impl, exchange_impl, chain: int, transport=None):
    """``chain`` per-rank Helix steps without the append (metadata -> bounded decode -> exchange),
    chained through the queries so they run back to back."""
    cp = int(mesh.shape["cp"])
    groups = ex.peer_groups(mesh, "cp")

    def one(c, k, table, ql, qr, pos):
        rank = jax.lax.axis_index("cp")
        meta = ledger.verify_metadata(pos, rank, page_size=page_size, cp_size=cp)
        o, lse = mla_decode(ql, qr, (c, k), table[0], kv_bounds=meta.kv_bounds, softmax_scale=softmax_scale,
                            implementation=decode_impl)
        return exchange_and_combine(o, lse, meta.kv_bounds == 0, axis_name="cp", cp_size=cp,
                                    implementation=exchange_impl, transport=transport if cp > 1 else None,
                                    peer_groups=groups)

    def body(c, k, table, ql, qr, pos):
        outs = []
        for _ in range(chain):
            out, lo = one(c, k, table, ql, qr, pos)
            outs.append((out, lo))
            qr = qr + _dep(lo, qr)
        return outs

    spec = (P(None, None, "cp"), P(None, None, "cp"))
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("cp"), P("cp"), P("cp"), P(), P(), P()),
                                 out_specs=[spec] * chain, check_vma=False))


def step_inputs(mesh, b, g, h, seq_len, page_size, dtype, seed):
    """Random pools sharded over cp, identity page tables, queries, positions at the end of L."""
    cp = int(mesh.shape["cp"])
    npp = ledger.pages_per_rank(seq_len, page_size=page_size, cp_size=cp)
    n = b * npp
    c = _sharded(mesh, (cp * n, page_size, D), dtype, seed, P("cp"))
    k = _sharded(mesh, (cp * n, page_size, DR), dtype, seed + 1, P("cp"))
    table = jax.device_put(np.broadcast_to(np.arange(n, dtype=np.int32).reshape(b, npp), (cp, b, npp)).copy(),
                           NamedSharding(mesh, P("cp")))
    rep = NamedSharding(mesh, P())
    ql = _sharded(mesh, (b, g, h, D), dtype, seed + 2, P())
    qr = _sharded(mesh, (b, g, h, DR), dtype, seed + 3, P())
    pos = jax.device_put(np.broadcast_to(seq_len - g + np.arange(g, dtype=np.int32), (b, g)).copy(), rep)
    return c, k, table, ql, qr, pos


def decode_backend():
    plat = jax.default_backend()
    for name in ("ffi", "pallas"):
        try:
            if decode_api._resolve(name, plat) == name:
                return name
        except ValueError:
            continue
    return "reference"


# -------------------------------------------------------------------------------------- benchmark
def bench_exchange(mesh, t_tokens, h, dtype, reps, wall_n, variants, chain):
    cp = int(mesh.shape["cp"])
    b, g = GROUP_FOR_T[t_tokens]
    o = _sharded(mesh, (cp, b, g, h, D), dtype, 11, P("cp"))
    lse = _sharded(mesh, (cp, b, g, h), jnp.float32, 12, P("cp"))
    mask = jax.device_put(np.zeros((cp, b, g), bool), NamedSharding(mesh, P("cp")))
    mask = mask.at[:, 0, 0].set(True)                           # one zero-KV token per rank
    res, first = {}, None
    for v in variants:
        try:
            f = exchange_fn(mesh, v, chain)
            out = np.asarray(f(o, lse, mask)[-1][0].astype(jnp.float32))
            ms, parts = kernel_time(f, o, lse, mask, devices=cp, reps=reps, per=chain)
            res[v] = {"kernel_ms": ms, "parts_ms": parts, "wall_ms": wall_time(f, o, lse, mask, n=wall_n, per=chain)}
        except Exception as e:  # noqa: BLE001 - an experimental variant must not lose the others
            print(f"  exchange variant {v} T={t_tokens} failed: {type(e).__name__}: {str(e)[:400]}", flush=True)
            res[v] = {"kernel_ms": None, "parts_ms": {}, "wall_ms": None, "error": f"{type(e).__name__}: {e}"[:600]}
            continue
        if first is None:
            first = (v, out)
        else:                                                     # every variant computes the same thing
            res[v][f"max_abs_diff_vs_{first[0]}"] = float(np.nanmax(np.abs(out - first[1])))
        res[v]["finite"] = bool(np.isfinite(out).all())
    itemsize = jnp.dtype(dtype).itemsize
    payload = t_tokens * h * (D + 16 // itemsize) * itemsize          # bytes per rank
    return res, payload


def copy_ms(nbytes, reps):
    """Kernel ms of an elementwise read+write of nbytes/2 (the combine's bytes moved), one device."""
    x = jnp.zeros((max(nbytes // 8, 1),), jnp.uint32)
    f = jax.jit(lambda x: x ^ jnp.uint32(1))
    ms, _ = kernel_time(f, x, devices=1, reps=reps)
    return ms


def correctness_check(cp, h, dtype):
    """helix_mla_attention ffi at cp vs cp=1 vs float64 dense (bf16, straddling groups)."""
    import helix_jax as hj
    from helix_jax.cli.attention_check import dense_reference

    rng = np.random.default_rng(3)
    b, g, page, max_len = 3, 4, 64, 2048
    lens = np.array([62, 700, 2040 - g])
    kv = jnp.asarray(rng.standard_normal((b, max_len, 576)), dtype)
    q = jnp.asarray(rng.standard_normal((b, g, h, 576)), dtype)
    pos = lens[:, None] + np.arange(g)
    new = kv[np.arange(b)[:, None], pos]
    scale = 1 / np.sqrt(192.0)
    outs = {}
    for c in sorted({1, cp}):
        mesh = make_cp_mesh(c)
        cache = hj.HelixMLACache.from_global(kv[..., :512], kv[..., 512:], lens, mesh=mesh, page_size=page,
                                             max_len=max_len)
        out, _, _ = hj.helix_mla_attention(cache, q[..., :512], q[..., 512:], new[..., :512], new[..., 512:], pos,
                                           softmax_scale=scale, implementation="ffi")
        outs[c] = np.asarray(out.astype(jnp.float32), np.float64)
    ref = dense_reference(np.asarray(q.astype(jnp.float32)), np.asarray(kv.astype(jnp.float32)), pos, scale)
    rel = {f"cp{c}_vs_f64": float(np.linalg.norm(o - ref) / np.linalg.norm(ref)) for c, o in outs.items()}
    rel[f"cp{cp}_vs_cp1"] = float(np.linalg.norm(outs[cp] - outs[1]) / np.linalg.norm(outs[1]))
    rel["finite"] = bool(all(np.isfinite(o).all() for o in outs.values()))
    return rel


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cp", type=int, default=2)
    ap.add_argument("--tokens", default=None, help="comma list of T = B*G (default 1,8,64,512; CPU: 1,8)")
    ap.add_argument("--heads", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=None, help="global L per sequence (default 65536; CPU 1024)")
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--wall-n", type=int, default=10)
    ap.add_argument("--chain", type=int, default=16, help="exchanges chained per timed program")
    ap.add_argument("--step-chain", type=int, default=3, help="steps chained per timed program")
    ap.add_argument("--decode", default=None, help="decode backend (default: ffi, else pallas, else reference)")
    ap.add_argument("--variants", default=None,
                    help="comma list of ffi_peer,ffi,packed,unpacked (default: all available)")
    ap.add_argument("--exchange-only", action="store_true", help="only the exchange variants (no decode/step)")
    ap.add_argument("--label", default="", help="suffix of the result files, e.g. memcpy for an XLA-flag variant")
    ap.add_argument("--check", action="store_true", help="also check cp vs cp=1 vs float64 (ffi backends)")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"))
    a = ap.parse_args(argv)
    gpu = _on_gpu()
    tokens = [int(x) for x in (a.tokens or ("1,8,64,512" if gpu else "1,8")).split(",")]
    seq_len = a.seq_len or (65536 if gpu else 1024)
    dtype = jnp.bfloat16
    scale = 1 / math.sqrt(192.0)
    dec = a.decode or decode_backend()
    exch = ex.resolve(None)
    ffi_mod = ex.api._backend_module("ffi")
    variants = ("packed", "unpacked")
    if ffi_mod.availability(jax.default_backend())[0]:
        variants = ("ffi",) + variants
        if ffi_mod.peer_availability(jax.default_backend())[0]:
            variants = ("ffi_peer",) + variants
    if a.variants:
        variants = tuple(v for v in a.variants.split(",") if v in variants)
    devs = jax.devices()
    print(f"devices: {len(devs)} x {devs[0].device_kind}; decode backend {dec}; exchange backend {exch}", flush=True)
    mesh_cp, mesh_1 = make_cp_mesh(a.cp), make_cp_mesh(1)
    copy_gb_s = common.copy_tb_per_s(1 << 30) * 1e3 if gpu else None
    records, extra = [], {}
    for t in tokens:
        b, g = GROUP_FOR_T[t]
        res, payload = bench_exchange(mesh_cp, t, a.heads, dtype, a.reps, a.wall_n, variants, a.chain)
        main_v = next((v for v in ("ffi_peer", "ffi", "packed", "unpacked") if res.get(v, {}).get("kernel_ms")
                       or res.get(v, {}).get("wall_ms")), None)
        if main_v is None:
            print(f"T={t}: no exchange variant ran", flush=True)
            continue
        ex_ms = res[main_v]["kernel_ms"] if gpu else res[main_v]["wall_ms"]
        parts = dict(res[main_v]["parts_ms"])
        sent = payload * (a.cp - 1) / a.cp
        if main_v == "ffi_peer" and res.get("ffi", {}).get("parts_ms", {}).get("combine") and ex_ms:
            # send + the combine's wait for the peer's rows: all but the combine's own work (timed
            # in the ffi variant) and the small other kernels
            parts["send"] = parts.get("a2a")
            parts["combine_with_wait"] = parts.get("combine")
            parts["combine"] = res["ffi"]["parts_ms"]["combine"]
            parts["a2a"] = ex_ms - parts["combine"] - parts.get("other", 0.0)
            res[main_v]["a2a_effective_ms"] = parts["a2a"]
        a2a_gbs = sent / (parts["a2a"] * 1e-3) / 1e9 if parts.get("a2a") else None
        comb_bytes = payload + t * a.heads // a.cp * (D * 2 + 4)   # read the received payload, write out + lse
        comb_gbs = comb_bytes / (parts["combine"] * 1e-3) / 1e9 if parts.get("combine") else None
        same_copy = copy_ms(comb_bytes, a.reps) if gpu else None
        print(f"T={t:4d} (B={b}, G={g}) cp={a.cp}: exchange {ex_ms:.4f} ms/layer [{main_v}; "
              + ", ".join(f"{v} {_f(res[v]['kernel_ms'] if gpu else res[v]['wall_ms'])}" for v in res)
              + "; wall " + ", ".join(f"{v} {_f(res[v]['wall_ms'])}" for v in res)
              + f"]  parts {({k: round(v, 4) for k, v in parts.items()})}  a2a "
              + (f"{a2a_gbs:.0f} GB/s ({a2a_gbs / NVLINK_GB_S:.0%} of link)" if a2a_gbs else "n/a")
              + f"  combine {comb_gbs or 0:.0f} GB/s (same-size copy {same_copy or 0:.4f} ms)", flush=True)
        steps = {}
        for c, mesh in ((a.cp, mesh_cp), (1, mesh_1)) if not a.exchange_only else ():
            try:
                args = step_inputs(mesh, b, g, a.heads, seq_len, a.page_size, dtype, seed=100 + t)
                f = step_fn(mesh, page_size=a.page_size, softmax_scale=scale, decode_impl=dec, exchange_impl=exch,
                            chain=a.step_chain,
                            transport="peer" if main_v == "ffi_peer" and exch == "ffi" else "collective")
                k_ms, k_parts = kernel_time(f, *args, devices=c, reps=a.reps, per=a.step_chain)
                steps[c] = {"kernel_ms": k_ms, "parts_ms": k_parts,
                            "wall_ms": wall_time(f, *args, n=a.wall_n, per=a.step_chain)}
                del args
            except Exception as e:  # noqa: BLE001 - record and go on: one failing size must not lose the rest
                print(f"  step cp={c} T={t} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
                steps[c] = {"kernel_ms": None, "parts_ms": {}, "wall_ms": None,
                            "error": f"{type(e).__name__}: {e}"[:500]}
        none = {"kernel_ms": None, "parts_ms": {}, "wall_ms": None}
        steps.setdefault(a.cp, none)
        steps.setdefault(1, none)
        st = steps[a.cp]["kernel_ms"] if gpu else steps[a.cp]["wall_ms"]
        st1 = steps[1]["kernel_ms"] if gpu else steps[1]["wall_ms"]
        ex1 = sum(v for k, v in steps[1]["parts_ms"].items() if k in ("pack", "combine")) if gpu and st1 else None
        in_step = sum(v for k, v in steps[a.cp]["parts_ms"].items() if k in ("pack", "a2a", "combine")) if st else None
        link = (a2a_gbs / NVLINK_GB_S) if a2a_gbs else None
        vs_copy = (same_copy / parts["combine"]) if same_copy and parts.get("combine") else None
        records.append({"cp": a.cp, "T": t, "H": a.heads, "L": seq_len, "exchange_ms": ex_ms, "step_ms": st,
                        "exchange_share": ex_ms / st if st else None, "a2a_gb_per_s": a2a_gbs,
                        "decode_backend": dec, "exchange_in_step_ms": in_step,
                        "exchange_share_in_step": (in_step / st) if st and in_step else None,
                        "B": b, "G": g, "exchange_variant": main_v,
                        "exchange_variants": res, "step_parts_ms": steps[a.cp]["parts_ms"],
                        "step_wall_ms": steps[a.cp]["wall_ms"], "a2a_link_fraction": link,
                        "payload_bytes_per_rank": payload, "combine_gb_per_s": comb_gbs,
                        "combine_vs_same_size_copy": vs_copy,
                        "combine_vs_copy_ceiling": (comb_gbs / copy_gb_s) if comb_gbs and copy_gb_s else None})
        records.append({"cp": 1, "T": t, "H": a.heads, "L": seq_len, "exchange_ms": ex1, "step_ms": st1,
                        "exchange_share": (ex1 / st1) if ex1 is not None and st1 else None, "a2a_gb_per_s": None,
                        "B": b, "G": g, "step_parts_ms": steps[1]["parts_ms"], "step_wall_ms": steps[1]["wall_ms"],
                        "speedup_cp_vs_1": (st1 / st) if st and st1 else None,
                        "errors": {c: v["error"] for c, v in steps.items() if "error" in v} or None})
        r = records[-2]
        if st is None or st1 is None:
            print(f"  step unavailable (cp={a.cp}: {st}, cp=1: {st1})", flush=True)
            continue
        print(f"  step cp={a.cp} {st:.4f} ms/layer {({k: round(v, 4) for k, v in steps[a.cp]['parts_ms'].items()})} "
              f"share {r['exchange_share']:.1%} (in-step exchange kernels {r['exchange_share_in_step'] or 0:.1%}); "
              f"cp=1 {st1:.4f} ms/layer {({k: round(v, 4) for k, v in steps[1]['parts_ms'].items()})}; "
              f"cp=1/cp={a.cp} {st1 / st:.2f}x", flush=True)
    if a.check:
        try:
            extra["check"] = correctness_check(a.cp, a.heads, dtype)
        except Exception as e:  # noqa: BLE001
            extra["check"] = {"error": f"{type(e).__name__}: {e}"[:500]}
        print("check:", extra["check"], flush=True)
    device = common.device_line()
    date = common.today()
    doc = {"device": device, "date": date, "decode_backend": dec, "exchange_backend": exch,
           "copy_ceiling_gb_per_s": copy_gb_s,
           "nvlink_gb_per_s_each_way": NVLINK_GB_S, "timing": "CUPTI kernel ms per device" if gpu else "wall ms",
           "records": records, **extra}
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"exchange_{a.label + '_' if a.label else ''}{date}"
    doc["label"] = a.label
    doc["xla_flags"] = os.environ.get("XLA_FLAGS", "")
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1))
    (out / f"{stem}.md").write_text(markdown(doc))
    print(f"wrote {out}/{stem}.json and .md")


def _f(x, fmt="{:.4f}"):
    return "–" if x is None else fmt.format(x)


def markdown(doc):
    lines = [f"# Helix exchange vs step ({doc['device']}, {doc['date']})", "",
             f"Decode backend `{doc['decode_backend']}`, exchange backend `{doc['exchange_backend']}`; "
             f"times: {doc['timing']}. Copy ceiling {_f(doc['copy_ceiling_gb_per_s'], '{:.0f}')} GB/s; "
             f"link {doc['nvlink_gb_per_s_each_way']:.0f} GB/s each way.", "",
             "| cp | T | B×G | L | exchange ms | step ms | exchange share | a2a GB/s (link %) | combine GB/s "
             "| cp=1 / cp step |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["records"]:
        link = f"{r['a2a_gb_per_s']:.0f} ({r['a2a_link_fraction']:.0%})" if r.get("a2a_gb_per_s") else "–"
        lines.append(f"| {r['cp']} | {r['T']} | {r['B']}×{r['G']} | {r['L']} | {_f(r['exchange_ms'])} | "
                     f"{_f(r['step_ms'], '{:.3f}')} | {_f(r['exchange_share'], '{:.1%}')} | {link} | "
                     f"{_f(r.get('combine_gb_per_s'), '{:.0f}')} | {_f(r.get('speedup_cp_vs_1'), '{:.2f}x')} |")
    names = ("ffi_peer", "ffi", "packed", "unpacked")
    lines += ["", "Exchange variants (kernel ms per device; a2a GB/s = bytes leaving a rank / all-to-all time: "
              "NCCL's kernel for `ffi`; for `ffi_peer` the exchange minus the `ffi` combine kernel minus other "
              "kernels, i.e. send (pack fused) + the combine's wait for the peer's rows): `ffi_peer` custom call "
              "`helix_exchange_peer` (rows stored straight into the peer over NVLink, combine in the same call), "
              "`ffi` FFI pack + `lax.all_to_all` (NCCL) + FFI combine, `packed` jnp one-payload, `unpacked` two "
              "all-to-alls on a non-leading axis.", "",
              "| T | " + " | ".join(names) + " | " + " | ".join(f"{k} a2a GB/s" for k in names[:2]) + " |",
              "|---|" + "---|" * (len(names) + 2)]
    for r in doc["records"]:
        if "exchange_variants" in r:
            v = r["exchange_variants"]
            key = "kernel_ms" if doc["timing"].startswith("CUPTI") else "wall_ms"
            sent = r["payload_bytes_per_rank"] * (r["cp"] - 1) / r["cp"]
            a2a = {k: v[k].get("a2a_effective_ms") or v[k].get("parts_ms", {}).get("a2a") for k in names[:2] if k in v}
            gbs = [(sent / (a2a[k] * 1e-3) / 1e9) if a2a.get(k) else None for k in names[:2]]
            lines.append(f"| {r['T']} | " + " | ".join(_f(v[k][key]) if k in v else "–" for k in names) + " | "
                         + " | ".join(_f(g, "{:.0f}") + (f" ({g / doc['nvlink_gb_per_s_each_way']:.0%})" if g else "")
                                      for g in gbs) + " |")
    if "check" in doc:
        lines += ["", f"Correctness (bf16, relative L2): {doc['check']}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
