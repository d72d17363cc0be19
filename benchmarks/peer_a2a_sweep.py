"""Launch-shape sweep of the peer all-to-all kernel (``helix_pack_all_to_all``) on the 2-GPU machine.

For T in ``--tokens`` (H = 128, bf16, cp = 2): the chained exchange of ``benchmarks/exchange.py``
(variant ``ffi_peer``) under each launch shape ``blocks:unroll`` (environment ``HELIX_PEER_BLOCKS`` /
``HELIX_PEER_UNROLL``, read by the handler per call), against the NCCL variant (``ffi``) of the same program. Reports the all-to-all
kernel's CUPTI time per device (median of reps; the peer kernel includes sanitize + pack) and
bytes leaving a rank / that time against the link, and checks each variant's output is bitwise the
NCCL variant's. Writes ``<out>/peer_a2a_sweep_<date>.{json,md}``.

    NCCL_NVLS_ENABLE=0 python benchmarks/peer_a2a_sweep.py [--tokens 64,512]
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
    ap.add_argument("--shapes", default="64:1,128:1,128:2,256:1,256:2,512:1,512:4",
                    help="comma list of blocks:unroll")
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
        rec = {"T": t, "variant": "nccl", "blocks": None, "unroll": None, "exchange_ms": ms, "a2a_ms": parts.get("a2a")}
        records.append(rec)
        peer = exchange_fn(mesh, "ffi_peer", a.chain)
        for shape in a.shapes.split(","):
            blocks, unroll = (int(x) for x in shape.split(":"))
            os.environ["HELIX_PEER_BLOCKS"], os.environ["HELIX_PEER_UNROLL"] = str(blocks), str(unroll)
            got = [np.asarray(x) for x in jax.tree.leaves(peer(o, lse, mask))]
            same = all(np.array_equal(x, y, equal_nan=True) for x, y in zip(got, want))
            ms, parts = kernel_time(peer, o, lse, mask, devices=cp, reps=a.reps, per=a.chain, per_class=True)
            records.append({"T": t, "variant": "peer", "blocks": blocks, "unroll": unroll,
                            "exchange_ms": ms, "a2a_ms": parts.get("a2a"), "same_as_nccl": same})
        for r in records:
            if r["T"] == t and r.get("a2a_ms"):
                r["a2a_gb_per_s"] = sent / (r["a2a_ms"] * 1e-3) / 1e9
                r["link_fraction"] = r["a2a_gb_per_s"] / NVLINK_GB_S
        for r in (r for r in records if r["T"] == t):
            print(f"T={t} {r['variant']:5s} blocks={r['blocks']} unroll={r['unroll']}: exchange {r['exchange_ms']:.4f} "
                  f"ms, a2a {r['a2a_ms']:.4f} ms = {r.get('a2a_gb_per_s', 0):.0f} GB/s "
                  f"({r.get('link_fraction', 0):.0%} of link) same={r.get('same_as_nccl', '-')}", flush=True)
    for k in ("HELIX_PEER_BLOCKS", "HELIX_PEER_UNROLL"):
        os.environ.pop(k, None)
    doc = {"device": common.device_line(), "date": common.today(), "cp": cp, "H": h,
           "nvlink_gb_per_s_each_way": NVLINK_GB_S, "chain": a.chain,
           "timing": "CUPTI kernel ms per device, median of reps", "records": records}
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"peer_a2a_sweep_{doc['date']}"
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1))
    lines = [f"# Peer all-to-all launch shapes ({doc['device']}, {doc['date']})", "",
             f"cp=2, H={h}, bf16; {a.chain} exchanges chained per program; {doc['timing']}; a2a GB/s = bytes "
             "leaving a rank / all-to-all kernel time (the peer kernel includes sanitize + pack; NCCL's does not).", "",
             "| T | variant | blocks | unroll | exchange ms | a2a ms | a2a GB/s | link | bitwise = NCCL |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['T']} | {r['variant']} | {r['blocks'] or '–'} | {r['unroll'] or '–'} | "
                     f"{r['exchange_ms']:.4f} | {r['a2a_ms']:.4f} | {r.get('a2a_gb_per_s', 0):.0f} | "
                     f"{r.get('link_fraction', 0):.0%} | {r.get('same_as_nccl', '–')} |")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}/{stem}.json and .md")


if __name__ == "__main__":
    main()
