"""FP8 / NVFP4 MLA KV caches: storage, append (R3), bounded decode (R2), Helix end to end, error budget.

Oracles are float64 numpy: the quantizer oracle of test_quant (explicit RNE grid) and a dense
bounded/causal MLA decode written here.
"""
import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helix_jax import HelixMLACache, helix_mla_attention, ledger, make_cp_mesh, quant
from helix_jax.cache import FP8Pages, MLAPages, NVFP4Pages
from helix_jax.ops.mla_decode import api, mla_decode
from test_quant import E2M1, np_fp8, np_nvfp4

FORMATS = ("fp8_e4m3", "nvfp4")
# One compile per shape instead of one per eager op (bounds are traced: no host-side range check).
decode = jax.jit(functools.partial(mla_decode, implementation="reference", softmax_scale=1.0 / np.sqrt(192.0)))
quantize_fp8, quantize_nvfp4 = jax.jit(quant.quantize_fp8), jax.jit(quant.quantize_nvfp4)
SCALE = 1.0 / np.sqrt(192.0)
F32 = np.float32


# -- oracles ------------------------------------------------------------------------------------
def np_roundtrip(fmt, x, s):
    """Dequantized value of float ``x [..., D]`` stored with per-tensor scale ``s`` (float32)."""
    return F32(np_fp8(x, s)) * (F32(1) / F32(s)) if fmt == "fp8_e4m3" else np_nvfp4(x, s)[0]


def np_dequant_pages(pages):
    """Independent dequantization of stored pages -> ``(lat [..., 512], rope [..., 64])`` float32.

    Same float32 formulas as helix_jax.quant documents (``q * fl32(1/s)``, ``fl32(e*sf) * fl32(1/g)``).
    """
    if isinstance(pages, FP8Pages):
        inv = F32(1) / F32(np.asarray(pages.scale).reshape(-1)[0])
        return tuple(np.asarray(x).astype(F32) * inv for x in pages[:2])
    inv = F32(1) / F32(np.asarray(pages.global_scale).reshape(-1)[0])
    table = F32(np.concatenate([E2M1, -E2M1]))
    out = []
    for packed, sf in ((pages.c_latent, pages.c_latent_sf), (pages.k_rope, pages.k_rope_sf)):
        b = np.asarray(packed)
        codes = np.stack([b & 15, b >> 4], -1).reshape(b.shape[:-1] + (2 * b.shape[-1],))
        e = table[codes].reshape(codes.shape[:-1] + (-1, 16))
        out.append(((e * np.asarray(sf).astype(F32)[..., None]) * inv).reshape(codes.shape))
    return tuple(out)


def dense_decode(q, kv_rows, bounds):
    """float64 bounded decode: q [B,G,H,576], kv_rows [B,L,576], bounds [B,G] -> (o, lse)."""
    q, kv_rows = np.asarray(q, np.float64), np.asarray(kv_rows, np.float64)
    b_, g_, h_, _ = q.shape
    out, lse = np.zeros((b_, g_, h_, 512)), np.full((b_, g_, h_), -np.inf)
    for b in range(b_):
        for g in range(g_):
            k = kv_rows[b, :bounds[b, g]]
            if len(k) == 0:
                continue
            logit = SCALE * q[b, g] @ k.T
            m = logit.max(-1, keepdims=True)
            w = np.exp(logit - m)
            out[b, g] = (w @ k[:, :512]) / w.sum(-1, keepdims=True)
            lse[b, g] = m[:, 0] + np.log(w.sum(-1))
    return out, lse


def causal(q, kv_global, positions):
    return dense_decode(q, kv_global, np.asarray(positions) + 1)[0]


