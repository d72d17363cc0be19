"""Pallas backend of the bounded MLA decode (Triton lowering on GPU, ``interpret=True`` on CPU).

One program per (sequence, 2^k-row tile of the folded G*H query rows); it walks the sequence's pages
up to its longest bound with an online softmax. Triton needs power-of-2 block sizes, so the 576-wide
key is two operands (512 latent + 64 rope) and the page size must be a power of 2 (>= 16 on GPU, where
``jnp.dot`` needs K >= 16). Only pages in the table and only slots below the sequence's longest bound
are loaded (masked loads, zero elsewhere). No split-KV: a simple portable baseline, not the fast path.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

DL, DR = 512, 64


def availability(platform):
    if platform == "cpu":
        return True, ""
    if platform in ("gpu", "cuda"):
        try:
            from jax.experimental.pallas import triton as _  # noqa: F401
        except ImportError as e:  # pragma: no cover
            return False, f"Pallas Triton lowering unavailable: {e}"
        return True, ""
    return False, f"no Pallas lowering for platform {platform!r}"


def preferred(platform):
    return platform in ("gpu", "cuda")


def _load(ref, mask, interpret):
    if interpret:  # interpret mode: plain indexing; masked-out rows are zeroed by the caller's where
        return ref[...]
    from jax.experimental.pallas import triton as plt
    return plt.load(ref, mask=mask, other=0)


def _kernel(lens_ref, pt_ref, rb_ref, ql_ref, qr_ref, cl_ref, kr_ref, o_ref, lse_ref, *, page, n_pages, scale,
            interpret):
    b = pl.program_id(0)
    ql = ql_ref[...]                      # [BM, 512]
    qr = qr_ref[...]                      # [BM, 64]
    rb = rb_ref[...]                      # [BM] per-row bound (0 on padding rows)
    n = lens_ref[b]                       # longest bound of this sequence
    bm = ql.shape[0]
    f32 = jnp.float32

    def body(j, carry):
        m, l, acc = carry
        pid = jnp.clip(pt_ref[b, j], 0, n_pages - 1)
        tok = j * page + jax.lax.broadcasted_iota(jnp.int32, (page,), 0)
        valid = tok < n
        kl = _load(cl_ref.at[pid], valid[:, None], interpret)   # [P, 512]
        kr = _load(kr_ref.at[pid], valid[:, None], interpret)   # [P, 64]
        kl = jnp.where(valid[:, None], kl, 0).astype(ql.dtype)
        kr = jnp.where(valid[:, None], kr, 0).astype(ql.dtype)
        s = (jnp.dot(ql, kl.T, preferred_element_type=f32) + jnp.dot(qr, kr.T, preferred_element_type=f32)) * scale
        s = jnp.where(tok[None, :] < rb[:, None], s, -jnp.inf)
        m_new = jnp.maximum(m, jnp.max(s, axis=1))
        m_use = jnp.where(m_new == -jnp.inf, 0.0, m_new)
        alpha = jnp.exp(m - m_use)
        p = jnp.exp(s - m_use[:, None])
        l = l * alpha + jnp.sum(p, axis=1)
        acc = acc * alpha[:, None] + jnp.dot(p.astype(kl.dtype), kl, preferred_element_type=f32)
        return m_new, l, acc

    init = (jnp.full((bm,), -jnp.inf, f32), jnp.zeros((bm,), f32), jnp.zeros((bm, DL), f32))
    m, l, acc = jax.lax.fori_loop(0, (n + page - 1) // page, body, init)
    live = l > 0
    o_ref[...] = jnp.where(live[:, None], acc / jnp.where(live, l, 1.0)[:, None], 0.0).astype(o_ref.dtype)
    lse_ref[...] = jnp.where(live, m + jnp.log(jnp.where(live, l, 1.0)), -jnp.inf)


def check_operands(platform, q_latent, c_latent, k_rope):
    """Raise ``ValueError`` unless this backend handles these operands (the dispatch skips it then)."""
    dl, dr, p = q_latent.shape[-1], k_rope.shape[-1], c_latent.shape[1]
    if dl != DL or dr != DR:
        raise ValueError(f"mla_decode implementation='pallas' needs Dl=512, Dr=64, got {dl}, {dr}")
    if p & (p - 1) or (platform != "cpu" and p < 16):
        raise ValueError(f"mla_decode implementation='pallas' needs a power-of-2 page size (>= 16 on GPU), got {p}")


def mla_decode(q_latent, q_rope, c_latent, k_rope, page_table, kv_bounds, softmax_scale):
    """Bounded MLA decode in Pallas (shapes validated by ``api.mla_decode``).

    q_latent ``[B, G, H, 512]``, q_rope ``[B, G, H, 64]``, c_latent ``[N, P, 512]``, k_rope ``[N, P, 64]``,
    page_table ``[B, npp]`` int32, kv_bounds ``[B, G]`` int32.
    Returns ``(o [B, G, H, 512] in q_latent.dtype, lse [B, G, H] float32)``.
    """
    if isinstance(softmax_scale, jax.core.Tracer):
        raise ValueError("mla_decode implementation='pallas' needs a static softmax_scale, got a tracer")
    interpret = jax.default_backend() == "cpu"
    check_operands(jax.default_backend(), q_latent, c_latent, k_rope)
    b, g, h, dl = q_latent.shape
    n, p = c_latent.shape[:2]
    rows = g * h
    bm = max(16, min(64, int(pl.next_power_of_2(rows))))
    r_pad = -(-rows // bm) * bm
    cap = page_table.shape[1] * p
    bounds = jnp.clip(kv_bounds.astype(jnp.int32), 0, cap)
    row_bounds = jnp.pad(jnp.repeat(bounds, h, axis=1), ((0, 0), (0, r_pad - rows)))        # [B, R_pad]
    lens = jnp.max(bounds, axis=1)                                                          # [B]
    ql = jnp.pad(q_latent.reshape(b, rows, dl), ((0, 0), (0, r_pad - rows), (0, 0)))
    qr = jnp.pad(q_rope.reshape(b, rows, DR), ((0, 0), (0, r_pad - rows), (0, 0)))
    c_latent = c_latent.astype(q_latent.dtype)
    k_rope = k_rope.astype(q_latent.dtype)

    kernel = functools.partial(_kernel, page=p, n_pages=n, scale=float(softmax_scale), interpret=interpret)
    extra = {}
    if not interpret:
        from jax.experimental.pallas import triton as plt
        # >= 32-row tiles: Q + one 64-token KV page + P already fill most of the 227 KB (measured: a second
        # pipeline stage asks for 236-272 KB); only 16-row tiles get a 2-stage pipeline.
        extra["compiler_params"] = plt.CompilerParams(num_warps=8 if bm == 64 else 4, num_stages=1 if bm >= 32 else 2)
    o, lse = pl.pallas_call(
        kernel,
        grid=(b, r_pad // bm),
        in_specs=[pl.no_block_spec, pl.no_block_spec,
                  pl.BlockSpec((None, bm), lambda i, m: (i, m)),
                  pl.BlockSpec((None, bm, DL), lambda i, m: (i, m, 0)),
                  pl.BlockSpec((None, bm, DR), lambda i, m: (i, m, 0)),
                  pl.no_block_spec, pl.no_block_spec],
        out_specs=[pl.BlockSpec((None, bm, DL), lambda i, m: (i, m, 0)),
                   pl.BlockSpec((None, bm), lambda i, m: (i, m))],
        out_shape=[jax.ShapeDtypeStruct((b, r_pad, DL), q_latent.dtype),
                   jax.ShapeDtypeStruct((b, r_pad), jnp.float32)],
        interpret=interpret,
        **extra,
    )(lens, page_table.astype(jnp.int32), row_bounds, ql, qr, c_latent, k_rope)
    return o[:, :rows].reshape(b, g, h, DL), lse[:, :rows].reshape(b, g, h)
