"""Pure-jnp bounded MLA decode over one rank's paged KV (HELIX_SEMANTICS.md §5.1).

The oracle every other backend is tested against, and the ``xla`` baseline of the benchmarks.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ...cache import dequantize_pages


def gather_pages(pool, page_table):
    """``pool [N, P, D]``, ``page_table [B, npp]`` -> ``[B, npp*P, D]`` in local-slot order."""
    n, p, d = pool.shape
    b, npp = page_table.shape
    pt = jnp.clip(page_table, 0, n - 1)
    return pool[pt].reshape(b, npp * p, d)


SUPPORTED_KV_DTYPES = ("bf16", "fp8_e4m3", "nvfp4")


def mla_decode(q_latent, q_rope, c_latent, k_rope, page_table, kv_bounds, softmax_scale):
    """Bounded absorbed-MLA decode; shapes already validated by the API.

    q_latent ``[B, G, H, Dl]``, q_rope ``[B, G, H, Dr]``, c_latent ``[N, P, Dl]``,
    k_rope ``[N, P, Dr]``, page_table ``[B, npp]``, kv_bounds ``[B, G]``.
    Returns ``(o [B, G, H, Dl] in q_latent.dtype, lse [B, G, H] float32)``; rows with bound 0 give
    ``(0, -inf)``.
    """
    kv_lat = gather_pages(c_latent, page_table)
    kv_rope = gather_pages(k_rope, page_table)
    return decode_rows(q_latent, q_rope, kv_lat, kv_rope, kv_bounds, softmax_scale)


def mla_decode_quantized(q_latent, q_rope, pages, page_table, kv_bounds, softmax_scale):
    """Bounded decode of quantized pages (``FP8Pages`` / ``NVFP4Pages``, §10).

    Gathers the rows the table names (codes and block scales alike), dequantizes them to float32
    inside the graph, then runs the same bounded decode as the unquantized path.
    """
    gathered = type(pages)(*[gather_pages(x, page_table) if x.ndim == 3 else x for x in pages])
    kv_lat, kv_rope = dequantize_pages(gathered, jnp.float32)
    return decode_rows(q_latent, q_rope, kv_lat, kv_rope, kv_bounds, softmax_scale)


def decode_rows(q_latent, q_rope, kv_lat, kv_rope, kv_bounds, softmax_scale):
    """Bounded decode over rows already in local-slot order: ``kv_lat [B, L, Dl]``, ``kv_rope [B, L, Dr]``."""
    length = kv_lat.shape[1]
    bounds = jnp.asarray(kv_bounds, jnp.int32)
    idx = jnp.arange(length)
    # Entries at or past every token's bound may be garbage (NaN): zero them so 0 * NaN never occurs.
    live = idx[None, :] < jnp.max(bounds, axis=1)[:, None]                     # [B, L]
    kv_lat = jnp.where(live[..., None], kv_lat, 0).astype(jnp.float32)
    kv_rope = jnp.where(live[..., None], kv_rope, 0).astype(jnp.float32)
    hi = jax.lax.Precision.HIGHEST
    logits = (jnp.einsum("bghd,bld->bghl", q_latent.astype(jnp.float32), kv_lat, precision=hi)
              + jnp.einsum("bghd,bld->bghl", q_rope.astype(jnp.float32), kv_rope, precision=hi))
    logits = logits * jnp.float32(softmax_scale)
    valid = idx[None, None, None, :] < bounds[:, :, None, None]
    logits = jnp.where(valid, logits, -jnp.inf)
    m = jnp.max(logits, axis=-1)
    m_safe = jnp.where(jnp.isfinite(m), m, 0.0)
    p = jnp.where(valid, jnp.exp(logits - m_safe[..., None]), 0.0)
    s = jnp.sum(p, axis=-1)
    o = jnp.einsum("bghl,bld->bghd", p, kv_lat, precision=hi)
    empty = (bounds == 0)[:, :, None]
    o = jnp.where(empty[..., None], 0.0, o / jnp.where(empty, 1.0, s)[..., None])
    lse = jnp.where(empty, -jnp.inf, m_safe + jnp.log(jnp.where(empty, 1.0, s)))
    return o.astype(q_latent.dtype), lse.astype(jnp.float32)