def quantized_pool(fmt, rng, n, p, s):
    """Random pages of ``fmt`` (N pages of P rows) with per-tensor scale ``s``."""
    x = rng.standard_normal((n, p, 576)).astype(F32) * 2
    if fmt == "fp8_e4m3":
        q = quantize_fp8(x, s)
        return FP8Pages(q[..., :512], q[..., 512:], jnp.full((1,), s, jnp.float32))
    c, csf = quantize_nvfp4(x[..., :512], s)
    k, ksf = quantize_nvfp4(x[..., 512:], s)
    return NVFP4Pages(c, k, csf, ksf, jnp.full((1,), s, jnp.float32))


def poison(pages, mask):
    """NaN-encode the rows where ``mask [N, P]`` is set: E4M3 code 0x7F is NaN (fp8 values, nvfp4 scales)."""
    nan8 = np.full((), 0x7F, np.uint8).view(np.dtype(jnp.float8_e4m3fn))
    fields = ("c_latent", "k_rope") if isinstance(pages, FP8Pages) else ("c_latent_sf", "k_rope_sf")
    m = jnp.asarray(mask)[..., None]
    return pages._replace(**{f: jnp.where(m, nan8, getattr(pages, f)) for f in fields})


def gather_rows(pages, table):
    """Dequantized rows in local-slot order ``[B, npp*P, 576]`` (float64) via the page table."""
    lat, rope = np_dequant_pages(pages)
    kv = np.concatenate([lat, rope], -1)[np.asarray(table)]
    return kv.reshape(table.shape[0], -1, 576)


# -- storage ------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_from_global_stores_oracle_quantization(fmt, rng):
    mesh = make_cp_mesh(4)
    kv = rng.standard_normal((2, 40, 576)).astype(F32)
    kv[0, 35, 7] = 1e4                                  # past lens[0]: must not set the scale
    lens = np.array([29, 40])
    cache = HelixMLACache.from_global(jnp.asarray(kv[..., :512], jnp.bfloat16), jnp.asarray(kv[..., 512:], jnp.bfloat16),
                                      lens, mesh=mesh, page_size=4, max_len=48, kv_dtype=fmt, shuffle_pages=3)
    kv_bf = np.asarray(jnp.asarray(kv, jnp.bfloat16).astype(jnp.float32))
    amax = max(np.abs(kv_bf[0, :29]).max(), np.abs(kv_bf[1]).max())
    want_s = 448 / amax if fmt == "fp8_e4m3" else 2688 / amax
    s = np.asarray(cache.scales[-1])
    assert s.shape == (4,) and np.allclose(s, want_s, rtol=1e-6) and np.all(s == s[0])
    lat, rope = cache.to_global(40)
    got = np.concatenate([lat, rope], -1)
    for b, n in enumerate(lens):
        np.testing.assert_array_equal(got[b, :n], np_roundtrip(fmt, kv_bf[b, :n], s[0]))
        assert np.all(got[b, n:] == 0)
    # Bytes per token = what the row leaves of one page really hold.
    row_bytes = sum(x.dtype.itemsize * int(np.prod(x.shape[2:])) for x in cache.pages if x.ndim == 3)
    assert row_bytes == quant.bytes_per_token(fmt)
    given = HelixMLACache.from_global(kv[..., :512], kv[..., 512:], lens, mesh=mesh, page_size=4,
                                      max_len=48, kv_dtype=fmt, kv_scale=3.0)
    assert np.all(np.asarray(given.scales[-1]) == 3.0)


def test_empty_caches_and_bf16_bytes_per_token():
    mesh = make_cp_mesh(2)
    cache = HelixMLACache.empty(1, mesh=mesh, page_size=4, max_len=16)
    assert cache.kv_dtype == "bf16" and cache.scales == () and isinstance(cache.pages, MLAPages)
    assert sum(x.dtype.itemsize * x.shape[2] for x in cache.pages) == quant.bytes_per_token("bf16")
    # Static per-tensor defaults when there is no data (§10.3 for nvfp4).
    fp8 = HelixMLACache.empty(1, mesh=mesh, page_size=4, max_len=16, kv_dtype="fp8_e4m3")
    nv = HelixMLACache.empty(1, mesh=mesh, page_size=4, max_len=16, kv_dtype="nvfp4")
    assert np.all(np.asarray(fp8.scales[0]) == 1.0)
    assert np.allclose(np.asarray(nv.scales[-1]), 89.6) and isinstance(nv.pages, NVFP4Pages)
    assert np.all(fp8.to_global()[0] == 0) and np.all(nv.to_global()[1] == 0)


