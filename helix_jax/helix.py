"""Per-layer Helix MLA attention under ``shard_map`` (HELIX_SEMANTICS.md §4–§7).

metadata -> append new KV at rank-local slots -> bounded partial decode -> sanitize zero-KV rows
-> all-to-all over heads -> exact LSE combine.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from . import ledger
from .cache import HelixMLACache, MLAPages, append_kv, LATENT_DIM, ROPE_DIM
from .exchange import exchange_and_combine
from .ops.exchange import peer_groups
from .ops.mla_decode import mla_decode

__all__ = ["helix_mla_attention", "helix_attention_local"]


def _exchange_implementation(decode_implementation):
    """The exchange backend that goes with a decode backend: ffi with ffi, jnp with reference, else auto."""
    if decode_implementation in ("ffi", "reference"):
        return decode_implementation
    if decode_implementation in ("xla", "jnp"):
        return "reference"
    return None


def helix_attention_local(pages: MLAPages, page_table, q_latent, q_rope, c_latent_new, k_rope_new,
                          positions, *, axis_name: str, cp_size: int, page_size: int,
                          softmax_scale, implementation=None, exchange_transport=None, peer_groups=None):
    """The per-rank body (call inside ``shard_map``). Returns ``(out [B,G,Hc,D], lse [B,G,Hc], pages)``.

    ``exchange_transport`` / ``peer_groups``: the all-to-all transport (``ops.exchange``; the peer
    transport needs ``peer_groups = ops.exchange.peer_groups(mesh, axis_name)``).
    """
    rank = jax.lax.axis_index(axis_name)
    meta = ledger.verify_metadata(positions, rank, page_size=page_size, cp_size=cp_size)
    pages = append_kv(pages, page_table, meta.local_slots, c_latent_new, k_rope_new)
    o, lse = mla_decode(q_latent, q_rope, pages, page_table, kv_bounds=meta.kv_bounds,
                        softmax_scale=softmax_scale, implementation=implementation)
    out, lse = exchange_and_combine(o, lse, meta.kv_bounds == 0, axis_name=axis_name, cp_size=cp_size,
                                    implementation=_exchange_implementation(implementation),
                                    transport=exchange_transport, peer_groups=peer_groups)
    return out, lse, pages


@functools.partial(jax.jit, static_argnames=("mesh", "axis_name", "page_size", "softmax_scale", "implementation",
                                             "exchange_transport"))
def _step(pages, table, q_latent, q_rope, c_new, k_new, positions, *, mesh, axis_name,
          page_size, softmax_scale, implementation, exchange_transport):
    # pages: the cache's global pages tuple of any KV format; every leaf is sharded over cp.
    cp = int(mesh.shape[axis_name])
    a = axis_name
    groups = peer_groups(mesh, axis_name)

    def body(pages, table, q_latent, q_rope, c_new, k_new, positions):
        return helix_attention_local(
            pages, table[0], q_latent, q_rope, c_new, k_new, positions,
            axis_name=a, cp_size=cp, page_size=page_size, softmax_scale=softmax_scale,
            implementation=implementation, exchange_transport=exchange_transport, peer_groups=groups)

    out, lse, pages = jax.shard_map(
        body, mesh=mesh,
        in_specs=(P(a), P(a), P(), P(), P(), P(), P()),
        out_specs=(P(None, None, a, None), P(None, None, a), P(a)),
        check_vma=False,
    )(pages, table, q_latent, q_rope, c_new, k_new, positions)
    # A token past the cache capacity cannot be stored: make that loud (NaN), never silently wrong.
    cap = table.shape[2] * page_size * cp
    over = positions >= cap
    out = jnp.where(over[:, :, None, None], jnp.nan, out)
    lse = jnp.where(over[:, :, None], jnp.nan, lse)
    return out, lse, pages


def _validate(cache, q_latent, q_rope, c_latent_new, k_rope_new, positions):
    if not isinstance(cache, HelixMLACache):
        raise ValueError(f"cache must be a HelixMLACache, got {type(cache).__name__}")
    if q_latent.ndim != 4 or q_latent.shape[-1] != LATENT_DIM:
        raise ValueError(f"q_latent must have shape [B, G, H, {LATENT_DIM}], got {q_latent.shape}")
    b, g, h, _ = q_latent.shape
    checks = (("q_rope", q_rope, (b, g, h, ROPE_DIM)), ("c_latent_new", c_latent_new, (b, g, LATENT_DIM)),
              ("k_rope_new", k_rope_new, (b, g, ROPE_DIM)), ("positions", positions, (b, g)))
    for name, x, shape in checks:
        if x.shape != shape:
            raise ValueError(f"{name} must have shape {list(shape)}, got {list(x.shape)}")
    for name, x in (("q_latent", q_latent), ("q_rope", q_rope), ("c_latent_new", c_latent_new), ("k_rope_new", k_rope_new)):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(f"{name} must be floating point, got {x.dtype}")
    if q_rope.dtype != q_latent.dtype:
        raise ValueError(f"q_rope dtype {q_rope.dtype} must equal q_latent dtype {q_latent.dtype}")
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        raise ValueError(f"positions must be an integer array, got {positions.dtype}")
    if b != cache.batch:
        raise ValueError(f"q_latent batch B={b} does not match the cache's batch {cache.batch}")
    cp = cache.cp_size
    if h % cp:
        raise ValueError(f"q_latent heads H={h} must be divisible by cp={cp}")
    try:
        host = np.asarray(positions)
    except Exception:  # traced: overflow becomes NaN in the output instead
        return
    if host.size and host.min() < 0:
        raise ValueError("positions must be >= 0")
    if host.size and host.max() >= cache.capacity:
        raise ValueError(f"positions reach {host.max()} but the cache holds {cache.capacity} global tokens "
                         f"per sequence (pages_per_seq={cache.pages_per_seq}, page_size={cache.page_size}, cp={cp})")
    ledger.verify_metadata(host, 0, page_size=cache.page_size, cp_size=cp)  # consecutiveness (R8)


def helix_mla_attention(cache: HelixMLACache, q_latent, q_rope, c_latent_new, k_rope_new, positions, *,
                        softmax_scale, implementation=None, exchange_transport=None):
    """One Helix verify-group attention step on the cache's ``cp`` mesh.

    Args:
      cache: :class:`HelixMLACache` (sharded over ``cache.axis_name``).
      q_latent: ``[B, G, H, 512]`` absorbed queries; q_rope: ``[B, G, H, 64]`` RoPE'd at global positions.
      c_latent_new: ``[B, G, 512]``, k_rope_new: ``[B, G, 64]`` KV rows of the group's tokens.
      positions: ``[B, G]`` consecutive global positions ``p0 + j``.
      softmax_scale: logit scale; implementation: per-rank decode backend (see ``ops.mla_decode``).
      exchange_transport: all-to-all transport (``ops.exchange``): ``None`` (peer stores on GPU with
        the ffi backend in one process, else ``lax.all_to_all``), ``"collective"`` or ``"peer"``.

    Returns:
      ``(out [B, G, H, 512], lse [B, G, H], cache)``: ``out``/``lse`` head-sharded over cp; equal to
      dense causal attention of each token over global positions ``[0, pos]``. The new KV is in the
      returned cache; ``cache.lens`` (committed lengths) is left for the caller to advance.
    """
    q_latent, q_rope = jnp.asarray(q_latent), jnp.asarray(q_rope)
    c_latent_new, k_rope_new, positions = map(jnp.asarray, (c_latent_new, k_rope_new, positions))
    _validate(cache, q_latent, q_rope, c_latent_new, k_rope_new, positions)
    scale = float(softmax_scale)
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"softmax_scale must be a finite positive float, got {softmax_scale!r}")
    out, lse, pages = _step(
        cache.pages, cache.page_table, q_latent, q_rope, c_latent_new, k_rope_new,
        positions.astype(jnp.int32), mesh=cache.mesh, axis_name=cache.axis_name,
        page_size=cache.page_size, softmax_scale=scale, implementation=implementation,
        exchange_transport=exchange_transport)
    return out, lse, cache.with_pages(pages)
