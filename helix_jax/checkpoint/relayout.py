"""Elastic re-layout of a paged Helix MLA cache onto another CP size / page size (HELIX_SEMANTICS.md §2).

The logical content of a cache is, per sequence, the global KV row of every position. A layout
(cp, P, page tables) decides where each global position lives: rank ``(p // P) % cp``, local index
``L_r(p)``, pool row ``r*N + table[r, b, L_r(p) // P]``, offset ``L_r(p) % P``. Re-layout is one
device-side gather whose indices come from the two (small, host-side) page tables; the KV itself is
never brought to the host.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from .. import ledger
from ..cache import HelixMLACache

__all__ = ["source_rows", "gather_rows", "relayout_cache", "target_layout"]


def source_rows(*, src_tables, src_page_size: int, src_num_pages: int, dst_tables,
                dst_page_size: int, dst_num_pages: int) -> np.ndarray:
    """For each destination pool slot, the flat source slot holding the same (sequence, position).

    Args:
      src_tables: ``[cp_src, B, npp_src]`` int page tables of the source layout.
      dst_tables: ``[cp_dst, B, npp_dst]`` int page tables of the destination layout.
    Returns:
      ``[cp_dst * dst_num_pages * dst_page_size]`` int32: index into the source pool flattened to
      ``[cp_src * src_num_pages * src_page_size, D]``, or ``-1`` where the destination slot is unused
      (spare page) or holds a position beyond the source capacity (filled with zeros).
    """
    src_tables = np.asarray(src_tables, np.int64)
    dst_tables = np.asarray(dst_tables, np.int64)
    cp_s, b, npp_s = src_tables.shape
    cp_d, b_d, npp_d = dst_tables.shape
    if b_d != b:
        raise ValueError(f"dst_tables batch {b_d} must equal src_tables batch {b}")
    ps, pd = src_page_size, dst_page_size
    out = np.full((cp_d, dst_num_pages, pd), -1, np.int64)
    r_d = np.arange(cp_d)[:, None, None]
    j_d = np.arange(npp_d)[None, None, :]
    # Destination slot (r_d, table page, o) holds global position ((j*cp_d + r_d)*pd + o).
    o = np.arange(pd)
    pos = ((j_d * cp_d + r_d) * pd)[..., None] + o                     # [cp_d, 1, npp_d, pd]
    pos = np.broadcast_to(pos, (cp_d, b, npp_d, pd))
    r_s = (pos // ps) % cp_s
    s = np.asarray(ledger.local_len(pos, r_s, page_size=ps, cp_size=cp_s)).astype(np.int64)
    valid = pos < npp_s * ps * cp_s                                     # beyond source capacity
    j_s = np.where(valid, s // ps, 0)
    bb = np.broadcast_to(np.arange(b)[None, :, None, None], pos.shape)
    page_s = src_tables[r_s, bb, j_s]
    flat = np.where(valid, ((r_s * src_num_pages + page_s) * ps) + s % ps, -1)
    rr = np.broadcast_to(r_d[..., None], pos.shape)
    pg = np.broadcast_to(dst_tables[..., None], pos.shape)
    oo = np.broadcast_to(o, pos.shape)
    out[rr, pg, oo] = flat
    return out.reshape(-1).astype(np.int32)


@functools.partial(jax.jit, static_argnames=("page_size", "out_sharding"))
def _gather(pool, rows, *, page_size, out_sharding):
    d = pool.shape[-1]
    flat = pool.reshape(-1, d)
    got = jnp.take(flat, jnp.maximum(rows, 0), axis=0)
    got = jnp.where((rows >= 0)[:, None], got, jnp.zeros((), pool.dtype))
    got = got.reshape(-1, page_size, d)
    return jax.lax.with_sharding_constraint(got, out_sharding)


def gather_rows(pool, rows, *, page_size: int, sharding):
    """``pool [M, P_src, D]`` gathered by :func:`source_rows` into ``[M', page_size, D]`` on ``sharding``."""
    rows = jax.device_put(jnp.asarray(rows, jnp.int32), NamedSharding(sharding.mesh, P()))
    return _gather(pool, rows, page_size=page_size, out_sharding=sharding)


def target_layout(batch: int, *, mesh: Mesh, axis_name: str, page_size: int, max_len: int,
                  num_pages: int | None = None):
    """Standard page tables ``[cp, B, npp]`` and pool size of a fresh layout (as ``from_global``)."""
    if axis_name not in mesh.shape:
        raise ValueError(f"axis_name {axis_name!r} is not an axis of the mesh {dict(mesh.shape)}")
    cp = int(mesh.shape[axis_name])
    npp = ledger.pages_per_rank(max_len, page_size=page_size, cp_size=cp)
    need = batch * npp
    num_pages = need if num_pages is None else int(num_pages)
    if num_pages < need:
        raise ValueError(f"num_pages={num_pages} per rank cannot hold {batch} sequences x {npp} pages = {need}")
    tables = np.broadcast_to(np.arange(need, dtype=np.int32).reshape(batch, npp), (cp, batch, npp))
    return np.ascontiguousarray(tables), num_pages


def relayout_arrays(c_latent, k_rope, src_tables, lens, *, src_page_size: int, mesh: Mesh,
                    axis_name: str, page_size: int, dst_tables, num_pages: int) -> HelixMLACache:
    """Build a :class:`HelixMLACache` on ``mesh`` from source pools ``[cp_src*N, P_src, D]``."""
    src_tables = np.asarray(src_tables)
    cp_s = src_tables.shape[0]
    if c_latent.shape[0] % cp_s:
        raise ValueError(f"c_latent rows {c_latent.shape[0]} are not a multiple of the source cp {cp_s}")
    rows = source_rows(src_tables=src_tables, src_page_size=src_page_size,
                       src_num_pages=c_latent.shape[0] // cp_s, dst_tables=dst_tables,
                       dst_page_size=page_size, dst_num_pages=num_pages)
    shard = NamedSharding(mesh, P(axis_name))
    lat = gather_rows(c_latent, rows, page_size=page_size, sharding=shard)
    rope = gather_rows(k_rope, rows, page_size=page_size, sharding=shard)
    return HelixMLACache(
        c_latent=lat, k_rope=rope,
        page_table=jax.device_put(jnp.asarray(np.asarray(dst_tables, np.int32)), shard),
        lens=jax.device_put(jnp.asarray(lens, jnp.int32), NamedSharding(mesh, P())),
        mesh=mesh, axis_name=axis_name, page_size=page_size)


def relayout_cache(cache: HelixMLACache, *, mesh: Mesh, page_size: int | None = None,
                   max_len: int | None = None, num_pages: int | None = None,
                   axis_name: str | None = None) -> HelixMLACache:
    """The same logical KV as ``cache``, laid out for ``mesh`` (any cp) and ``page_size``.

    ``max_len`` (default: the source capacity) must cover every committed length; positions beyond
    the new capacity are dropped. Device-side gather; page tables become the standard layout.
    """
    if not isinstance(cache, HelixMLACache):
        raise ValueError(f"cache must be a HelixMLACache, got {type(cache).__name__}")
    axis_name = cache.axis_name if axis_name is None else axis_name
    page_size = cache.page_size if page_size is None else page_size
    max_len = cache.capacity if max_len is None else max_len
    _check_max_len(max_len, np.asarray(cache.lens))
    tables, num_pages = target_layout(cache.batch, mesh=mesh, axis_name=axis_name, page_size=page_size,
                                      max_len=max_len, num_pages=num_pages)
    return relayout_arrays(cache.c_latent, cache.k_rope, np.asarray(cache.page_table), cache.lens,
                           src_page_size=cache.page_size, mesh=mesh, axis_name=axis_name,
                           page_size=page_size, dst_tables=tables, num_pages=num_pages)


def _check_max_len(max_len, lens):
    if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 1:
        raise ValueError(f"max_len must be an int >= 1, got {max_len!r}")
    if lens.size and int(lens.max()) > max_len:
        raise ValueError(f"max_len={max_len} is smaller than the longest committed sequence ({int(lens.max())})")