# -- per-rank decode on quantized pages ----------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_decode_quantized_pages_vs_float64_oracle(fmt, rng):
    n, p, npp, b, g, h = 11, 8, 3, 3, 3, 4
    pages = quantized_pool(fmt, rng, n, p, 37.0 if fmt == "fp8_e4m3" else 60.0)
    table = rng.permutation(n)[:b * npp].reshape(b, npp).astype(np.int32)      # distinct pages
    cap = npp * p
    bounds = np.array([[0, 5, 9], [cap - 2, cap - 1, cap], [8, 8, 13]], np.int32)
    # NaN in every row no token may read: unreferenced pages and slots at/after each row's max bound.
    dead = np.ones((n, p), bool)
    for i in range(b):
        dead[table[i]] = (np.arange(cap) >= bounds[i].max()).reshape(npp, p)
    pages = poison(pages, dead)
    q = rng.standard_normal((b, g, h, 576)).astype(F32)
    o, lse = decode(q[..., :512], q[..., 512:], pages, table, kv_bounds=bounds)
    ro, rlse = dense_decode(q, gather_rows(pages, table), bounds)
    o, lse = np.asarray(o), np.asarray(lse)
    assert np.all(np.isfinite(o))
    np.testing.assert_allclose(o, ro, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lse, rlse, rtol=1e-5, atol=1e-5)       # -inf == -inf on bound 0
    assert np.all(lse[0, 0] == -np.inf) and np.all(o[0, 0] == 0)


# -- R2: bounds that differ from the implicit causal bound ---------------------------------------
# Examples A (p0=6) and B (p0=2), cp=2, P=4, G=4 (HELIX_SEMANTICS.md §2.5, §2.6).
R2_POS = np.array([[6, 7, 8, 9], [2, 3, 4, 5]])
R2_BOUNDS = {0: [[4, 4, 5, 6], [3, 4, 4, 4]], 1: [[3, 4, 4, 4], [0, 0, 1, 2]]}


@pytest.mark.parametrize("fmt", FORMATS)
def test_r2_bounds_change_the_result_exactly_as_the_reference(fmt, rng):
    mesh = make_cp_mesh(2)
    kv = rng.standard_normal((2, 16, 576)).astype(F32)
    q = rng.standard_normal((2, 4, 4, 576)).astype(F32)
    cache = HelixMLACache.from_global(kv[..., :512], kv[..., 512:], R2_POS[:, -1] + 1, mesh=mesh,
                                      page_size=4, max_len=16, kv_dtype=fmt)
    for r in (0, 1):
        pages, table = cache.rank_pages(r)
        bounds = np.asarray(ledger.kv_bounds(R2_POS, r, page_size=4, cp_size=2))
        np.testing.assert_array_equal(bounds, R2_BOUNDS[r])
        k = bounds[:, -1:]
        implicit = np.maximum(k - 3 + np.arange(4), 0)           # K-(G-1)+j, the R2 bug
        rows = gather_rows(pages, table)
        outs = {}
        for name, bd in (("true", bounds), ("implicit", implicit)):
            o, _ = decode(q[..., :512], q[..., 512:], pages, table, kv_bounds=bd)
            outs[name] = np.asarray(o)
            np.testing.assert_allclose(outs[name], dense_decode(q, rows, bd)[0], rtol=1e-4, atol=1e-5)
        differ = bounds != implicit
        assert differ.any()
        gap = np.abs(outs["true"] - outs["implicit"]).max(axis=(-1, -2))
        assert np.all(gap[differ] > 1e-3) and np.all(gap[~differ] == 0)


