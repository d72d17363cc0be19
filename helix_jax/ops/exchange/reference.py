"""Pure-jnp Helix exchange payload: sanitize + pack, and combine of the received payload.

Payload layout (bit-identical to the FFI handlers, ``ffi/src/exchange_common.h``):

  payload ``[cp, T, Hc, W]`` in the unsigned-int container of the activation's width
  (uint16 for bf16/f16, uint32 for f32), ``W = D + 16 // itemsize``;
  ``payload[g, t, hh, :D]`` = bits of the partial output of token t, head ``g*Hc + hh``;
  ``payload[g, t, hh, D:]`` = that row's float32 LSE bits followed by zeros.

The head group is the leading axis, so ``lax.all_to_all(payload, axis, 0, 0, tiled=True)`` sends
group g to rank g with no transpose, and the LSE travels in the same collective as the data. An
integer container keeps the LSE bits away from any float pass (bf16 normalisation, NaN quieting).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..combine import reference as combine_ref

_CONTAINERS = {2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}


def container_dtype(dtype):
    """The unsigned-int payload dtype for activation ``dtype``."""
    return jnp.dtype(_CONTAINERS[jnp.dtype(dtype).itemsize])


def pad_elems(dtype) -> int:
    """Extra payload columns per row (16 bytes: room for the LSE, rows stay 16-byte aligned)."""
    return 16 // jnp.dtype(dtype).itemsize


def _lse_bits(lse, dtype):
    """float32 LSE ``[T, H]`` -> container columns ``[T, H, k]`` (k = 4 bytes / itemsize, at least 1)."""
    size = jnp.dtype(dtype).itemsize
    if size == 2:
        return jax.lax.bitcast_convert_type(lse, jnp.uint16)          # [T, H, 2], little-endian halves
    if size == 4:
        return jax.lax.bitcast_convert_type(lse, jnp.uint32)[..., None]
    return jax.lax.bitcast_convert_type(lse.astype(jnp.float64), jnp.uint64)[..., None]


def _lse_from_bits(cols, dtype):
    """Inverse of :func:`_lse_bits` on the payload's pad columns ``[..., pad]`` -> float32 ``[...]``."""
    size = jnp.dtype(dtype).itemsize
    if size == 2:
        return jax.lax.bitcast_convert_type(cols[..., :2], jnp.float32)
    if size == 4:
        return jax.lax.bitcast_convert_type(cols[..., 0], jnp.float32)
    return jax.lax.bitcast_convert_type(cols[..., 0], jnp.float64).astype(jnp.float32)


def sanitize_pack(partial_out, lse, zero_kv_mask, *, cp_size: int):
    """Zero-KV sanitize fused with packing into the all-to-all payload.

    partial_out ``[T, H, D]``, lse ``[T, H]`` float32, zero_kv_mask ``[T]`` bool (True: the token
    has no local KV; its rows become ``(0, -inf)`` whatever they held, NaN included).
    Returns payload ``[cp, T, H // cp, D + pad]`` (container dtype).
    """
    t, h, d = partial_out.shape
    cont = container_dtype(partial_out.dtype)
    m = jnp.asarray(zero_kv_mask, bool)[:, None]
    ob = jax.lax.bitcast_convert_type(partial_out, cont)
    ob = jnp.where(m[..., None], jnp.zeros((), cont), ob)
    lb = _lse_bits(jnp.where(m, -jnp.inf, lse.astype(jnp.float32)), partial_out.dtype)
    fill = jnp.zeros((t, h, pad_elems(partial_out.dtype) - lb.shape[-1]), cont)
    rows = jnp.concatenate([ob, lb, fill], axis=-1)
    return rows.reshape(t, cp_size, h // cp_size, rows.shape[-1]).transpose(1, 0, 2, 3)


def unpack(payload, *, dtype):
    """payload ``[cp, T, Hc, W]`` -> (partials ``[cp, T, Hc, D]`` in ``dtype``, lse ``[cp, T, Hc]`` f32)."""
    d = payload.shape[-1] - pad_elems(dtype)
    return (jax.lax.bitcast_convert_type(payload[..., :d], jnp.dtype(dtype)),
            _lse_from_bits(payload[..., d:], dtype))


def combine(payload, *, dtype):
    """LSE combine of the received payload ``[cp(src), T, Hc, W]``.

    Returns ``(out [T, Hc, D] in dtype, lse [T, Hc] float32)``; fp32 accumulation; empty partials
    contribute exactly 0; all-empty rows give 0 and ``-inf``.
    """
    o, lse = unpack(payload, dtype=dtype)
    return combine_ref.combine(o, lse, axis=0)
