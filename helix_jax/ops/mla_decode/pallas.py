"""Pallas backend of the bounded MLA decode (Triton lowering on GPU, ``interpret=True`` on CPU).

One program per (sequence, 2^k-row tile of the folded G*H query rows); it walks the sequence's pages
up to its longest bound with an online softmax. Triton needs power-of-2 block sizes, so the 576-wide
key is two operands (512 latent + 64 rope) and the page size must be a power of 2 (>= 16 on GPU, where
``jnp.dot`` needs K >= 16). Only pages in the table and only slots below the sequence's longest bound
are loaded (masked loads, zero elsewhere); pages above 64 tokens are walked in 64-token chunks (shared
memory). No split-KV: a simple portable baseline, not the fast path.

Quantized pages (``mla_decode_quantized``): FP8Pages and NVFP4Pages are loaded as stored (codes and
block scales) and dequantized per page inside the kernel; nvfp4 computes S and PV on the even / odd
feature halves (the two nibbles of a byte) so the kernel never interleaves nibbles.
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


def _chunking(page):
    """Tokens per loop step and steps per page: pages above 64 tokens are walked in 64-token chunks (a whole
    128-token fp8 page asked Triton for 280 KB of shared memory on the H200, over the 227 KB limit)."""
    sub = min(page, 64)
    return sub, page // sub


def _step(pt_ref, b, j, sub, per, n_pages):
    """Step j of sequence b: its pool page (table entry clamped to the pool) and its ``sub`` token positions.
    lax.div: j >= 0, and jnp's floor division does not lower to Triton."""
    pid = jnp.clip(pt_ref[b, j if per == 1 else jax.lax.div(j, per)], 0, n_pages - 1)
    return pid, j * sub + jax.lax.broadcasted_iota(jnp.int32, (sub,), 0)


def _chunk(ref, pid, j, sub, per):
    """Step j's rows of page pid: the whole page, or chunk j mod per of it."""
    if per == 1:
        return ref.at[pid]
    return ref.at[pid, pl.ds(jax.lax.rem(j, per) * sub, sub)]


def _online_softmax(m, l, s, tok, rb):
    """One step of the online softmax over logits ``s`` [BM, sub] at token positions ``tok`` [sub], masked where a
    token is at or past its row's bound ``rb`` [BM]: the new running max, the factor ``alpha`` [BM] of the old terms,
    the weights ``p`` [BM, sub] and the new running sum. Rows with nothing visible yet keep max -inf and weights 0
    (no -inf - -inf NaN)."""
    s = jnp.where(tok[None, :] < rb[:, None], s, -jnp.inf)
    m_new = jnp.maximum(m, jnp.max(s, axis=1))
    m_use = jnp.where(m_new == -jnp.inf, 0.0, m_new)
    alpha = jnp.exp(m - m_use)
    p = jnp.exp(s - m_use[:, None])
    return m_new, alpha, p, l * alpha + jnp.sum(p, axis=1)


def _normalized(acc, l):
    """acc [BM, D] / l [BM], 0 on rows that saw no token (l = 0)."""
    live = l > 0
    return jnp.where(live[:, None], acc / jnp.where(live, l, 1.0)[:, None], 0.0)


def _lse(m, l):
    """Natural-log lse of the rows, -inf on rows that saw no token."""
    live = l > 0
    return jnp.where(live, m + jnp.log(jnp.where(live, l, 1.0)), -jnp.inf)