# -- R3: RoPE from the global position, page from the local slot ---------------------------------
def rope(x, pos, theta=10000.0):
    """Rotate-half RoPE of ``x [..., 64]`` at integer positions ``pos [...]`` (float32)."""
    half = x.shape[-1] // 2
    ang = np.asarray(pos, np.float64)[..., None] * theta ** (-np.arange(half) / half)
    c, s = np.cos(ang), np.sin(ang)
    x1, x2 = x[..., :half].astype(np.float64), x[..., half:].astype(np.float64)
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1).astype(F32)


@pytest.mark.parametrize("fmt", FORMATS)
def test_r3_rope_global_position_page_from_local_slot(fmt, rng):
    mesh = make_cp_mesh(2)
    p0, g, p = 126, 4, 64                                    # example C: positions 126..129
    kv = rng.standard_normal((1, p0, 576)).astype(F32)
    cache = HelixMLACache.from_global(kv[..., :512], kv[..., 512:], np.array([p0]), mesh=mesh,
                                      page_size=p, max_len=256, kv_dtype=fmt, shuffle_pages=7,
                                      num_pages=5)
    pos = p0 + np.arange(g)[None]
    c_new = rng.standard_normal((1, g, 512)).astype(F32)
    k_pe = rng.standard_normal((1, g, 64)).astype(F32)
    k_new = rope(k_pe, pos)
    q = rng.standard_normal((1, g, 2, 576)).astype(F32)
    out, _, cache = helix_mla_attention(cache, q[..., :512], q[..., 512:], c_new, k_new, pos, softmax_scale=SCALE)
    s = float(np.asarray(cache.scales[-1])[0])
    # End to end on this split group too: equals causal attention over the dequantized global KV.
    kv_all = np.concatenate([kv, np.concatenate([c_new, k_new], -1)], 1)
    np.testing.assert_allclose(np.asarray(out), causal(q, np_roundtrip(fmt, kv_all, s), pos), rtol=1e-4, atol=1e-5)
    # Rank 0 stores global 128, 129 at local slots 64, 65: its local page 1, offsets 0, 1.
    pages0, table0 = cache.rank_pages(0)
    page = int(np.asarray(table0)[0, 1])
    stored = np_dequant_pages(type(pages0)(*[x[page, :2] if x.ndim == 3 else x for x in pages0]))
    np.testing.assert_array_equal(stored[1], np_roundtrip(fmt, k_new[0, 2:], s))
    np.testing.assert_array_equal(stored[0], np_roundtrip(fmt, c_new[0, 2:], s))
    wrong = np_roundtrip(fmt, rope(k_pe[0, 2:], np.array([64, 65])), s)     # RoPE at the local slot
    assert np.abs(stored[1] - wrong).max() > 0.1
    # Rank 1 stores global 126, 127 at local slots 62, 63: its local page 0, offsets 62, 63.
    pages1, table1 = cache.rank_pages(1)
    page = int(np.asarray(table1)[0, 0])
    stored = np_dequant_pages(type(pages1)(*[x[page, 62:64] if x.ndim == 3 else x for x in pages1]))
    np.testing.assert_array_equal(stored[1], np_roundtrip(fmt, k_new[0, :2], s))
    lat, rp = cache.to_global(130)
    np.testing.assert_array_equal(rp[0, p0:], np_roundtrip(fmt, k_new[0], s))


# -- Helix end to end ------------------------------------------------------------------------------
def _helix_case(fmt, rng, cp, page_size, lens, g, h, max_len):
    mesh = make_cp_mesh(cp)
    b = len(lens)
    kv = rng.standard_normal((b, max_len, 576)).astype(F32)
    q = rng.standard_normal((b, g, h, 576)).astype(F32)
    pos = np.asarray(lens)[:, None] + np.arange(g)
    cache = HelixMLACache.from_global(kv[..., :512], kv[..., 512:], np.asarray(lens), mesh=mesh,
                                      page_size=page_size, max_len=max_len, kv_dtype=fmt, shuffle_pages=1)
    new = kv[np.arange(b)[:, None], pos]
    out, lse, cache2 = helix_mla_attention(cache, q[..., :512], q[..., 512:], new[..., :512], new[..., 512:],
                                           pos, softmax_scale=SCALE)
    s = float(np.asarray(cache.scales[-1])[0])
    return kv, q, pos, np.asarray(out), np.asarray(lse), cache2, s


