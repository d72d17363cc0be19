"""One Helix attention step on a CP mesh, compared with dense causal attention in float64."""
from __future__ import annotations

import json
import time

import numpy as np


def add_arguments(p):
    p.add_argument("--cp", type=int, default=4, help="CP ranks (devices on the mesh)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--group", type=int, default=4, help="verify-group length G = 1 + draft_len")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--implementation", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object last")


def dense_reference(q, kv, positions, scale):
    """float64 dense causal MLA: q [B,G,H,576], kv [B,L,576] -> [B,G,H,512]."""
    q = np.asarray(q, np.float64)
    kv = np.asarray(kv, np.float64)
    b, g, h, _ = q.shape
    out = np.zeros((b, g, h, 512))
    for i in range(b):
        for j in range(g):
            k = kv[i, : positions[i, j] + 1]
            logits = scale * q[i, j] @ k.T
            w = np.exp(logits - logits.max(-1, keepdims=True))
            out[i, j] = (w @ k[:, :512]) / w.sum(-1, keepdims=True)
    return out


def run(args) -> int:
    import jax.numpy as jnp

    import helix_jax as hj

    rng = np.random.default_rng(args.seed)
    mesh = hj.make_cp_mesh(args.cp)
    g = args.group
    dt = jnp.dtype(args.dtype)
    lens = rng.integers(0, args.max_len - g, size=args.batch)
    kv = rng.standard_normal((args.batch, args.max_len, 576)).astype(np.float32)
    q = rng.standard_normal((args.batch, g, args.heads, 576)).astype(np.float32)
    positions = lens[:, None] + np.arange(g)
    scale = 1.0 / np.sqrt(192.0)
    kv_d = jnp.asarray(kv, dt)
    cache = hj.HelixMLACache.from_global(kv_d[..., :512], kv_d[..., 512:], lens, mesh=mesh,
                                         page_size=args.page_size, max_len=args.max_len)
    new = kv_d[np.arange(args.batch)[:, None], positions]
    qd = jnp.asarray(q, dt)
    t0 = time.perf_counter()
    out, lse, _ = hj.helix_mla_attention(cache, qd[..., :512], qd[..., 512:], new[..., :512],
                                         new[..., 512:], positions, softmax_scale=scale,
                                         implementation=args.implementation)
    out = np.asarray(out.astype(jnp.float32), np.float64)
    dt_s = time.perf_counter() - t0
    ref = dense_reference(np.asarray(qd.astype(jnp.float32)), np.asarray(kv_d.astype(jnp.float32)), positions, scale)
    rel = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
    mx = float(np.abs(out - ref).max())
    owners = np.asarray(hj.ledger.owner(positions, page_size=args.page_size, cp_size=args.cp))
    split = int(sum(len(set(r)) > 1 for r in owners.tolist()))
    print(f"Helix attention step: cp={args.cp} B={args.batch} G={g} H={args.heads} P={args.page_size} "
          f"dtype={args.dtype}; {split}/{args.batch} verify groups straddle ranks")
    print(f"  relative L2 error vs float64 dense reference: {rel:.3e}   max abs error: {mx:.3e}   "
          f"finite: {bool(np.isfinite(out).all())}   ({dt_s*1e3:.0f} ms incl. compile)")
    if args.json:
        print(json.dumps({"cp": args.cp, "B": args.batch, "G": g, "H": args.heads, "rel_err": rel,
                          "max_abs_err": mx, "straddling_groups": split}))
    tol = 1e-5 if args.dtype == "float32" else 2e-2
    return 0 if rel < tol else 1
