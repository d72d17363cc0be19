"""Bind a :class:`HelixPagePool` to a :class:`helix_jax.HelixMLACache` (continuous batching).

The cache's shapes are static (``[cp*N, P, D]`` pools, ``[cp, B, pages_per_seq]`` tables), so one
compiled step serves every batch composition: between steps only the page table and the
committed lengths change. Empty batch rows point at the null page.
"""
from __future__ import annotations

import functools
from typing import Hashable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from .. import ledger
from ..cache import LATENT_DIM, ROPE_DIM, HelixMLACache, append_kv
from .pool import HelixPagePool
from .quota import check_int

__all__ = ["device_page_table", "make_cache", "refresh_cache", "refresh_caches", "write_prompt", "write_prompts",
           "prompt_rows"]


def _check_pool_mesh(pool: HelixPagePool, mesh: Mesh, axis_name: str):
    if not isinstance(pool, HelixPagePool):
        raise ValueError(f"pool must be a HelixPagePool, got {type(pool).__name__}")
    if not isinstance(mesh, Mesh) or axis_name not in mesh.shape:
        raise ValueError(f"mesh must be a jax.sharding.Mesh with a {axis_name!r} axis, got {mesh!r}")
    if int(mesh.shape[axis_name]) != pool.cp_size:
        raise ValueError(f"pool.cp_size={pool.cp_size} does not match mesh axis {axis_name!r} of "
                         f"size {int(mesh.shape[axis_name])}")


def device_page_table(pool: HelixPagePool, slots: Sequence[Hashable | None], *, mesh: Mesh,
                      pages_per_seq: int, axis_name: str = "cp") -> jax.Array:
    """``pool.page_table(slots)`` as a device array ``[cp, B, pages_per_seq]`` sharded over ``axis_name``."""
    _check_pool_mesh(pool, mesh, axis_name)
    table = pool.page_table(slots, pages_per_seq=pages_per_seq)
    return jax.device_put(table, NamedSharding(mesh, P(axis_name)))


def make_cache(pool: HelixPagePool, *, batch: int, mesh: Mesh, max_len: int, dtype=jnp.bfloat16,
               axis_name: str = "cp", kv_dtype: str = "bf16", kv_scale=None,
               fill: float | None = None) -> HelixMLACache:
    """An empty :class:`HelixMLACache` whose rank pools are ``pool``'s pages (all rows empty).

    ``max_len``: global tokens a batch row can hold; sets ``pages_per_seq = ceil(max_len/(P*C))``.
    The pools hold ``pool.num_pages`` pages per rank, which may be far fewer than
    ``batch * pages_per_seq`` (that is what paging buys). ``kv_dtype``/``kv_scale``: KV format as in
    :meth:`HelixMLACache.empty`. ``fill``: initial value of every entry (bf16 format only; tests
    poison with NaN).
    """
    _check_pool_mesh(pool, mesh, axis_name)
    batch = check_int("batch", batch)
    max_len = check_int("max_len", max_len)
    npp = ledger.pages_per_rank(max_len, page_size=pool.page_size, cp_size=pool.cp_size)
    # A one-row, one-page cache gives pools of the right size and format; the tables are ours.
    base = HelixMLACache.empty(1, mesh=mesh, page_size=pool.page_size, max_len=1, dtype=dtype,
                               axis_name=axis_name, num_pages=pool.num_pages, kv_dtype=kv_dtype,
                               kv_scale=kv_scale)
    kw = {}
    if fill is not None:
        if kv_dtype != "bf16":
            raise ValueError(f"fill applies only to kv_dtype='bf16', got {kv_dtype!r}")
        shard = NamedSharding(mesh, P(axis_name))
        kw["c_latent"] = jax.device_put(jnp.full(base.c_latent.shape, fill, base.c_latent.dtype), shard)
        kw["k_rope"] = jax.device_put(jnp.full(base.k_rope.shape, fill, base.k_rope.dtype), shard)
    table = device_page_table(pool, [None] * batch, mesh=mesh, pages_per_seq=npp, axis_name=axis_name)
    lens = jax.device_put(jnp.zeros((batch,), jnp.int32), NamedSharding(mesh, P()))
    return base.replace(page_table=table, lens=lens, **kw)


