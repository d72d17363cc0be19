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
from ..cache import LATENT_DIM, ROPE_DIM, HelixMLACache

__all__ = ["source_rows", "gather_rows", "relayout_cache", "relayout_arrays", "target_layout", "cache_fields",
           "layout_template"]


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
    s = _np_local_len(pos, r_s, page_size=ps, cp_size=cp_s)
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


def _np_local_len(g, r, *, page_size, cp_size):
    # §2.2 closed form on the host (the ledger's jnp version would compile for every shape).
    full, rem = np.divmod(g, page_size * cp_size)
    return full * page_size + np.clip(rem - r * page_size, 0, page_size)


@functools.partial(jax.jit, static_argnames=("page_size", "out_sharding"))
def _gather(pools, rows, *, page_size, out_sharding):
    out = []
    for pool in pools:
        tail = pool.shape[2:]
        flat = pool.reshape((-1,) + tail)
        got = jnp.take(flat, jnp.maximum(rows, 0), axis=0)
        got = jnp.where((rows >= 0).reshape((-1,) + (1,) * len(tail)), got, jnp.zeros((), pool.dtype))
        out.append(jax.lax.with_sharding_constraint(got.reshape((-1, page_size) + tail), out_sharding))
    return out


def gather_rows(pools, rows, *, page_size: int, sharding):
    """Pools ``[M, P_src, ...]`` gathered by :func:`source_rows` into ``[M', page_size, ...]`` on ``sharding``."""
    rows = jax.device_put(np.asarray(rows, np.int32), NamedSharding(sharding.mesh, P()))
    return _gather(list(pools), rows, page_size=page_size, out_sharding=sharding)


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


def cache_fields(cache: HelixMLACache) -> dict:
    """The array fields of a cache by name (``scales`` flattened to ``scales_0``, ``scales_1``, ...)."""
    out = {f: getattr(cache, f) for f in ("c_latent", "k_rope", "page_table", "lens")}
    for i, x in enumerate(getattr(cache, "scales", ())):
        out[f"scales_{i}"] = x
    return out


def cache_statics(cache: HelixMLACache) -> dict:
    return {"axis_name": cache.axis_name, "page_size": cache.page_size,
            "kv_dtype": getattr(cache, "kv_dtype", "bf16")}


def _pool_names(fields):
    return [k for k in fields if k not in ("page_table", "lens")]


def _onto(x, mesh: Mesh, axis_name: str):
    """``x`` on the devices of ``mesh`` (a device-to-device copy when it lives elsewhere)."""
    if isinstance(x, jax.Array) and x.sharding.device_set == set(mesh.devices.flat):
        return x
    spec = P(axis_name) if x.shape[0] % mesh.shape[axis_name] == 0 and mesh.size == mesh.shape[axis_name] else P()
    return jax.device_put(x, NamedSharding(mesh, spec))


def relayout_arrays(fields: dict, *, src_page_size: int, mesh: Mesh, axis_name: str, page_size: int,
                    dst_tables, num_pages: int, kv_dtype: str = "bf16") -> HelixMLACache:
    """Build a :class:`HelixMLACache` on ``mesh`` from the array fields of a source cache.

    ``fields``: as :func:`cache_fields` (``page_table``/``lens`` may be host arrays). Pool leaves of
    rank ``>= 2`` (``[cp_src*N, P_src, ...]``: rows and per-row scale factors) are gathered slot by
    slot; rank-1 leaves (``[cp_src]`` per-tensor scales, one value on every rank) are re-broadcast.
    """
    src_tables = np.asarray(fields["page_table"])
    cp_s = src_tables.shape[0]
    n_rows = fields["c_latent"].shape[0]
    if n_rows % cp_s:
        raise ValueError(f"c_latent rows {n_rows} are not a multiple of the source cp {cp_s}")
    rows = source_rows(src_tables=src_tables, src_page_size=src_page_size, src_num_pages=n_rows // cp_s,
                       dst_tables=dst_tables, dst_page_size=page_size, dst_num_pages=num_pages)
    shard = NamedSharding(mesh, P(axis_name))
    cp_d = int(mesh.shape[axis_name])
    names = _pool_names(fields)
    row_names = [k for k in names if fields[k].ndim >= 2]
    srcs = [_onto(fields[k], mesh, axis_name) for k in row_names]
    out = dict(zip(row_names, gather_rows(srcs, rows, page_size=page_size, sharding=shard)))
    for name in names:
        if name not in out:   # per-tensor scalar, one value per rank: re-broadcast to the new cp
            out[name] = jax.device_put(np.broadcast_to(np.asarray(fields[name])[:1], (cp_d,)), shard)
    extra = {}
    scales = tuple(out[k] for k in sorted((k for k in out if k.startswith("scales_")),
                                          key=lambda k: int(k.split("_")[1])))
    if scales or kv_dtype != "bf16":
        extra = {"kv_dtype": kv_dtype, "scales": scales}
    return HelixMLACache(
        c_latent=out["c_latent"], k_rope=out["k_rope"],
        page_table=jax.device_put(jnp.asarray(np.asarray(dst_tables, np.int32)), shard),
        lens=jax.device_put(jnp.asarray(fields["lens"], jnp.int32), NamedSharding(mesh, P())),
        mesh=mesh, axis_name=axis_name, page_size=page_size, **extra)


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
    return relayout_arrays(cache_fields(cache), src_page_size=cache.page_size, mesh=mesh,
                           axis_name=axis_name, page_size=page_size, dst_tables=tables,
                           num_pages=num_pages, kv_dtype=cache_statics(cache)["kv_dtype"])


def _check_max_len(max_len, lens):
    if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 1:
        raise ValueError(f"max_len must be an int >= 1, got {max_len!r}")
    if lens.size and int(lens.max()) > max_len:
        raise ValueError(f"max_len={max_len} is smaller than the longest committed sequence ({int(lens.max())})")


def layout_template(batch: int, *, mesh: Mesh, page_size: int, max_len: int, axis_name: str = "cp",
                    dtype=jnp.bfloat16, kv_dtype: str = "bf16", num_pages: int | None = None) -> HelixMLACache:
    """A cache that only *describes* a target layout (abstract pools, standard page tables, no KV):
    pass it inside ``state_like`` to :func:`~helix_jax.checkpoint.restore` to choose where the
    checkpoint's KV pages go, without allocating a second cache."""
    tables, n = target_layout(batch, mesh=mesh, axis_name=axis_name, page_size=page_size, max_len=max_len,
                              num_pages=num_pages)
    rows = tables.shape[0] * n
    extra = {} if kv_dtype == "bf16" else {"kv_dtype": kv_dtype}
    return HelixMLACache(c_latent=jax.ShapeDtypeStruct((rows, page_size, LATENT_DIM), dtype),
                         k_rope=jax.ShapeDtypeStruct((rows, page_size, ROPE_DIM), dtype),
                         page_table=tables, lens=np.zeros((batch,), np.int32), mesh=mesh,
                         axis_name=axis_name, page_size=page_size, **extra)
