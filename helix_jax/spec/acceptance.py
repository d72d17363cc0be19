"""Draft acceptance (HELIX_SEMANTICS.md §8 step 6): greedy and standard speculative sampling.

Both return ``(num_accepted [B] int32 in [0, k], tokens [B, G] int32)``: ``tokens[:, :a+1]`` are the
emitted tokens (the ``a`` accepted drafts, then the correction/bonus token), the rest are ``-1``.
All functions are pure and deterministic given their key, so every CP rank computes the same result.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["greedy_accept", "rejection_accept", "sample_probs", "probs_from_logits", "num_accepted"]


def num_accepted(accept):
    """Length of the leading run of ``True`` in ``accept [B, k]`` -> ``[B]`` int32."""
    return jnp.sum(jnp.cumprod(accept.astype(jnp.int32), axis=1), axis=1).astype(jnp.int32)


def _emit(drafts, a, last):
    """``[d_1..d_a, last, -1...]`` as ``[B, k+1]``."""
    b, k = drafts.shape
    j = jnp.arange(k + 1)[None, :]
    padded = jnp.concatenate([drafts, jnp.zeros((b, 1), drafts.dtype)], axis=1)
    out = jnp.where(j < a[:, None], padded, -1)
    return jnp.where(j == a[:, None], last[:, None], out).astype(jnp.int32)


def greedy_accept(target_logits, drafts):
    """Greedy verification. ``target_logits [B, G, V]`` (row j predicts the token after group token j),
    ``drafts [B, k]`` with ``G = k + 1``. Accept the longest prefix with ``d_{j+1} == argmax_j``;
    the last emitted token is ``argmax`` at the first mismatch (or the bonus at ``k``)."""
    b, g, _ = target_logits.shape
    if drafts.shape != (b, g - 1):
        raise ValueError(f"drafts must have shape [B, G-1]={(b, g - 1)}, got {drafts.shape}")
    best = jnp.argmax(target_logits, axis=-1).astype(jnp.int32)              # [B, G]
    a = num_accepted(drafts == best[:, :-1])
    last = jnp.take_along_axis(best, a[:, None], axis=1)[:, 0]
    return a, _emit(drafts.astype(jnp.int32), a, last)


def probs_from_logits(logits, temperature):
    """``softmax(logits / temperature)`` in float32."""
    return jax.nn.softmax(logits.astype(jnp.float32) / temperature, axis=-1)


def sample_probs(key, probs):
    """One categorical sample per row of ``probs [..., V]`` (float32, rows sum to 1) -> int32."""
    return jax.random.categorical(key, jnp.log(probs), axis=-1).astype(jnp.int32)


def rejection_accept(target_probs, draft_probs, drafts, key):
    """Standard speculative sampling over a linear chain.

    Args:
      target_probs: ``p [B, G, V]`` target distributions at the group's positions.
      draft_probs: ``q [B, k, V]``: the drafter's distributions that ``drafts`` were sampled from.
      drafts: ``[B, k]`` int draft tokens, ``G = k + 1``.
      key: PRNG key.

    Draft ``d_{j+1}`` is accepted with probability ``min(1, p_j(d)/q_j(d))`` while all earlier ones
    were; at the first rejection ``j = a`` the token is drawn from ``norm(max(0, p_a - q_a))``; if
    all ``k`` are accepted a bonus is drawn from ``p_k``. The emitted tokens are then distributed
    exactly as sampling from ``p`` autoregressively.
    """
    b, g, v = target_probs.shape
    k = g - 1
    if draft_probs.shape != (b, k, v) or drafts.shape != (b, k):
        raise ValueError(f"draft_probs must be [B, k, V]={(b, k, v)} and drafts [B, k]={(b, k)}, "
                         f"got {draft_probs.shape} and {drafts.shape}")
    drafts = drafts.astype(jnp.int32)
    k_u, k_s = jax.random.split(key)
    p_d = jnp.take_along_axis(target_probs[:, :k], drafts[..., None], axis=-1)[..., 0]   # [B, k]
    q_d = jnp.take_along_axis(draft_probs, drafts[..., None], axis=-1)[..., 0]
    u = jax.random.uniform(k_u, (b, k), jnp.float32)
    accept = u * q_d < p_d                      # u < p/q without dividing (q_d > 0 for sampled d)
    a = num_accepted(accept)
    p_a = jnp.take_along_axis(target_probs, a[:, None, None], axis=1)[:, 0]              # [B, V]
    q_pad = jnp.concatenate([draft_probs, jnp.zeros((b, 1, v), draft_probs.dtype)], axis=1)
    q_a = jnp.take_along_axis(q_pad, a[:, None, None], axis=1)[:, 0]                     # 0 at a == k
    resid = jnp.maximum(p_a - q_a, 0.0)
    z = jnp.sum(resid, axis=-1, keepdims=True)
    # z == 0 only when p_a == q_a (rounding); then p_a itself is the right distribution.
    resid = jnp.where(z > 0, resid / jnp.where(z > 0, z, 1.0), p_a)
    last = sample_probs(k_s, resid)
    return a, _emit(drafts, a, last)