def refresh_cache(cache: HelixMLACache, pool: HelixPagePool, slots: Sequence[Hashable | None],
                  lens=None) -> HelixMLACache:
    """The cache with the page table of batch ``slots`` (and committed ``lens [B]``, if given).

    Call between steps after requests joined/left and after ``pool.ensure_step``/``grow``.
    """
    if not isinstance(cache, HelixMLACache):
        raise ValueError(f"cache must be a HelixMLACache, got {type(cache).__name__}")
    if (pool.num_pages, pool.page_size) != (cache.num_pages, cache.page_size):
        raise ValueError(f"pool (num_pages={pool.num_pages}, page_size={pool.page_size}) does not "
                         f"match the cache (num_pages={cache.num_pages}, page_size={cache.page_size})")
    slots = list(slots)
    if len(slots) != cache.batch:
        raise ValueError(f"slots must have one entry per batch row (B={cache.batch}), got {len(slots)}")
    table = device_page_table(pool, slots, mesh=cache.mesh, pages_per_seq=cache.pages_per_seq,
                              axis_name=cache.axis_name)
    kw = {"page_table": table}
    if lens is not None:
        lens = np.asarray(lens)
        if lens.shape != (cache.batch,) or not np.issubdtype(lens.dtype, np.integer):
            raise ValueError(f"lens must be an int array of shape [B]=({cache.batch},), got {lens.shape} {lens.dtype}")
        kw["lens"] = jax.device_put(lens.astype(np.int32), NamedSharding(cache.mesh, P()))
    return cache.replace(**kw)


