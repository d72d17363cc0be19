"""Send-grid sweep of the peer exchange (custom call ``helix_exchange_peer``) on the 2-GPU machine.

For T in ``--tokens`` (H = 128, bf16, cp = 2): the chained exchange of ``benchmarks/exchange.py``
(variant ``ffi_peer``) under each ``HELIX_PEER_BLOCKS`` (send blocks; the handler reads it per call),
against the NCCL variant (``ffi``: FFI pack -> ``lax.all_to_all`` -> FFI combine) of the same program.
Times are CUPTI kernel ms per device (median of reps). The all-to-all time of the peer exchange is the
exchange minus the NCCL variant's combine kernel (same math, no wait) minus other kernels: the send
kernel (pack fused) plus the combine's wait for the peer's rows. GB/s = bytes leaving a rank / that
time, against the link. Each variant's outputs must be bitwise the NCCL variant's. Writes
``<out>/peer_a2a_sweep_<date>.{json,md}``.

    NCCL_NVLS_ENABLE=0 python benchmarks/peer_a2a_sweep.py [--tokens 64,512] [--blocks 128,256,512]
"""
from __future__ import annotations

import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import argparse
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from benchmarks import common  # noqa: E402
from benchmarks.exchange import GROUP_FOR_T, NVLINK_GB_S, D, _sharded, exchange_fn, kernel_time  # noqa: E402
from helix_jax.mesh import make_cp_mesh  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="64,512")
    ap.add_argument("--heads", type=int, default=128)
    ap.add_argument("--blocks", default="64,128,256,512", help="comma list of HELIX_PEER_BLOCKS values")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--chain", type=int, default=16)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"))
    a = ap.parse_args(argv)
    if jax.default_backend() != "gpu" or len(jax.devices()) < 2:
        sys.exit("peer_a2a_sweep needs 2 GPUs (it times CUDA kernels)")
    mesh = make_cp_mesh(2)
    cp, h, dtype = 2, a.heads, jnp.bfloat16
    records = []
    for t in (int(x) for x in a.tokens.split(",")):
        b, g = GROUP_FOR_T[t]
        o = _sharded(mesh, (cp, b, g, h, D), dtype, 11, P("cp"))
        lse = _sharded(mesh, (cp, b, g, h), jnp.float32, 12, P("cp"))
        mask = jax.device_put(np.zeros((cp, b, g), bool), NamedSharding(mesh, P("cp"))).at[:, 0, 0].set(True)
        sent = t * h * (D + 8) * 2 * (cp - 1) / cp
        nccl = exchange_fn(mesh, "ffi", a.chain)
        want = [np.asarray(x) for x in jax.tree.leaves(nccl(o, lse, mask))]
        ms, parts = kernel_time(nccl, o, lse, mask, devices=cp, reps=a.reps, per=a.chain, per_class=True)
        combine_ms = parts.get("combine")
        records.append({"T": t, "variant": "nccl", "blocks": None, "exchange_ms": ms, "a2a_ms": parts.get("a2a"),
                        "pack_ms": parts.get("pack"), "combine_ms": combine_ms})
        peer = exchange_fn(mesh, "ffi_peer", a.chain)
        for blocks in (int(x) for x in a.blocks.split(",")):
            os.environ["HELIX_PEER_BLOCKS"] = str(blocks)
            got = [np.asarray(x) for x in jax.tree.leaves(peer(o, lse, mask))]
            same = all(np.array_equal(x, y, equal_nan=True) for x, y in zip(got, want))
            ms, parts = kernel_time(peer, o, lse, mask, devices=cp, reps=a.reps, per=a.chain, per_class=True)
            records.append({"T": t, "variant": "peer", "blocks": blocks, "exchange_ms": ms,
                            "send_ms": parts.get("a2a"), "combine_with_wait_ms": parts.get("combine"),
                            "a2a_ms": ms - combine_ms - parts.get("other", 0.0), "same_as_nccl": same})
        for r in (r for r in records if r["T"] == t):
            r["a2a_gb_per_s"] = sent / (r["a2a_ms"] * 1e-3) / 1e9
            r["link_fraction"] = r["a2a_gb_per_s"] / NVLINK_GB_S
            print(f"T={t} {r['variant']:5s} blocks={r['blocks']}: exchange {r['exchange_ms']:.4f} ms, a2a "
                  f"{r['a2a_ms']:.4f} ms = {r['a2a_gb_per_s']:.0f} GB/s ({r['link_fraction']:.0%} of link); send "
                  f"{r.get('send_ms') or 0:.4f}, combine+wait {r.get('combine_with_wait_ms') or 0:.4f}; "
                  f"same={r.get('same_as_nccl', '-')}", flush=True)
    os.environ.pop("HELIX_PEER_BLOCKS", None)
    doc = {"device": common.device_line(), "date": common.today(), "cp": cp, "H": h,
           "nvlink_gb_per_s_each_way": NVLINK_GB_S, "chain": a.chain,
           "timing": "CUPTI kernel ms per device, median of reps", "records": records}
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"peer_a2a_sweep_{doc['date']}"
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1))
    lines = [f"# Peer exchange send grids ({doc['device']}, {doc['date']})", "",
             f"cp=2, H={h}, bf16; {a.chain} exchanges chained per program; {doc['timing']}. a2a: NCCL's kernel; "
             "for the peer exchange, the exchange minus the NCCL variant's combine kernel minus other kernels "
             "(= send with the pack fused + the combine's wait for the peer's rows).", "",
             "| T | variant | send blocks | exchange ms | a2a ms | a2a GB/s | link | send ms | combine+wait ms "
             "| bitwise = NCCL |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda x: "–" if x is None else f"{x:.4f}"
    for r in records:
        lines.append(f"| {r['T']} | {r['variant']} | {r['blocks'] or '–'} | {r['exchange_ms']:.4f} | "
                     f"{r['a2a_ms']:.4f} | {r['a2a_gb_per_s']:.0f} | {r['link_fraction']:.0%} | "
                     f"{f(r.get('send_ms'))} | {f(r.get('combine_with_wait_ms'))} | {r.get('same_as_nccl', '–')} |")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}/{stem}.json and .md")


if __name__ == "__main__":
    main()
