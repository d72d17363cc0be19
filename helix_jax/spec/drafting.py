"""DSpark-style linear-chain drafting on the CP-free mapping (HELIX_SEMANTICS.md §8 step 8, §9.2, R15).

The drafter is a small :class:`~helix_jax.models.MLADecoder` with its own KV cache that holds *every*
global position of a sequence and is replicated on every CP rank (never ledger-sharded): inside the
Helix ``shard_map`` each rank runs the same drafter computation on the same data and proposes the
same chain. The cache is one page per sequence (``page_size = capacity``), so the same
``append_kv`` and bounded ``mla_decode`` serve it with slot = global position and
bound = position + 1.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..cache import LATENT_DIM, ROPE_DIM, MLAPages, append_kv
from ..ops.mla_decode import mla_decode
from .acceptance import probs_from_logits, sample_probs

__all__ = ["DraftCache", "draft_cache_from_prefill", "draft_forward", "propose_chain"]


class DraftCache(NamedTuple):
    """CP-free drafter KV: per drafter layer ``MLAPages(c_latent [B, cap, 512], k_rope [B, cap, 64])``
    (page ``b`` of the pool is sequence ``b``; slot = global position)."""
    layers: tuple

    @property
    def capacity(self) -> int:
        return int(self.layers[0].c_latent.shape[1])


def draft_cache_from_prefill(kvs, lens, *, capacity: int) -> DraftCache:
    """Build the drafter cache from its plain causal prefill KV ``[(c [B, L, 512], k [B, L, 64])]``;
    positions ``>= lens`` are zero."""
    pages = []
    for c, k in kvs:
        b, length = c.shape[:2]
        if length > capacity:
            raise ValueError(f"prompt length {length} exceeds the draft cache capacity {capacity}")
        ok = (jnp.arange(length)[None, :] < lens[:, None])[..., None]
        cz = jnp.zeros((b, capacity, LATENT_DIM), c.dtype).at[:, :length].set(jnp.where(ok, c, 0))
        kz = jnp.zeros((b, capacity, ROPE_DIM), k.dtype).at[:, :length].set(jnp.where(ok, k, 0))
        pages.append(MLAPages(cz, kz))
    return DraftCache(tuple(pages))


def draft_forward(drafter, cache: DraftCache, tokens, positions, *, implementation=None):
    """Drafter forward of ``tokens [B, T]`` at consecutive global ``positions [B, T]``, appending their
    KV to ``cache``. Returns ``(logits [B, T, V], cache)``."""
    b = tokens.shape[0]
    table = jnp.arange(b, dtype=jnp.int32)[:, None]
    bounds = positions + 1
    scale = drafter.cfg.softmax_scale

    def attend(i, attn, h, pos):
        q_nope, q_rope = attn.queries(h, pos)
        c_new, k_new = attn.latents(h, pos)
        pages = append_kv(cache.layers[i], table, pos, c_new, k_new)
        o, _ = mla_decode(attn.absorb_query(q_nope), q_rope, pages, table, kv_bounds=bounds,
                          softmax_scale=scale, implementation=implementation)
        return attn.project_out(o), pages

    logits, pages = drafter.forward_with(tokens, positions, attend)
    return logits, DraftCache(tuple(pages))


def _pick(logits, key, *, sampling, temperature):
    """Draft token and the distribution it came from: ``logits [B, V]`` -> ``([B], [B, V])``."""
    if sampling == "greedy":
        tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return tok, jax.nn.one_hot(tok, logits.shape[-1], dtype=jnp.float32)
    q = probs_from_logits(logits, temperature)
    return sample_probs(key, q), q


def propose_chain(drafter, cache: DraftCache, prev_token, last_token, lens, key, *, draft_len: int,
                  sampling: str, temperature: float, implementation=None):
    """Propose a linear chain of ``draft_len`` tokens after the committed prefix.

    ``lens [B]`` is the committed length ``p0``; ``prev_token [B]`` is the token at ``p0 - 1`` and
    ``last_token [B]`` the not-yet-cached ``t0`` at ``p0``. The first drafter call covers both
    positions: it rewrites ``p0 - 1`` (the last accepted draft, whose drafter KV is missing when
    every draft was accepted, and otherwise identical to what is there) and adds ``p0``. Each further
    draft feeds the previous one (positions ``p0+1 .. p0+k-1``).

    Returns ``(drafts [B, k] int32, draft_probs [B, k, V] float32, cache)``.
    """
    keys = jax.random.split(key, draft_len)
    toks = jnp.stack([prev_token, last_token], axis=1).astype(jnp.int32)
    pos = jnp.stack([lens - 1, lens], axis=1).astype(jnp.int32)
    logits, cache = draft_forward(drafter, cache, toks, pos, implementation=implementation)
    d, q = _pick(logits[:, -1], keys[0], sampling=sampling, temperature=temperature)
    if draft_len == 1:
        return d[:, None], q[:, None], cache

    def body(carry, k):
        tok, p, cache = carry
        lg, cache = draft_forward(drafter, cache, tok[:, None], p[:, None], implementation=implementation)
        nd, nq = _pick(lg[:, 0], k, sampling=sampling, temperature=temperature)
        return (nd, p + 1, cache), (nd, nq)

    (_, _, cache), (ds, qs) = jax.lax.scan(body, (d, lens + 1, cache), keys[1:])
    drafts = jnp.concatenate([d[:, None], ds.T], axis=1)
    probs = jnp.concatenate([q[:, None], jnp.moveaxis(qs, 0, 1)], axis=1)
    return drafts, probs, cache