@pytest.mark.parametrize("fmt", FORMATS)
def test_helix_attention_on_quantized_cache_vs_float64(fmt, rng):
    cp, page_size, lens, g = 8, 4, [6, 2, 45], 4     # groups straddle ranks; example A/B starts
    kv, q, pos, out, lse, cache2, s = _helix_case(fmt, rng, cp, page_size, lens, g, h=8, max_len=64)
    kv_q = np_roundtrip(fmt, kv, s)                        # the KV the quantized cache represents
    ref = causal(q, kv_q, pos)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    owners = np.asarray(ledger.owner(pos, page_size=page_size, cp_size=cp))
    assert any(len(set(r)) > 1 for r in owners.tolist())    # some group straddles ranks
    # Appending == quantizing the final cache: every stored field equals from_global of the full KV.
    b = len(lens)
    full = HelixMLACache.from_global(kv[..., :512], kv[..., 512:], pos[:, -1] + 1, mesh=cache2.mesh,
                                     page_size=page_size, max_len=64, kv_dtype=fmt, kv_scale=s)
    got, want = cache2.to_global(64, raw=True), full.to_global(64, raw=True)
    for field, x, y in zip(got._fields, got, want):
        if x.ndim == 3:
            for i in range(b):
                n = pos[i, -1] + 1
                np.testing.assert_array_equal(np.asarray(x[i, :n]).view(np.uint8),
                                              np.asarray(y[i, :n]).view(np.uint8), err_msg=field)


# -- error budget vs the unquantized reference ---------------------------------------------------
# Per-(token, head) relative L2 error of the decode output on a quantized cache vs the float64
# decode of the unquantized KV; N(0,1) data, L=512 local rows, H=16, data-derived scales.
# Measured (3 seeds): fp8_e4m3 mean 0.046 / max 0.090, nvfp4 mean 0.16 / max 0.46.
BUDGET = {"fp8_e4m3": (0.07, 0.15), "nvfp4": (0.25, 0.7)}
BUDGET_BOUNDS = np.array([[509, 510, 511, 512], [100, 101, 102, 103]], np.int32)   # [B=2, G<=4] of the budget data


def rel_error_vs_unquantized(o, q, kv_rows, bounds):
    """Per-(token, head) relative L2 error of decode output ``o`` against the float64 decode of the unquantized
    ``kv_rows [B, L, 576]`` for queries ``q [B, G, H, 576]``."""
    ref, _ = dense_decode(q, kv_rows, bounds)
    return np.linalg.norm(np.asarray(o, np.float64) - ref, axis=-1) / np.linalg.norm(ref, axis=-1)


@pytest.mark.parametrize("fmt", FORMATS)
def test_error_budget_vs_unquantized(fmt, rng):
    b, g, h, p, npp = 2, 4, 16, 64, 8
    kv = rng.standard_normal((b * npp, p, 576)).astype(F32)
    s = (quant.fp8_scale_from_amax if fmt == "fp8_e4m3" else quant.nvfp4_global_scale_from_amax)(np.abs(kv).max())
    if fmt == "fp8_e4m3":
        qkv = quantize_fp8(kv, s)
        pages = FP8Pages(qkv[..., :512], qkv[..., 512:], jnp.reshape(s, (1,)))
    else:
        c, csf = quantize_nvfp4(kv[..., :512], s)
        k, ksf = quantize_nvfp4(kv[..., 512:], s)
        pages = NVFP4Pages(c, k, csf, ksf, jnp.reshape(s, (1,)))
    table = np.arange(b * npp, dtype=np.int32).reshape(b, npp)
    bounds = BUDGET_BOUNDS
    q = rng.standard_normal((b, g, h, 576)).astype(F32)
    o, _ = decode(q[..., :512], q[..., 512:], pages, table, kv_bounds=bounds)
    rel = rel_error_vs_unquantized(o, q, kv.reshape(b, npp * p, 576), bounds)
    print(f"\n{fmt}: decode rel error vs unquantized mean {rel.mean():.4f} max {rel.max():.4f} "
          f"({quant.bytes_per_token(fmt)} B/token vs {quant.bytes_per_token('bf16')} for bf16)")
    mean_budget, max_budget = BUDGET[fmt]
    assert rel.mean() <= mean_budget and rel.max() <= max_budget
    assert rel.mean() > 1e-3                   # the quantization really happened


