"""Independent float64 numpy oracles (no helix_jax code)."""
import numpy as np


def dense_causal_mla(q, kv, positions, scale):
    """q [B,G,H,576], kv [B,L,576] (global positions), positions [B,G] -> out [B,G,H,512], lse [B,G,H]."""
    return bounded_decode(q, kv, np.asarray(positions) + 1, scale)


def bounded_decode(q, kv_local, bounds, scale):
    """q [B,G,H,576], kv_local [B,L,576] rank-local rows, bounds [B,G] -> (o, lse) with (0, -inf) for empty."""
    q = np.asarray(q, np.float64)
    kv_local = np.asarray(kv_local, np.float64)
    b, g, h, _ = q.shape
    o = np.zeros((b, g, h, 512))
    lse = np.full((b, g, h), -np.inf)
    for i in range(b):
        for j in range(g):
            n = int(bounds[i, j])
            if n == 0:
                continue
            k = kv_local[i, :n]
            logits = scale * q[i, j] @ k.T
            m = logits.max(-1, keepdims=True)
            w = np.exp(logits - m)
            o[i, j] = (w @ k[:, :512]) / w.sum(-1, keepdims=True)
            lse[i, j] = (m + np.log(w.sum(-1, keepdims=True)))[:, 0]
    return o, lse


def rel_err(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))
