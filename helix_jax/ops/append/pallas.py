"""Pallas append-and-quantize of new MLA KV rows into one rank's paged pools (Triton lowering on GPU).

One program per new row ``(b, g)``: it reads the row's rank-local slot, looks its page up in the page
table, quantizes the 512 latent + 64 rope values in registers and stores them (plus NVFP4 block
scales) straight into the pool, which is aliased input->output so nothing else is copied. Slot -1 (or
any slot outside ``[0, pages_per_seq * P)``) and page ids outside ``[0, N)`` are skipped.

Bit-exact with the jnp path (:func:`helix_jax.cache.append_kv`, formulas in :mod:`helix_jax.quant`):

* the f32 -> E4M3 cast is round-to-nearest-even with saturation done by the explicit clip first;
* E2M1 rounding is written as comparisons against the RNE midpoints of the grid (ties go to the even
  code: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), since the Triton
  lowering has no 4-bit float type; the sign comes from the f32 sign bit (``-0.0`` -> code 8);
* Triton lowers ``a / b`` in f32 to the approximate ``div.full.f32``, so the two divisions of the
  format (``/ 6`` in the block scale, ``1 / sf``) use PTX ``div.rn.f32`` (IEEE) on GPU.

Nibbles are packed with a sum over pairs (``lo + 16 * hi``) because the Triton lowering has no value
slicing. Two rows that name the same slot race (the jnp scatter picks one too); callers never do that.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from ... import quant

__all__ = ["append_rows"]

DL, DR = 512, 64
_F32 = jnp.float32


def _div(a, b, *, exact_asm):
    """IEEE f32 ``a / b`` (same shapes): PTX ``div.rn.f32`` under Triton, plain division otherwise."""
    if not exact_asm:
        return a / b
    from jax.experimental.pallas import triton as plt
    [q] = plt.elementwise_inline_asm("div.rn.f32 $0, $1, $2;", args=[a, b], constraints="=f,f,f", pack=1,
                                     result_shape_dtypes=[jax.ShapeDtypeStruct(a.shape, _F32)])
    return q


def _fp8(x, scale):
    """``x [D]`` -> E4M3 ``RNE(clip(x * scale, +-448))`` (quant.quantize_fp8)."""
    y = x.astype(_F32) * scale
    return jnp.clip(y, -quant.FP8_E4M3_MAX, quant.FP8_E4M3_MAX).astype(jnp.float8_e4m3fn)


def _e2m1_codes(y):
    """f32 ``y`` (block units) -> int32 E2M1 codes 0..15, RNE and saturating at +-6 (quant.fp4_codes)."""
    a = jnp.abs(y)
    mag = ((a > 0.25).astype(jnp.int32) + (a >= 0.75).astype(jnp.int32) + (a > 1.25).astype(jnp.int32)
           + (a >= 1.75).astype(jnp.int32) + (a > 2.5).astype(jnp.int32) + (a >= 3.5).astype(jnp.int32)
           + (a > 5.0).astype(jnp.int32))
    neg = jax.lax.bitcast_convert_type(y, jnp.int32) < 0
    return jnp.where(neg, mag + 8, mag)


def _nvfp4(x, g, *, exact_asm):
    """``x [D]`` -> (packed uint8 ``[D/2]``, E4M3 block scales ``[D/16]``) (quant.quantize_nvfp4)."""
    d = x.shape[0]
    nb = d // quant.NVFP4_BLOCK
    xb = x.astype(_F32).reshape(nb, quant.NVFP4_BLOCK)
    amax = jnp.max(jnp.abs(xb), axis=1)                                               # [nb]
    sf_raw = _div(amax * g, jnp.full((nb,), quant.E2M1_MAX, _F32), exact_asm=exact_asm)
    sf = jnp.clip(sf_raw, 0.0, quant.FP8_E4M3_MAX).astype(jnp.float8_e4m3fn)          # [nb]
    sf32 = jnp.broadcast_to(sf.astype(_F32)[:, None], xb.shape)
    pos = sf32 > 0
    inv = _div(jnp.ones_like(sf32), jnp.where(pos, sf32, 1.0), exact_asm=exact_asm)
    y = jnp.where(pos, (xb * g) * inv, 0.0)
    pairs = _e2m1_codes(y).reshape(d // 2, 2)                                         # (even, odd)
    weight = 1 + 15 * jax.lax.broadcasted_iota(jnp.int32, (d // 2, 2), 1)             # (1, 16)
    packed = jnp.sum(pairs * weight, axis=1)
    return packed.astype(jnp.uint8), sf


def _kernel(slots_ref, pt_ref, scale_ref, cn_ref, kn_ref, *refs, fmt, page, n_pages, npp, exact_asm):
    n_pool = len(refs) // 2
    out = refs[n_pool:]                   # aliased with refs[:n_pool]; only the outputs are written
    b, g = pl.program_id(0), pl.program_id(1)
    slot = slots_ref[b, g]
    ok = (slot >= 0) & (slot < npp * page)
    s = jnp.where(ok, slot, 0)
    pid = pt_ref[b, jax.lax.div(s, page)]
    off = jax.lax.rem(s, page)
    ok = ok & (pid >= 0) & (pid < n_pages)

    # The row is loaded and quantized unconditionally so that its loads overlap the slot -> page lookup.
    cn = cn_ref[b, g, :]
    kn = kn_ref[b, g, :]
    if fmt == "bf16":
        vals = (cn.astype(out[0].dtype), kn.astype(out[1].dtype))
    elif fmt == "fp8_e4m3":
        sc = scale_ref[0]
        vals = (_fp8(cn, sc), _fp8(kn, sc))
    else:
        gs = scale_ref[0]
        c, csf = _nvfp4(cn, gs, exact_asm=exact_asm)
        k, ksf = _nvfp4(kn, gs, exact_asm=exact_asm)
        vals = (c, k, csf, ksf)

    @pl.when(ok)
    def _():
        for ref, v in zip(out, vals):
            ref[pid, off, :] = v


def _row_fields(pages):
    """(format, pool arrays in pages-field order, per-tensor scale [1] or None)."""
    from ...cache import kv_format
    fmt = kv_format(pages)
    if fmt == "bf16":
        return fmt, (pages.c_latent, pages.k_rope), None
    if fmt == "fp8_e4m3":
        return fmt, (pages.c_latent, pages.k_rope), pages.scale
    return fmt, (pages.c_latent, pages.k_rope, pages.c_latent_sf, pages.k_rope_sf), pages.global_scale


def _check(pools, page_table, slots, c_new, k_new):
    n, p = pools[0].shape[:2]
    if pools[0].shape[2:] not in ((DL,), (DL // 2,)) or pools[1].shape[:2] != (n, p):
        raise ValueError(f"pages: expected c_latent [N, P, {DL}] (or [N, P, {DL // 2}] packed nvfp4) and "
                         f"k_rope [N, P, .], got {pools[0].shape} and {pools[1].shape}")
    if slots.ndim != 2:
        raise ValueError(f"local_slots must have shape [B, G], got {slots.shape}")
    b, g = slots.shape
    if page_table.ndim != 2 or page_table.shape[0] != b:
        raise ValueError(f"page_table must have shape [B={b}, pages_per_seq], got {page_table.shape}")
    if c_new.shape != (b, g, DL) or k_new.shape != (b, g, DR):
        raise ValueError(f"c_latent_new / k_rope_new must have shapes [B, G, {DL}] / [B, G, {DR}] = "
                         f"{(b, g, DL)} / {(b, g, DR)}, got {c_new.shape} / {k_new.shape}")
    for name, x in (("page_table", page_table), ("local_slots", slots)):
        if not jnp.issubdtype(x.dtype, jnp.integer):
            raise ValueError(f"{name} must be an integer array, got {x.dtype}")


def append_rows(pages, page_table, local_slots, c_latent_new, k_rope_new, *, interpret: bool | None = None,
                num_warps: int = 4):
    """Pallas twin of :func:`helix_jax.cache.append_kv` (same arguments, same result bit for bit; page ids
    outside ``[0, N)`` are skipped by both).

    Args:
      pages: one rank's :class:`MLAPages` / :class:`FP8Pages` / :class:`NVFP4Pages` (pools ``[N, P, .]``).
      page_table: ``[B, pages_per_seq]`` local page ids.
      local_slots: ``[B, G]`` rank-local indices (``-1`` = skip).
      c_latent_new: ``[B, G, 512]``; k_rope_new: ``[B, G, 64]``.
      interpret: run the kernel in Pallas interpret mode (default: on the CPU backend only).
      num_warps: Triton warps per row program (GPU only).
    Returns the pages tuple of the same type; the pools are updated in place when the caller donates
    them (inside a jit the aliasing makes the write in place whenever the old pool is dead).
    """
    fmt, pools, scale = _row_fields(pages)
    slots = jnp.asarray(local_slots)
    page_table = jnp.asarray(page_table)
    c_new, k_new = jnp.asarray(c_latent_new), jnp.asarray(k_rope_new)
    _check(pools, page_table, slots, c_new, k_new)
    if interpret is None:
        interpret = jax.default_backend() == "cpu"
    n, p = pools[0].shape[:2]
    b, g = slots.shape
    scale = jnp.ones((1,), _F32) if scale is None else jnp.asarray(scale, _F32).reshape(1)
    kernel = functools.partial(_kernel, fmt=fmt, page=p, n_pages=n, npp=page_table.shape[1],
                               exact_asm=not interpret)
    extra = {}
    if not interpret:
        from jax.experimental.pallas import triton as plt
        extra["compiler_params"] = plt.CompilerParams(num_warps=num_warps, num_stages=1)
    n_in = 5
    new = pl.pallas_call(
        kernel,
        grid=(b, g),
        in_specs=[pl.no_block_spec] * (n_in + len(pools)),
        out_specs=[pl.no_block_spec] * len(pools),
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in pools],
        input_output_aliases={n_in + i: i for i in range(len(pools))},
        interpret=interpret,
        **extra,
    )(slots.astype(jnp.int32), page_table.astype(jnp.int32), scale, c_new, k_new, *pools)
    names = type(pages)._fields[:len(pools)]
    return pages._replace(**dict(zip(names, new)))