def _kernel(lens_ref, pt_ref, rb_ref, ql_ref, qr_ref, cl_ref, kr_ref, o_ref, lse_ref, *, page, n_pages, scale,
            interpret):
    b = pl.program_id(0)
    ql = ql_ref[...]                      # [BM, 512]
    qr = qr_ref[...]                      # [BM, 64]
    rb = rb_ref[...]                      # [BM] per-row bound (0 on padding rows)
    n = lens_ref[b]                       # longest bound of this sequence
    bm = ql.shape[0]
    f32 = jnp.float32

    sub, per = _chunking(page)

    def body(j, carry):
        m, l, acc = carry
        pid, tok = _step(pt_ref, b, j, sub, per, n_pages)
        valid = tok < n
        kl = _load(_chunk(cl_ref, pid, j, sub, per), valid[:, None], interpret)   # [sub, 512]
        kr = _load(_chunk(kr_ref, pid, j, sub, per), valid[:, None], interpret)   # [sub, 64]
        kl = jnp.where(valid[:, None], kl, 0).astype(ql.dtype)
        kr = jnp.where(valid[:, None], kr, 0).astype(ql.dtype)
        s = (jnp.dot(ql, kl.T, preferred_element_type=f32) + jnp.dot(qr, kr.T, preferred_element_type=f32)) * scale
        m_new, alpha, p, l = _online_softmax(m, l, s, tok, rb)
        acc = acc * alpha[:, None] + jnp.dot(p.astype(kl.dtype), kl, preferred_element_type=f32)
        return m_new, l, acc

    init = (jnp.full((bm,), -jnp.inf, f32), jnp.zeros((bm,), f32), jnp.zeros((bm, DL), f32))
    m, l, acc = jax.lax.fori_loop(0, (n + sub - 1) // sub, body, init)
    o_ref[...] = _normalized(acc, l).astype(o_ref.dtype)
    lse_ref[...] = _lse(m, l)


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


# -- quantized pages (FP8Pages / NVFP4Pages): dequantized in the kernel ---------------------------
SUPPORTED_KV_DTYPES = ("bf16", "fp8_e4m3", "nvfp4")


def _e2m1(codes):
    """E2M1 codes (int32, 0..15: sign<<3 | exp<<1 | man) -> float32 values, arithmetically (no gather)."""
    mag, e = codes & 7, (codes >> 1) & 3
    m = (mag & 1).astype(jnp.float32)
    val = jnp.where(e == 0, 0.5 * m, (1.0 + 0.5 * m) * (jnp.left_shift(1, e) // 2).astype(jnp.float32))
    return jnp.where((codes & 8) != 0, -val, val)


def _nvfp4_halves(packed, sf, inv):
    """Packed codes ``[P, D/2]`` + block scales ``[P, D/16]`` -> even / odd features ``[P, D/2]`` each.

    Feature ``2k`` is byte ``k``'s low nibble, ``2k+1`` its high nibble; both lie in block ``k // 8``.
    Value ``fl32(e2m1 * sf) * fl32(1/global)`` as in ``helix_jax.quant``.
    """
    c = packed.astype(jnp.int32)
    p_, half = c.shape
    sf = sf.astype(jnp.float32)
    sfx = jnp.broadcast_to(sf[:, :, None], (p_, half // 8, 8)).reshape(p_, half)
    return (_e2m1(c & 15) * sfx) * inv, (_e2m1(c >> 4) * sfx) * inv


def _load_raw(ref, mask, interpret):
    """Masked load of stored codes / scales without a fill value (Triton cannot splat an int fill into
    float8); masked-out lanes are undefined and replaced by the caller's ``where`` after dequantization."""
    if interpret:
        return ref[...]
    from jax.experimental.pallas import triton as plt
    return plt.load(ref, mask=mask)


def _quant_kernel(lens_ref, pt_ref, rb_ref, inv_ref, *refs, fmt, page, n_pages, scale, interpret):
    """fp8: refs = (ql, qr, c_latent, k_rope, o, lse). nvfp4: the queries come as even / odd feature
    halves (ql_e, ql_o, qr_e, qr_o), then (codes_lat, codes_rope, sf_lat, sf_rope, o_even, o_odd, lse);
    S and PV are computed per half, so no nibble interleave is needed in the kernel."""
    b = pl.program_id(0)
    f32 = jnp.float32
    inv = inv_ref[0]
    rb = rb_ref[...]
    n = lens_ref[b]
    if fmt == "fp8_e4m3":
        ql_ref, qr_ref, cl_ref, kr_ref, *outs = refs
        qs = (ql_ref[...], qr_ref[...])
    else:
        qle, qlo, qre, qro, cl_ref, kr_ref, csf_ref, ksf_ref, *outs = refs
        qs = (qle[...], qlo[...], qre[...], qro[...])
    lse_ref, o_refs = outs[-1], outs[:-1]
    bm, dt = qs[0].shape[0], qs[0].dtype

    sub, per = _chunking(page)

    def rows(pid, j, valid):
        """The page's KV parts without the per-tensor factor, matching ``qs`` (latent parts first); zero past
        the bound. An E4M3 code and an E2M1 value times its E4M3 block scale are exact in bf16/f16, so the
        MXU operands carry no rounding; ``inv`` = fl32(1/scale) multiplies the logits and the output
        instead (rounding ``code * inv`` to 16 bits per element cost 3e-2 in lse at L = 64K on the H200)."""
        ld = functools.partial(_load_raw, mask=valid[:, None], interpret=interpret)
        at = functools.partial(_chunk, pid=pid, j=j, sub=sub, per=per)
        if fmt == "fp8_e4m3":
            parts = [ld(at(cl_ref)).astype(f32), ld(at(kr_ref)).astype(f32)]
        else:
            parts = [*_nvfp4_halves(ld(at(cl_ref)), ld(at(csf_ref)), 1.0),
                     *_nvfp4_halves(ld(at(kr_ref)), ld(at(ksf_ref)), 1.0)]
        return [jnp.where(valid[:, None], x, 0.0).astype(dt) for x in parts]

    n_lat = len(o_refs)   # latent parts = output parts (fp8: 1, nvfp4: 2)

    def body(j, carry):
        m, l, accs = carry
        pid, tok = _step(pt_ref, b, j, sub, per, n_pages)
        kv = rows(pid, j, tok < n)
        s = sum(jnp.dot(q, k.T, preferred_element_type=f32) for q, k in zip(qs, kv)) * (scale * inv)
        m_new, alpha, p, l = _online_softmax(m, l, s, tok, rb)
        accs = tuple(a * alpha[:, None] + jnp.dot(p.astype(dt), v, preferred_element_type=f32)
                     for a, v in zip(accs, kv[:n_lat]))
        return m_new, l, accs

    init = (jnp.full((bm,), -jnp.inf, f32), jnp.zeros((bm,), f32),
            tuple(jnp.zeros((bm, r.shape[-1]), f32) for r in o_refs))
    m, l, accs = jax.lax.fori_loop(0, (n + sub - 1) // sub, body, init)
    for r, a in zip(o_refs, accs):
        r[...] = (_normalized(a, l) * inv).astype(r.dtype)
    lse_ref[...] = _lse(m, l)


def check_quantized_operands(platform, q_latent, pages):
    """Raise ``ValueError`` unless this backend handles these quantized pages."""
    p = pages.c_latent.shape[1]
    if q_latent.shape[-1] != DL:
        raise ValueError(f"mla_decode implementation='pallas' needs Dl=512, got {q_latent.shape[-1]}")
    if p & (p - 1) or (platform != "cpu" and p < 16):
        raise ValueError(f"mla_decode implementation='pallas' needs a power-of-2 page size (>= 16 on GPU), got {p}")


def mla_decode_quantized(q_latent, q_rope, pages, page_table, kv_bounds, softmax_scale):
    """Bounded MLA decode of ``FP8Pages`` / ``NVFP4Pages`` in Pallas, dequantizing each page in the kernel.

    Same contract as :func:`mla_decode`; the per-tensor reciprocal ``fl32(1/scale)`` is computed once
    outside the kernel (an IEEE division, as the reference) and passed as a ``[1]`` operand.
    """
    from ...cache import kv_format
    if isinstance(softmax_scale, jax.core.Tracer):
        raise ValueError("mla_decode implementation='pallas' needs a static softmax_scale, got a tracer")
    fmt = kv_format(pages)
    if fmt not in ("fp8_e4m3", "nvfp4"):
        raise ValueError(f"mla_decode_quantized: pages must be FP8Pages or NVFP4Pages, got {type(pages).__name__}")
    interpret = jax.default_backend() == "cpu"
    check_quantized_operands(jax.default_backend(), q_latent, pages)
    b, g, h, dl = q_latent.shape
    n, p = pages.c_latent.shape[:2]
    rows = g * h
    bm = max(16, min(64, int(pl.next_power_of_2(rows))))
    r_pad = -(-rows // bm) * bm
    cap = page_table.shape[1] * p
    bounds = jnp.clip(kv_bounds.astype(jnp.int32), 0, cap)
    row_bounds = jnp.pad(jnp.repeat(bounds, h, axis=1), ((0, 0), (0, r_pad - rows)))
    lens = jnp.max(bounds, axis=1)
    scalar = pages.scale if fmt == "fp8_e4m3" else pages.global_scale
    inv = (jnp.float32(1.0) / scalar.astype(jnp.float32)).reshape(1)

    def pad(x):
        return jnp.pad(x.reshape(b, rows, x.shape[-1]), ((0, 0), (0, r_pad - rows), (0, 0)))

    if fmt == "fp8_e4m3":
        qs = [pad(q_latent), pad(q_rope)]
        pools = [pages.c_latent, pages.k_rope]
        outs = [dl]
    else:
        qs = [pad(q_latent[..., 0::2]), pad(q_latent[..., 1::2]), pad(q_rope[..., 0::2]), pad(q_rope[..., 1::2])]
        pools = [pages.c_latent, pages.k_rope, pages.c_latent_sf, pages.k_rope_sf]
        outs = [dl // 2, dl // 2]
    kernel = functools.partial(_quant_kernel, fmt=fmt, page=p, n_pages=n, scale=float(softmax_scale),
                               interpret=interpret)
    extra = {}
    if not interpret:
        from jax.experimental.pallas import triton as plt
        extra["compiler_params"] = plt.CompilerParams(num_warps=8 if bm == 64 else 4, num_stages=1)
    res = pl.pallas_call(
        kernel,
        grid=(b, r_pad // bm),
        in_specs=[pl.no_block_spec, pl.no_block_spec, pl.BlockSpec((None, bm), lambda i, m: (i, m)),
                  pl.no_block_spec]
                 + [pl.BlockSpec((None, bm, q.shape[-1]), lambda i, m: (i, m, 0)) for q in qs]
                 + [pl.no_block_spec] * len(pools),
        out_specs=[pl.BlockSpec((None, bm, d), lambda i, m: (i, m, 0)) for d in outs]
                  + [pl.BlockSpec((None, bm), lambda i, m: (i, m))],
        out_shape=[jax.ShapeDtypeStruct((b, r_pad, d), q_latent.dtype) for d in outs]
                  + [jax.ShapeDtypeStruct((b, r_pad), jnp.float32)],
        interpret=interpret,
        **extra,
    )(lens, page_table.astype(jnp.int32), row_bounds, inv, *qs, *pools)
    *o_parts, lse = res
    o = o_parts[0] if len(o_parts) == 1 else jnp.stack(o_parts, axis=-1).reshape(b, r_pad, dl)
    return o[:, :rows].reshape(b, g, h, dl), lse[:, :rows].reshape(b, g, h)
