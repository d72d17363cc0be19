"""Helix exchange: zero-KV sanitize, all-to-all over head groups, exact LSE combine (§6–§7).

All functions run per rank inside ``shard_map`` over the ``cp`` axis.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .ops.combine import combine
from .ops.exchange import exchange as _packed_exchange

__all__ = ["sanitize", "all_to_all_heads", "exchange_and_combine", "exchange_and_combine_unpacked"]


def sanitize(partial_out, lse, zero_kv_mask):
    """Overwrite rows with no local KV by the softmax identity ``(0, -inf)`` (R1, R11).

    partial_out ``[B, G, H, D]``, lse ``[B, G, H]``, zero_kv_mask ``[B, G]`` bool (``kv_bounds == 0``)
    or ``None`` (pass-through). Overwrites whatever is there, NaN included.
    """
    if zero_kv_mask is None:
        return partial_out, lse
    m = jnp.asarray(zero_kv_mask, bool)
    return (jnp.where(m[:, :, None, None], jnp.zeros((), partial_out.dtype), partial_out),
            jnp.where(m[:, :, None], -jnp.inf, lse))


def all_to_all_heads(partial_out, lse, *, axis_name: str, cp_size: int):
    """Send head group ``g`` to rank ``g``: ``[B, G, H, D]`` -> ``[B, G, cp(src), Hc, D]``."""
    b, g, h, d = partial_out.shape
    if h % cp_size:
        raise ValueError(f"heads H={h} must be divisible by cp={cp_size}")
    hc = h // cp_size
    o = partial_out.reshape(b, g, cp_size, hc, d)
    s = lse.reshape(b, g, cp_size, hc)
    if cp_size == 1:
        return o, s
    o = jax.lax.all_to_all(o, axis_name, 2, 2, tiled=True)
    s = jax.lax.all_to_all(s, axis_name, 2, 2, tiled=True)
    return o, s


def exchange_and_combine_unpacked(partial_out, lse, zero_kv_mask, *, axis_name: str, cp_size: int):
    """The plain form: two all-to-alls (data, LSE) split on a non-leading axis. Kept as a baseline."""
    o, s = sanitize(partial_out, lse, zero_kv_mask)
    o, s = all_to_all_heads(o, s, axis_name=axis_name, cp_size=cp_size)
    return combine(o, s, axis=2)


def exchange_and_combine(partial_out, lse, zero_kv_mask, *, axis_name: str, cp_size: int,
                         implementation=None, transport=None, peer_groups=None):
    """Sanitize -> all-to-all -> combine. Returns this rank's ``[B, G, Hc, D]`` and ``[B, G, Hc]``.

    One all-to-all of a head-group-first payload that carries the LSE beside the data
    (:mod:`helix_jax.ops.exchange`); ``implementation``: ``None`` (ffi on GPU, jnp on CPU),
    ``"ffi"`` or ``"reference"``; ``transport``: ``None``, ``"collective"`` (``lax.all_to_all``) or
    ``"peer"`` (stores straight into the peers' buffers; needs ``peer_groups``, see
    :func:`helix_jax.ops.exchange.peer_groups`).
    """
    return _packed_exchange(partial_out, lse, zero_kv_mask, axis_name=axis_name, cp_size=cp_size,
                            implementation=implementation, transport=transport, peer_groups=peer_groups)
