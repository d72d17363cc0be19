"""Exact LSE merge of attention partials (HELIX_SEMANTICS.md §7), pure jnp."""
from __future__ import annotations

import jax.numpy as jnp


def combine(outs, lses, *, axis: int):
    """Merge partial attention outputs along ``axis``.

    Args:
      outs: ``[..., S, ..., D]`` partial outputs, each normalised by its own partition function.
      lses: ``outs.shape[:-1]`` natural-log LSE of each partial; ``-inf`` marks an empty partial.
      axis: the partial axis (an axis of ``lses``; negative values count from the end of ``lses``).

    Returns:
      ``(out, lse)``: ``out`` has ``axis`` removed and ``outs.dtype`` (fp32 accumulation), ``lse``
      float32. Rows whose partials are all empty give 0 output and ``-inf`` LSE, never NaN.
      Empty partials contribute exactly 0 even if their ``outs`` hold garbage (NaN included).
    """
    outs = jnp.asarray(outs)
    lses = jnp.asarray(lses)
    if outs.shape[:-1] != lses.shape:
        raise ValueError(f"lses must have shape outs.shape[:-1]={outs.shape[:-1]}, got {lses.shape}")
    nd = lses.ndim
    if not -nd <= axis < nd:
        raise ValueError(f"axis {axis} out of range for lses of rank {nd}")
    axis = axis % nd
    lse = lses.astype(jnp.float32)
    m = jnp.max(lse, axis=axis, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)           # all-empty rows: keep exp() finite
    w = jnp.exp(lse - m)                              # exp(-inf) = 0 for empty partials
    total = jnp.sum(w, axis=axis, keepdims=True)
    wn = w / jnp.where(total > 0, total, 1.0)
    contrib = jnp.where(wn[..., None] > 0, wn[..., None] * outs.astype(jnp.float32), 0.0)
    out = jnp.sum(contrib, axis=axis)
    lse_out = jnp.where(total > 0, m + jnp.log(jnp.where(total > 0, total, 1.0)), -jnp.inf)
    return out.astype(outs.dtype), jnp.squeeze(lse_out, axis=axis)
