"""Rank-local paged MLA KV cache for Helix CP (HELIX_SEMANTICS.md §2.3, §4, §10.1).

Each CP rank keeps a pool of pages ``c_latent [N, P, 512]`` / ``k_rope [N, P, 64]`` and, per
sequence, a table of its *local* pages. Rank ``r``'s local page ``k`` of a sequence holds the global
positions ``[(k*cp + r)*P, (k*cp + r + 1)*P)``, so rank-local index ``s`` = ``L_r(pos)`` lives at
``pool[page_table[b, s // P], s % P]``.

Globally the pools are stacked along axis 0 (``[cp*N, P, D]``) and the tables along a leading rank
axis (``[cp, B, pages_per_seq]``), both sharded over the ``cp`` mesh axis, so that inside
``shard_map`` each rank sees exactly its own ``[N, P, D]`` pool and ``[1, B, pages_per_seq]`` table.

KV formats (§10, ``kv_dtype``): ``"bf16"`` stores the rows unquantized in the given float dtype
(:class:`MLAPages`); ``"fp8_e4m3"`` (:class:`FP8Pages`) and ``"nvfp4"`` (:class:`NVFP4Pages`) store
quantized rows plus their scales (see :mod:`helix_jax.quant`). Per-row data (values, NVFP4 block
scales) is paged like the pools; per-tensor scalars are stored once per rank (``[cp]`` globally,
``[1]`` inside ``shard_map``) with the same value on every rank.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from . import ledger, quant

__all__ = ["MLAPages", "FP8Pages", "NVFP4Pages", "HelixMLACache", "append_kv", "kv_format",
           "dequantize_pages", "LATENT_DIM", "ROPE_DIM"]

LATENT_DIM = 512
ROPE_DIM = 64


class MLAPages(NamedTuple):
    """One rank's paged MLA KV: ``c_latent [N, P, Dl]`` and RoPE'd ``k_rope [N, P, Dr]``."""
    c_latent: jax.Array
    k_rope: jax.Array


class FP8Pages(NamedTuple):
    """One rank's FP8 E4M3 paged MLA KV (§10.2); rows dequantize as ``x = q / scale``.

    c_latent: ``[N, P, 512]`` float8_e4m3fn; k_rope: ``[N, P, 64]`` float8_e4m3fn (RoPE'd);
    scale: ``[1]`` float32 per-tensor orig->quant scale shared by the whole 576-value row.
    """
    c_latent: jax.Array
    k_rope: jax.Array
    scale: jax.Array


class NVFP4Pages(NamedTuple):
    """One rank's NVFP4 paged MLA KV (§10.3), per-token 16-feature blocks.

    c_latent: ``[N, P, 256]`` uint8 (512 E2M1 codes, two per byte, low nibble first);
    k_rope: ``[N, P, 32]`` uint8 (64 codes); c_latent_sf: ``[N, P, 32]`` float8_e4m3fn block scales
    (block ``i`` covers features ``16i..16i+15``); k_rope_sf: ``[N, P, 4]`` float8_e4m3fn;
    global_scale: ``[1]`` float32 per-tensor orig->quant scale. ``x = e2m1 * sf / global_scale``.
    """
    c_latent: jax.Array
    k_rope: jax.Array
    c_latent_sf: jax.Array
    k_rope_sf: jax.Array
    global_scale: jax.Array


def kv_format(pages) -> str:
    """``"fp8_e4m3"``, ``"nvfp4"`` or ``"bf16"`` (any unquantized float pages) for a pages tuple."""
    if isinstance(pages, FP8Pages):
        return "fp8_e4m3"
    if isinstance(pages, NVFP4Pages):
        return "nvfp4"
    return "bf16"


def dequantize_pages(pages, dtype=jnp.float32):
    """``(c_latent [..., 512], k_rope [..., 64])`` in ``dtype`` from any pages tuple.

    Works on pools ``[N, P, .]`` and on gathered rows ``[B, L, .]`` alike (scales are per tensor or
    per row).
    """
    fmt = kv_format(pages)
    if fmt == "fp8_e4m3":
        return (quant.dequantize_fp8(pages.c_latent, pages.scale, dtype),
                quant.dequantize_fp8(pages.k_rope, pages.scale, dtype))
    if fmt == "nvfp4":
        return (quant.dequantize_nvfp4(pages.c_latent, pages.c_latent_sf, pages.global_scale, dtype),
                quant.dequantize_nvfp4(pages.k_rope, pages.k_rope_sf, pages.global_scale, dtype))
    return pages[0].astype(dtype), pages[1].astype(dtype)


def _quantize_rows(pages, c_latent_new, k_rope_new) -> dict:
    """The per-row fields of ``pages``' format for new rows ``[..., 512]`` / ``[..., 64]``."""
    fmt = kv_format(pages)
    if fmt == "fp8_e4m3":
        return dict(c_latent=quant.quantize_fp8(c_latent_new, pages.scale),
                    k_rope=quant.quantize_fp8(k_rope_new, pages.scale))
    if fmt == "nvfp4":
        c, csf = quant.quantize_nvfp4(c_latent_new, pages.global_scale)
        k, ksf = quant.quantize_nvfp4(k_rope_new, pages.global_scale)
        return dict(c_latent=c, k_rope=k, c_latent_sf=csf, k_rope_sf=ksf)
    return dict(c_latent=c_latent_new.astype(pages.c_latent.dtype),
                k_rope=k_rope_new.astype(pages.k_rope.dtype))


def _cuda_backend() -> bool:
    """The default backend is an NVIDIA GPU (the Pallas append kernel's PTX does not build for ROCm)."""
    if jax.default_backend() != "gpu":
        return False
    try:
        from jax.extend import backend
        return "rocm" not in backend.get_backend().platform_version.lower()
    except Exception:  # pragma: no cover - unknown runtime: keep the portable jnp path
        return False


def append_kv(pages, page_table, local_slots, c_latent_new, k_rope_new, *, implementation=None):
    """Write new KV rows at rank-local slots (§4 step 3); slot -1 means "not mine", skipped.

    Quantized pages (:class:`FP8Pages`, :class:`NVFP4Pages`) quantize each new row with the pages'
    existing per-tensor scale; every quantized field of a row (values, NVFP4 block scales) depends
    on that row only, so an append never touches another token's data (no partial-tile rewrite).

    Args:
      pages: this rank's pool, ``[N, P, Dl]`` / ``[N, P, Dr]`` (+ scales for quantized formats).
      page_table: ``[B, pages_per_seq]`` local page ids.
      local_slots: ``[B, G]`` rank-local indices (``-1`` = skip).
      c_latent_new: ``[B, G, Dl]``; k_rope_new: ``[B, G, Dr]`` (already RoPE'd at global positions).
      implementation: ``"xla"`` (jnp quantize + scatter), ``"pallas"`` (the bit-identical kernel of
        :mod:`helix_jax.ops.append`; interpret mode on CPU) or ``None``: ``"pallas"`` on a CUDA GPU backend
        (measured 3.9-8.7x faster on the H200, benchmarks/results/append_2026-11-30.md), ``"xla"`` elsewhere.
    Returns the pages tuple of the same type.
    """
    if implementation is None:
        implementation = "pallas" if _cuda_backend() else "xla"
    if implementation == "pallas":
        from .ops.append import append_rows
        return append_rows(pages, page_table, local_slots, c_latent_new, k_rope_new)
    if implementation not in (None, "xla"):
        raise ValueError(f"implementation must be None, 'xla' or 'pallas', got {implementation!r}")
    n, p = pages.c_latent.shape[:2]
    npp = page_table.shape[1]
    slots = jnp.asarray(local_slots, jnp.int32)
    page_idx = jnp.clip(slots // p, 0, npp - 1)
    page = jnp.take_along_axis(page_table, page_idx, axis=1)
    ok = (slots >= 0) & (slots < npp * p) & (page >= 0)  # a negative page id would wrap in .at[]
    page = jnp.where(ok, page, n)  # out of range -> dropped by the scatter
    off = jnp.where(ok, slots % p, 0)
    rows = _quantize_rows(pages, c_latent_new, k_rope_new)
    return pages._replace(**{name: getattr(pages, name).at[page, off].set(v, mode="drop")
                             for name, v in rows.items()})


def _check_int(name, v, lo=1):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class HelixMLACache:
    """Per-rank paged MLA cache sharded over a ``cp`` mesh axis (a pytree).

    Fields (global view):
      c_latent: ``[cp*N, P, 512]`` latent rows, rank r's pool = rows ``[r*N, (r+1)*N)``.
      k_rope:   ``[cp*N, P, 64]`` RoPE'd key rows.
      page_table: ``[cp, B, pages_per_seq]`` int32 local page ids per rank.
      lens: ``[B]`` int32 committed global length per sequence (replicated).
      scales: per-format extra leaves, all sharded over cp: ``()`` for ``"bf16"``;
        ``(scale [cp],)`` for ``"fp8_e4m3"``; ``(c_latent_sf [cp*N, P, 32], k_rope_sf [cp*N, P, 4],
        global_scale [cp])`` for ``"nvfp4"`` (per-tensor scalars hold one value on every rank).
        For quantized formats ``c_latent``/``k_rope`` hold the stored codes (see :attr:`pages`).
    Static: ``mesh``, ``axis_name``, ``page_size``, ``kv_dtype``.
    """
    c_latent: jax.Array
    k_rope: jax.Array
    page_table: jax.Array
    lens: jax.Array
    mesh: Mesh = dataclasses.field(metadata=dict(static=True))
    axis_name: str = dataclasses.field(default="cp", metadata=dict(static=True))
    page_size: int = dataclasses.field(default=64, metadata=dict(static=True))
    kv_dtype: str = dataclasses.field(default="bf16", metadata=dict(static=True))
    scales: tuple = ()

    _ARRAYS = ("c_latent", "k_rope", "page_table", "lens", "scales")
    _STATIC = ("mesh", "axis_name", "page_size", "kv_dtype")

    # -- pytree -----------------------------------------------------------------------------
    def tree_flatten(self):
        return tuple(getattr(self, f) for f in self._ARRAYS), tuple(getattr(self, f) for f in self._STATIC)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        for name, v in zip(cls._ARRAYS, children):
            object.__setattr__(obj, name, v)
        for name, v in zip(cls._STATIC, aux):
            object.__setattr__(obj, name, v)
        return obj

    def replace(self, **kw) -> "HelixMLACache":
        bad = kw.keys() - set(self._ARRAYS)
        if bad:
            raise ValueError(f"replace: only array fields can change, got {sorted(bad)}")
        return dataclasses.replace(self, **kw)

    # -- pages of any format ----------------------------------------------------------------
    @property
    def pages(self):
        """Global pages tuple (:class:`MLAPages`, :class:`FP8Pages` or :class:`NVFP4Pages`).

        Every leaf is stacked over ranks on axis 0 and sharded over cp: pass it to ``shard_map``
        with ``P(axis_name)`` and each rank sees its own pages (per-tensor scales as ``[1]``).
        """
        cls = {"bf16": MLAPages, "fp8_e4m3": FP8Pages, "nvfp4": NVFP4Pages}[self.kv_dtype]
        return cls(self.c_latent, self.k_rope, *self.scales)

    def with_pages(self, pages) -> "HelixMLACache":
        """The cache with its pool leaves replaced by ``pages`` (same format as :attr:`pages`)."""
        if kv_format(pages) != self.kv_dtype or len(pages) != len(self.pages):
            raise ValueError(f"with_pages: expected {type(self.pages).__name__} for kv_dtype="
                             f"{self.kv_dtype!r}, got {type(pages).__name__}")
        return self.replace(c_latent=pages[0], k_rope=pages[1], scales=tuple(pages[2:]))

    # -- derived ----------------------------------------------------------------------------
    @property
    def cp_size(self) -> int:
        return int(self.mesh.shape[self.axis_name])

    @property
    def batch(self) -> int:
        return int(self.page_table.shape[1])

    @property
    def pages_per_seq(self) -> int:
        return int(self.page_table.shape[2])

    @property
    def num_pages(self) -> int:
        """Pages in each rank's pool."""
        return int(self.c_latent.shape[0]) // self.cp_size

    @property
    def capacity(self) -> int:
        """Global tokens each sequence can hold."""
        return ledger.capacity(self.pages_per_seq, page_size=self.page_size, cp_size=self.cp_size)

    @property
    def dtype(self):
        """Storage dtype of ``c_latent`` (uint8 for packed nvfp4; see ``kv_dtype``)."""
        return self.c_latent.dtype

    def specs(self) -> "HelixMLACache":
        """The cache's PartitionSpecs as a pytree of the same structure (for ``shard_map``)."""
        a = self.axis_name
        n_scales = len(jax.tree_util.tree_leaves(self.scales))
        return jax.tree_util.tree_unflatten(
            jax.tree_util.tree_structure(self), [P(a), P(a), P(a), P()] + [P(a)] * n_scales)

    def rank_pages(self, rank: int):
        """Host-side view of one rank's pages (same type as :attr:`pages`) and page table."""
        n = self.num_pages
        pages = self.pages
        leaves = [x[rank * n:(rank + 1) * n] if x.ndim > 1 else x[rank:rank + 1] for x in pages]
        return type(pages)(*leaves), self.page_table[rank]

    # -- constructors -----------------------------------------------------------------------
    @classmethod
    def empty(cls, batch: int, *, mesh: Mesh, page_size: int, max_len: int, dtype=jnp.bfloat16,
              axis_name: str = "cp", num_pages: int | None = None, kv_dtype: str = "bf16",
              kv_scale=None) -> "HelixMLACache":
        """An all-zero cache with room for ``max_len`` global tokens per sequence.

        Quantized formats without ``kv_scale`` use static per-tensor defaults: fp8 scale 1.0,
        nvfp4 global scale ``quant.NVFP4_KV_GLOBAL_SCALE`` (89.6, §10.3).
        """
        _check_int("batch", batch)
        z_lat = jnp.zeros((batch, 0, LATENT_DIM), dtype)
        z_rope = jnp.zeros((batch, 0, ROPE_DIM), dtype)
        return cls.from_global(z_lat, z_rope, jnp.zeros((batch,), jnp.int32), mesh=mesh,
                               page_size=page_size, max_len=max_len, axis_name=axis_name,
                               num_pages=num_pages, kv_dtype=kv_dtype, kv_scale=kv_scale)

    @classmethod
    def from_global(cls, c_latent, k_rope, lens, *, mesh: Mesh, page_size: int, max_len: int,
                    axis_name: str = "cp", num_pages: int | None = None,
                    shuffle_pages: int | None = None, kv_dtype: str = "bf16",
                    kv_scale=None) -> "HelixMLACache":
        """Prefill hand-off: distribute a global KV ``[B, L, 512]`` / ``[B, L, 64]`` by the ledger.

        Args:
          c_latent: ``[B, L, 512]`` latent rows of positions ``0..L-1``.
          k_rope: ``[B, L, 64]`` RoPE'd (at global positions) key rows.
          lens: ``[B]`` valid length of each sequence (``<= L``, ``<= max_len``).
          mesh: mesh with a ``axis_name`` axis of size cp.
          page_size: tokens per page ``P``.
          max_len: global tokens each sequence must be able to hold (prompt + generation).
          num_pages: pages per rank pool (default ``B * pages_per_seq``; more leaves spare pages).
          shuffle_pages: if given, a seed for a random page assignment (tests, realism).
          kv_dtype: ``"bf16"`` (store as given), ``"fp8_e4m3"`` or ``"nvfp4"`` (§10).
          kv_scale: per-tensor orig->quant scale (fp8 ``scale`` / nvfp4 ``global_scale``); default
            derived from the valid rows (``< lens``): ``448/amax`` resp. ``448*6/amax``.
        """
        if not isinstance(mesh, Mesh):
            raise ValueError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
        if axis_name not in mesh.shape:
            raise ValueError(f"axis_name {axis_name!r} is not an axis of the mesh {dict(mesh.shape)}")
        _check_int("page_size", page_size)
        _check_int("max_len", max_len)
        quant.check_kv_dtype(kv_dtype)
        if kv_scale is not None:
            if kv_dtype == "bf16":
                raise ValueError("kv_scale applies only to a quantized kv_dtype ('fp8_e4m3', 'nvfp4')")
            ks = float(kv_scale)
            if not (np.isfinite(ks) and ks > 0):
                raise ValueError(f"kv_scale must be a finite positive float, got {kv_scale!r}")
        c_latent = jnp.asarray(c_latent)
        k_rope = jnp.asarray(k_rope)
        lens = jnp.asarray(lens)
        if c_latent.ndim != 3 or c_latent.shape[-1] != LATENT_DIM:
            raise ValueError(f"c_latent must have shape [B, L, {LATENT_DIM}], got {c_latent.shape}")
        b, length = c_latent.shape[:2]
        if k_rope.shape != (b, length, ROPE_DIM):
            raise ValueError(f"k_rope must have shape [B, L, {ROPE_DIM}] = {(b, length, ROPE_DIM)}, got {k_rope.shape}")
        if not jnp.issubdtype(c_latent.dtype, jnp.floating) or k_rope.dtype != c_latent.dtype:
            raise ValueError(f"c_latent and k_rope must share one floating dtype, got {c_latent.dtype} and {k_rope.dtype}")
        if lens.shape != (b,) or not jnp.issubdtype(lens.dtype, jnp.integer):
            raise ValueError(f"lens must be an int array of shape [B]={(b,)}, got {lens.shape} {lens.dtype}")
        lens_h = np.asarray(lens)
        if np.any(lens_h < 0) or np.any(lens_h > length) or np.any(lens_h > max_len):
            raise ValueError(f"lens must lie in [0, min(L={length}, max_len={max_len})], got {lens_h.tolist()}")
        cp = int(mesh.shape[axis_name])
        npp = ledger.pages_per_rank(max_len, page_size=page_size, cp_size=cp)
        need = b * npp
        if num_pages is None:
            num_pages = need
        _check_int("num_pages", num_pages)
        if num_pages < need:
            raise ValueError(f"num_pages={num_pages} per rank cannot hold {b} sequences x {npp} pages = {need}")
        if shuffle_pages is None:
            tables = np.broadcast_to(np.arange(need, dtype=np.int32).reshape(b, npp), (cp, b, npp))
        else:
            rng = np.random.default_rng(shuffle_pages)
            tables = np.stack([rng.permutation(num_pages)[:need].reshape(b, npp) for _ in range(cp)])
        tables = np.ascontiguousarray(tables, dtype=np.int32)
        lat, rope = _distribute(c_latent, k_rope, lens.astype(jnp.int32), jnp.asarray(tables),
                                page_size=page_size, cp=cp, num_pages=num_pages)
        leaves = [lat, rope]
        if kv_dtype != "bf16":
            scale = kv_scale if kv_scale is not None else _derive_scale(kv_dtype, c_latent, k_rope, lens)
            leaves = list(_quantize_pools(kv_dtype, lat, rope, jnp.float32(scale), cp))
        shard = NamedSharding(mesh, P(axis_name))
        leaves = [jax.device_put(x, shard) for x in leaves]
        return cls(c_latent=leaves[0], k_rope=leaves[1],
                   page_table=jax.device_put(jnp.asarray(tables), shard),
                   lens=jax.device_put(lens.astype(jnp.int32), NamedSharding(mesh, P())),
                   mesh=mesh, axis_name=axis_name, page_size=page_size, kv_dtype=kv_dtype,
                   scales=tuple(leaves[2:]))

    def to_global(self, length: int | None = None, *, raw: bool = False):
        """Inverse of :meth:`from_global`: gather ``[B, length, 512]`` / ``[B, length, 64]`` (host view).

        Quantized caches return the dequantized float32 rows, or with ``raw=True`` the stored pages
        tuple gathered to ``[B, length, .]`` per row field (per-tensor scalars as stored, ``[cp]``).
        """
        length = self.capacity if length is None else length
        cp, p, n = self.cp_size, self.page_size, self.num_pages
        pos = np.arange(length)
        r = (pos // p) % cp
        s = np.asarray(ledger.local_len(pos, r, page_size=p, cp_size=cp))
        tables = np.asarray(self.page_table)                      # [cp, B, npp]
        page = tables[r[None, :].repeat(self.batch, 0), np.arange(self.batch)[:, None], s // p]
        rows = r[None, :] * n + page                                  # [B, length]
        pages = self.pages
        got = type(pages)(*[np.asarray(x)[rows, s % p] if x.ndim > 1 else np.asarray(x) for x in pages])
        if raw or self.kv_dtype == "bf16":
            return got if raw else (got.c_latent, got.k_rope)
        local = type(pages)(*[x if x.ndim > 1 else x[:1] for x in got])  # one per-tensor value
        lat, rope = _dequantize_jit(local)
        return np.asarray(lat), np.asarray(rope)


_dequantize_jit = jax.jit(dequantize_pages)


@functools.partial(jax.jit, static_argnums=(0, 4))
def _quantize_pools(kv_dtype, lat, rope, scale, cp):
    """Quantized leaves (pages field order) of float pools ``[cp*N, P, .]`` with one per-tensor scale."""
    rank_scale = jnp.full((cp,), scale, jnp.float32)
    proto = FP8Pages if kv_dtype == "fp8_e4m3" else NVFP4Pages
    fields = _quantize_rows(proto(lat, rope, *[rank_scale[:1]] * (len(proto._fields) - 2)), lat, rope)
    return tuple(fields[f] for f in proto._fields[:-1]) + (rank_scale,)


@jax.jit
def _valid_amax(c_latent, k_rope, lens):
    valid = (jnp.arange(c_latent.shape[1])[None, :] < lens[:, None])[..., None]
    return jnp.maximum(jnp.max(jnp.where(valid, jnp.abs(c_latent.astype(jnp.float32)), 0), initial=0.0),
                       jnp.max(jnp.where(valid, jnp.abs(k_rope.astype(jnp.float32)), 0), initial=0.0))


def _derive_scale(kv_dtype, c_latent, k_rope, lens):
    """Per-tensor scale from ``amax`` over the valid rows (positions ``< lens``)."""
    amax = float(_valid_amax(c_latent, k_rope, lens))
    if not np.isfinite(amax):
        raise ValueError("c_latent/k_rope contain non-finite values: cannot derive a kv_scale")
    if kv_dtype == "fp8_e4m3":
        return quant.fp8_scale_from_amax(amax)
    return quant.nvfp4_global_scale_from_amax(amax)


@functools.partial(jax.jit, static_argnames=("page_size", "cp", "num_pages"))  # one compile, not one per op
def _distribute(c_latent, k_rope, lens, tables, *, page_size, cp, num_pages):
    b, length = c_latent.shape[:2]
    npp = tables.shape[2]
    s = jnp.arange(npp * page_size)
    lat_pools, rope_pools = [], []
    for r in range(cp):
        pos = ((s // page_size) * cp + r) * page_size + s % page_size      # [npp*P]
        ok = pos[None, :] < lens[:, None]                                   # [B, npp*P]
        idx = jnp.clip(pos, 0, max(length - 1, 0))
        if length:
            lat = jnp.where(ok[..., None], c_latent[:, idx], 0)
            rope = jnp.where(ok[..., None], k_rope[:, idx], 0)
        else:
            lat = jnp.zeros((b, npp * page_size, LATENT_DIM), c_latent.dtype)
            rope = jnp.zeros((b, npp * page_size, ROPE_DIM), k_rope.dtype)
        lat = lat.reshape(b * npp, page_size, LATENT_DIM)
        rope = rope.reshape(b * npp, page_size, ROPE_DIM)
        flat = tables[r].reshape(-1)
        lat_pools.append(jnp.zeros((num_pages, page_size, LATENT_DIM), c_latent.dtype).at[flat].set(lat))
        rope_pools.append(jnp.zeros((num_pages, page_size, ROPE_DIM), k_rope.dtype).at[flat].set(rope))
    return jnp.concatenate(lat_pools), jnp.concatenate(rope_pools)