# -- dispatch: backend KV-format capability ----------------------------------------------------
def _fake_backend(**kw):
    return types.SimpleNamespace(availability=lambda platform: (True, ""), preferred=lambda platform: True,
                                 mla_decode=lambda *a: pytest.fail("bf16 kernel called on quantized pages"), **kw)


def test_backend_without_format_support_is_refused_or_skipped(monkeypatch, rng):
    pages = quantized_pool("fp8_e4m3", rng, 4, 4, 20.0)
    table = np.array([[2, 0]], np.int32)
    q = rng.standard_normal((1, 2, 2, 576)).astype(F32)
    args = (q[..., :512], q[..., 512:], pages, table)
    kw = dict(kv_bounds=np.array([[3, 7]]), softmax_scale=SCALE)
    want = mla_decode(*args, **kw, implementation="reference")
    fake = _fake_backend()
    monkeypatch.setattr(api, "_backend_module", lambda name: fake)
    assert api.supported_kv_dtypes(fake) == ("bf16",)
    with pytest.raises(ValueError, match="does not support 'fp8_e4m3'"):
        mla_decode(*args, **kw, implementation="ffi")
    got = mla_decode(*args, **kw)                                  # auto: falls back to reference
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    calls = []
    opted_in = _fake_backend(SUPPORTED_KV_DTYPES=("bf16", "fp8_e4m3"),
                             mla_decode_quantized=lambda *a: calls.append(a) or want)
    monkeypatch.setattr(api, "_backend_module", lambda name: opted_in)
    mla_decode(*args, **kw, implementation="pallas")
    mla_decode(*args, **kw)
    assert len(calls) == 2 and all(isinstance(c[2], FP8Pages) for c in calls)


def test_bad_inputs_raise(rng):
    mesh = make_cp_mesh(2)
    kv = rng.standard_normal((1, 8, 576)).astype(F32)
    mk = lambda **kw: HelixMLACache.from_global(kv[..., :512], kv[..., 512:], [8], mesh=mesh, page_size=4,
                                                max_len=8, **kw)
    with pytest.raises(ValueError, match="kv_dtype"):
        mk(kv_dtype="int8")
    with pytest.raises(ValueError, match="kv_scale"):
        mk(kv_scale=2.0)
    with pytest.raises(ValueError, match="kv_scale"):
        mk(kv_dtype="fp8_e4m3", kv_scale=-1.0)
    cache = mk(kv_dtype="nvfp4")
    with pytest.raises(ValueError, match="with_pages"):
        cache.with_pages(MLAPages(cache.c_latent, cache.k_rope))
    bad = FP8Pages(jnp.zeros((2, 4, 512)), jnp.zeros((2, 4, 64)), jnp.ones((1,)))
    q = jnp.zeros((1, 1, 1, 576))
    with pytest.raises(ValueError, match="pages.c_latent"):
        mla_decode(q[..., :512], q[..., 512:], bad, jnp.zeros((1, 1), jnp.int32), kv_bounds=jnp.ones((1, 1), jnp.int32),
                   softmax_scale=SCALE)