def prompt_rows(pool: HelixPagePool, req_id: Hashable, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Where global positions ``[0, length)`` of ``req_id`` live in the stacked pools.

    Returns ``(row [length], offset [length])`` int32: position ``p`` is stored at
    ``c_latent[row[p], offset[p]]`` with ``row = owner*N + page`` (§2.3).
    """
    length = check_int("length", length, 0)
    if length > pool.capacity_of(req_id):
        raise ValueError(f"length={length} exceeds request {req_id!r}'s {pool.capacity_of(req_id)} "
                         "allocated global tokens; grow it first")
    pages = pool.pages(req_id)                                          # [cp, n]
    pos = np.arange(length)
    r = (pos // pool.page_size) % pool.cp_size
    slot = np.asarray(ledger.local_len(pos, r, page_size=pool.page_size, cp_size=pool.cp_size))
    page = pages[r, slot // pool.page_size]
    return (r * pool.num_pages + page).astype(np.int32), (slot % pool.page_size).astype(np.int32)


@functools.partial(jax.jit, static_argnames=("mesh", "axis_name", "page_size"))
def _write(pages, table, c_new, k_new, length, *, mesh, axis_name, page_size):
    cp = int(mesh.shape[axis_name])
    a = axis_name

    def body(pages, table, c_new, k_new, length):
        rank = jax.lax.axis_index(a)
        pos = jnp.arange(c_new.shape[0], dtype=jnp.int32)
        slots = ledger.local_slots(pos, rank, page_size=page_size, cp_size=cp)
        slots = jnp.where(pos < length, slots, -1)                    # bucket padding: skipped
        return append_kv(pages, table[0], slots[None], c_new[None], k_new[None])

    spec = jax.tree_util.tree_map(lambda _: P(a), pages)
    return jax.shard_map(body, mesh=mesh, in_specs=(spec, P(a), P(), P(), P()), out_specs=spec,
                         check_vma=False)(pages, table, c_new, k_new, length)


def write_prompt(cache: HelixMLACache, pool: HelixPagePool, req_id: Hashable, c_latent, k_rope,
                 *, bucket: int | None = None) -> HelixMLACache:
    """Prefill hand-off for one admitted request: write its prompt KV into its pool pages.

    Args:
      c_latent: ``[L, 512]``, k_rope: ``[L, 64]`` (RoPE'd at global positions ``0..L-1``).
      bucket: pad ``L`` up to a multiple of this (default ``P*C``) so few shapes get compiled;
        padding rows are skipped.
    Each rank writes the positions it owns at their local slots with the cache's own
    :func:`helix_jax.cache.append_kv` (so every KV format is quantized the same way as in decode).
    The request must already hold ``>= L`` tokens. Call once per layer with that layer's cache/KV.
    """
    if not isinstance(cache, HelixMLACache):
        raise ValueError(f"cache must be a HelixMLACache, got {type(cache).__name__}")
    c_latent, k_rope = jnp.asarray(c_latent), jnp.asarray(k_rope)
    if c_latent.ndim != 2 or c_latent.shape[1] != LATENT_DIM:
        raise ValueError(f"c_latent must have shape [L, {LATENT_DIM}], got {c_latent.shape}")
    length = c_latent.shape[0]
    if k_rope.shape != (length, ROPE_DIM):
        raise ValueError(f"k_rope must have shape [L, {ROPE_DIM}] = {(length, ROPE_DIM)}, got {k_rope.shape}")
    if (pool.num_pages, pool.page_size, pool.cp_size) != (cache.num_pages, cache.page_size, cache.cp_size):
        raise ValueError("pool does not match the cache (num_pages / page_size / cp)")
    if length > pool.capacity_of(req_id):
        raise ValueError(f"length={length} exceeds request {req_id!r}'s {pool.capacity_of(req_id)} "
                         "allocated global tokens; grow it first")
    bucket = pool.superblock_tokens if bucket is None else check_int("bucket", bucket)
    pad = -(-max(length, 1) // bucket) * bucket - length
    table = pool.pages(req_id)[:, None, :]                            # [cp, 1, n]
    table = jax.device_put(table, NamedSharding(cache.mesh, P(cache.axis_name)))
    pages = _write(cache.pages, table, jnp.pad(c_latent, ((0, pad), (0, 0))),
                   jnp.pad(k_rope, ((0, pad), (0, 0))), jnp.int32(length), mesh=cache.mesh,
                   axis_name=cache.axis_name, page_size=cache.page_size)
    return cache.with_pages(pages)


def refresh_caches(caches: Sequence[HelixMLACache], pool: HelixPagePool, slots: Sequence[Hashable | None],
                   lens=None) -> tuple:
    """:func:`refresh_cache` for every layer's cache at once: one page id addresses the same page
    in every layer's pool, so all layers share one table (built and transferred once)."""
    caches = tuple(caches)
    if not caches:
        raise ValueError("caches must hold at least one HelixMLACache")
    first = refresh_cache(caches[0], pool, slots, lens)
    for c in caches[1:]:
        if (c.mesh, c.axis_name, c.batch, c.pages_per_seq, c.num_pages) != (
                first.mesh, first.axis_name, first.batch, first.pages_per_seq, first.num_pages):
            raise ValueError("caches: every layer's cache must share mesh, batch, pages_per_seq and num_pages")
    return (first,) + tuple(c.replace(page_table=first.page_table, lens=first.lens) for c in caches[1:])


def write_prompts(caches: Sequence[HelixMLACache], pool: HelixPagePool, req_id: Hashable, layer_kvs) -> tuple:
    """:func:`write_prompt` per layer: ``layer_kvs[i] = (c_latent [L, 512], k_rope [L, 64])``."""
    caches = tuple(caches)
    layer_kvs = list(layer_kvs)
    if len(layer_kvs) != len(caches):
        raise ValueError(f"layer_kvs must hold one (c_latent, k_rope) pair per cache ({len(caches)}), "
                         f"got {len(layer_kvs)}")
    return tuple(write_prompt(c, pool, req_id, lat, rope) for c, (lat, rope) in zip(caches, layer_kvs))
