"""Contract tests of the Helix exchange targets (sanitize+pack, combine) and the exchange under shard_map.

Every backend (jnp reference, FFI) is checked against independent numpy oracles: the payload bits
against a numpy-built payload, the combine against float64 math, the whole exchange against dense
attention over the union of the ranks' KV. The FFI backend must not skip: CI builds ffi/ first.
GPU variants (``-m gpu``) run the same checks with the CUDA handlers.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from helix_jax.mesh import make_cp_mesh
from helix_jax.ops import exchange as ex

IMPLS = ("reference", "ffi")
DTYPES = (jnp.float32, jnp.bfloat16)
D = 512


def _np_dtype(dtype):
    return np.float32 if jnp.dtype(dtype) == jnp.float32 else ml_dtypes.bfloat16


def _uint(dtype):
    return np.uint32 if jnp.dtype(dtype).itemsize == 4 else np.uint16


# ----------------------------------------------------------------------------------------- oracles
def oracle_payload(o, lse, mask, cp):
    """numpy payload: o [T,H,D] (np bf16/f32), lse [T,H] f32, mask [T] -> uint [cp,T,Hc,W]."""
    t, h, d = o.shape
    u = _uint(o.dtype)
    pad = 16 // o.dtype.itemsize
    rows = np.zeros((t, h, d + pad), u)
    ob = o.view(u).copy()
    ob[mask] = 0
    rows[..., :d] = ob
    l = lse.astype(np.float32).copy()
    l[mask] = -np.inf
    lb = l.reshape(t, h, 1).view(u)  # 1 uint32 or 2 uint16 (little-endian halves)
    rows[..., d:d + lb.shape[-1]] = lb
    hc = h // cp
    return rows.reshape(t, cp, hc, d + pad).transpose(1, 0, 2, 3)


def oracle_combine(o, lse):
    """float64 LSE combine: o [cp,T,Hc,D], lse [cp,T,Hc] -> ([T,Hc,D], [T,Hc]); all-empty -> 0, -inf."""
    o = np.asarray(o, np.float64)
    lse = np.asarray(lse, np.float64)
    m = lse.max(0)
    safe = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(lse - safe)
    tot = w.sum(0)
    out = np.zeros(o.shape[1:])
    for s in range(o.shape[0]):
        live = w[s] > 0
        out[live] += (w[s][live] / tot[live])[:, None] * o[s][live]
    return out, np.where(tot > 0, safe + np.log(np.where(tot > 0, tot, 1.0)), -np.inf)


def _partials(rng, t, h, d, dtype, *, empty=None):
    """Random partial outputs [T,H,D] / LSE [T,H]; rows where ``empty`` [T] is set hold NaN garbage."""
    o = rng.standard_normal((t, h, d)).astype(_np_dtype(dtype))
    lse = (3.0 * rng.standard_normal((t, h))).astype(np.float32)
    if empty is not None:
        o[empty] = np.nan
        lse[empty] = np.nan
    return o, lse


# ------------------------------------------------------------------------------------ pack contract
def _check_pack(impl, dtype, rng, t, h, cp, mask):
    o, lse = _partials(rng, t, h, D, dtype, empty=mask)   # NaN garbage in the masked rows (R11)
    got = ex.sanitize_pack(jnp.asarray(o), jnp.asarray(lse), jnp.asarray(mask), cp_size=cp, implementation=impl)
    want = oracle_payload(o, lse, mask, cp)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("t,h,cp", [(5, 6, 2), (3, 15, 3), (4, 8, 1)])   # Hc = 3, 5 odd (R13); cp = 1
def test_sanitize_pack_bits(impl, dtype, t, h, cp, rng):
    mask = rng.random(t) < 0.4
    mask[0], mask[-1] = True, False
    _check_pack(impl, dtype, rng, t, h, cp, mask)


@pytest.mark.parametrize("impl", IMPLS)
def test_sanitize_pack_no_mask_is_pass_through(impl, rng):
    o, lse = _partials(rng, 3, 4, D, jnp.bfloat16)
    got = ex.sanitize_pack(jnp.asarray(o), jnp.asarray(lse), None, cp_size=2, implementation=impl)
    np.testing.assert_array_equal(np.asarray(got), oracle_payload(o, lse, np.zeros(3, bool), 2))


# --------------------------------------------------------------------------------- combine contract
def _received_payload(rng, cp, t, hc, dtype, *, empty_src=None, all_empty_rows=()):
    """A received payload [cp,T,Hc,W] with empty partials: (-inf LSE, NaN garbage data)."""
    o, lse = _partials(rng, cp * t, hc, D, dtype)
    o, lse = o.reshape(cp, t, hc, D), lse.reshape(cp, t, hc)
    empty = rng.random((cp, t, hc)) < 0.25
    if empty_src is not None:
        empty[empty_src] = True                     # a whole rank with no KV (R9)
    # Every row not meant to be all-empty keeps at least one live source (never the empty rank).
    live_choices = [s for s in range(cp) if s != empty_src] or [0]
    keep = rng.choice(live_choices, size=(t, hc))
    empty[keep, np.arange(t)[:, None], np.arange(hc)[None, :]] = False
    for r in all_empty_rows:
        empty[:, r] = True
    o[empty] = np.nan                               # garbage that must never leak (0 * NaN)
    lse[empty] = -np.inf
    pad = 16 // o.dtype.itemsize
    u = _uint(o.dtype)
    payload = np.zeros((cp, t, hc, D + pad), u)
    payload[..., :D] = o.view(u)
    lb = lse.reshape(cp, t, hc, 1).view(u)
    payload[..., D:D + lb.shape[-1]] = lb
    o_clean = np.where(empty[..., None], 0.0, o.astype(np.float64))
    return payload, o_clean, lse


def _poisoned_call(fn, poison_args, args):
    """Run ``fn`` once on NaN inputs and free its outputs so the real call's buffers likely reuse them."""
    junk = fn(*poison_args)
    jax.block_until_ready(junk)
    for x in jax.tree.leaves(junk):
        x.delete()
    return fn(*args)


def _check_combine(impl, dtype, rng, cp, t, hc, **kw):
    payload, o64, lse = _received_payload(rng, cp, t, hc, dtype, **kw)
    fn = jax.jit(functools.partial(ex.combine_payload, dtype=dtype, implementation=impl))
    nan_payload = np.full_like(payload, 0xFFFF if payload.dtype == np.uint16 else 0x7FC00000)
    out, lse_out = _poisoned_call(fn, (jnp.asarray(nan_payload),), (jnp.asarray(payload),))
    want, want_lse = oracle_combine(o64, lse)
    assert out.dtype == jnp.dtype(dtype) and out.shape == (t, hc, D) and lse_out.dtype == jnp.float32
    out = np.asarray(out.astype(jnp.float32), np.float64)
    assert np.isfinite(out).all()
    tol = 1e-5 if jnp.dtype(dtype) == jnp.float32 else 1e-2
    np.testing.assert_allclose(out, want, atol=tol, rtol=tol)
    np.testing.assert_allclose(np.asarray(lse_out), want_lse, atol=1e-5, rtol=1e-5)
    return out, np.asarray(lse_out)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cp,t,hc", [(2, 5, 3), (4, 3, 5), (1, 4, 2)])
def test_combine_float64_oracle(impl, dtype, cp, t, hc, rng):
    _check_combine(impl, dtype, rng, cp, t, hc, empty_src=cp - 1 if cp > 1 else None)


@pytest.mark.parametrize("impl", IMPLS)
def test_combine_all_empty_rows_give_zero_and_neg_inf(impl, rng):
    out, lse = _check_combine(impl, jnp.bfloat16, rng, 3, 4, 3, all_empty_rows=(1, 3))
    assert (out[[1, 3]] == 0).all() and np.isneginf(lse[[1, 3]]).all()
    assert np.isfinite(lse[[0, 2]]).all()


@pytest.mark.parametrize("impl", IMPLS)
def test_combine_empty_rank_equals_combine_over_the_others(impl, rng):
    """R9: cp=4 with rank 3 empty == the combine over ranks 0..2."""
    payload, _, _ = _received_payload(rng, 4, 3, 2, jnp.float32, empty_src=3)
    p = jnp.asarray(payload)
    a = ex.combine_payload(p, dtype=jnp.float32, implementation=impl)
    b = ex.combine_payload(p[:3], dtype=jnp.float32, implementation=impl)
    np.testing.assert_allclose(np.asarray(a[0]), np.asarray(b[0]), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(a[1]), np.asarray(b[1]), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------- the exchange across a cp mesh
def _attention_partials(rng, cp, t, h, dtype, *, empty_rank_tokens):
    """Per-rank partials of attention over disjoint random KV shards, plus the dense float64 answer.

    Rank r holds ``n_r`` random values with random logits for each (token, head); in
    ``empty_rank_tokens`` tokens the last rank holds none (mask True, garbage partial).
    Returns o [cp,T,H,D], lse [cp,T,H], mask [cp,T], want [T,H,D].
    """
    n = rng.integers(1, 5, size=cp)
    logits = [rng.standard_normal((t, h, k)) * 2 for k in n]
    vals = [rng.standard_normal((k, D)) for k in n]
    mask = np.zeros((cp, t), bool)
    mask[cp - 1, list(empty_rank_tokens)] = True
    o = np.empty((cp, t, h, D))
    lse = np.empty((cp, t, h))
    for r in range(cp):
        m = logits[r].max(-1, keepdims=True)
        e = np.exp(logits[r] - m)
        o[r] = (e / e.sum(-1, keepdims=True)) @ vals[r]
        lse[r] = (m[..., 0] + np.log(e.sum(-1)))
    o[mask] = np.nan
    lse[mask] = np.nan
    # dense: every token sees the union of the shards, minus the last rank's where masked
    want = np.empty((t, h, D))
    for i in range(t):
        keep = [r for r in range(cp) if not mask[r, i]]
        lg = np.concatenate([logits[r][i] for r in keep], -1)
        v = np.concatenate([vals[r] for r in keep], 0)
        w = np.exp(lg - lg.max(-1, keepdims=True))
        want[i] = (w / w.sum(-1, keepdims=True)) @ v
    return o.astype(_np_dtype(dtype)), lse.astype(np.float32), mask, want


def _run_exchange(impl, dtype, rng, cp, b, g, h, devices=None, transport=None):
    t = b * g
    o, lse, mask, want = _attention_partials(rng, cp, t, h, dtype, empty_rank_tokens=range(0, t, 2))
    mesh = make_cp_mesh(cp, devices=devices)
    groups = ex.peer_groups(mesh, "cp")

    def body(o, lse, mask):
        out, l = ex.exchange(o[0], lse[0], mask[0], axis_name="cp", cp_size=cp, implementation=impl,
                             transport=transport, peer_groups=groups)
        return out, l

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("cp"), P("cp"), P("cp")),
                              out_specs=(P(None, None, "cp"), P(None, None, "cp")), check_vma=False))
    out, l = f(jnp.asarray(o.reshape(cp, b, g, h, D)), jnp.asarray(lse.reshape(cp, b, g, h)),
               jnp.asarray(mask.reshape(cp, b, g)))
    out = np.asarray(out.astype(jnp.float32), np.float64).reshape(t, h, D)
    assert np.isfinite(out).all() and np.isfinite(np.asarray(l)).all()
    tol = 1e-5 if jnp.dtype(dtype) == jnp.float32 else 2e-2
    np.testing.assert_allclose(out, want, atol=tol, rtol=tol)
    return out


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype,cp,h", [(jnp.float32, 2, 6), (jnp.bfloat16, 4, 8), (jnp.float32, 3, 9)])
def test_exchange_matches_dense_attention(impl, dtype, cp, h, rng):
    _run_exchange(impl, dtype, rng, cp, 2, 3, h)


def test_exchange_backends_agree_and_helix_module_uses_it(rng):
    from helix_jax import exchange as hx
    o = jnp.asarray(rng.standard_normal((2, 2, 4, D)), jnp.float32)
    lse = jnp.asarray(rng.standard_normal((2, 2, 4)), jnp.float32)
    mask = jnp.asarray([[True, False], [False, False]])
    mesh = make_cp_mesh(2)
    outs = []
    for fn in (functools.partial(hx.exchange_and_combine, implementation="ffi"),
               functools.partial(hx.exchange_and_combine, implementation="reference"),
               hx.exchange_and_combine_unpacked):
        g = jax.jit(jax.shard_map(lambda a, b, c: fn(a, b, c, axis_name="cp", cp_size=2), mesh=mesh,
                                  in_specs=(P(), P(), P()), out_specs=(P(None, None, "cp"), P(None, None, "cp")),
                                  check_vma=False))
        outs.append(np.asarray(g(o, lse, mask)[0]))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outs[0], outs[2], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cp,h,lens,max_len,transport", [(2, 4, (5, 30), 64, None), (4, 8, (6, 70), 128, "peer")])
def test_helix_mla_attention_ffi_matches_dense(cp, h, lens, max_len, transport, rng):
    """helix_mla_attention(implementation='ffi') (FFI decode + FFI exchange, on CPU the collective transport by
    default, or the peer exchange) vs float64 dense; groups straddle a page / rank boundary."""
    import helix_jax as hj
    from helix_jax.cli.attention_check import dense_reference
    b, g, page = 2, 4 if cp == 2 else 3, 8
    mesh = hj.make_cp_mesh(cp)
    lens = np.array(lens)
    kv = rng.standard_normal((b, max_len, 576)).astype(np.float32)
    q = rng.standard_normal((b, g, h, 576)).astype(np.float32)
    pos = lens[:, None] + np.arange(g)
    cache = hj.HelixMLACache.from_global(jnp.asarray(kv[..., :512]), jnp.asarray(kv[..., 512:]), lens, mesh=mesh,
                                         page_size=page, max_len=max_len)
    new = kv[np.arange(b)[:, None], pos]
    scale = 1 / np.sqrt(192.0)
    out, lse, _ = hj.helix_mla_attention(cache, q[..., :512], q[..., 512:], new[..., :512], new[..., 512:], pos,
                                         softmax_scale=scale, implementation="ffi", exchange_transport=transport)
    want = dense_reference(q, kv, pos, scale)
    np.testing.assert_allclose(np.asarray(out, np.float64), want, atol=2e-5, rtol=2e-5)


# ------------------------------------------------------------------------------- peer transport
def _peer_vs_collective(mesh, dtype, rng, t, h, mask_rank=None, calls=1):
    """Peer exchange vs the collective one (ffi pack -> lax.all_to_all -> ffi combine) and vs the jnp
    reference on ``mesh`` (axis ``cp``, maybe more axes): outputs and LSEs must be bit-identical to
    the collective path's, and equal to the reference. ``calls`` exchanges per program (a fori_loop),
    each on different data, exercise the per-run call counter and (on GPU) both receive buffers."""
    cp = mesh.shape["cp"]
    groups = ex.peer_groups(mesh, "cp")
    lead = tuple(mesh.shape[a] for a in mesh.axis_names)
    o = rng.standard_normal(lead + (t, h, D)).astype(_np_dtype(dtype))
    lse = rng.standard_normal(lead + (t, h)).astype(np.float32)
    mask = rng.random(lead + (t,)) < 0.3
    if mask_rank is not None:                  # an empty rank (R9): every token masked there
        mask[(slice(None),) * mesh.axis_names.index("cp") + (mask_rank,)] = True
    o[mask] = np.nan                           # NaN garbage in masked rows (R11)
    lse[mask] = np.nan
    spec = P(*mesh.axis_names)
    n = len(lead)

    def body(o, lse, mask):
        o, lse, mask = o.reshape(o.shape[n:]), lse.reshape(lse.shape[n:]), mask.reshape(mask.shape[n:])

        def one(i, acc):
            oi = o * jnp.asarray(i + 1, o.dtype)   # different data per call, same NaN rows
            a = ex.exchange(oi[None], lse[None] + i, mask[None], axis_name="cp", cp_size=cp, implementation="ffi",
                            transport="peer", peer_groups=groups)
            b = ex.exchange(oi[None], lse[None] + i, mask[None], axis_name="cp", cp_size=cp, implementation="ffi",
                            transport="collective")
            r = ex.exchange(oi[None], lse[None] + i, mask[None], axis_name="cp", cp_size=cp,
                            implementation="reference", transport="collective")
            close = jnp.all(jnp.abs(a[0].astype(jnp.float32) - r[0].astype(jnp.float32))
                            <= 1e-2 * (1 + jnp.abs(r[0].astype(jnp.float32))))
            same = (jnp.all(a[0] == b[0]) & jnp.all(a[1] == b[1]) & close
                    & jnp.all(jnp.isfinite(a[0].astype(jnp.float32))))
            return acc & same

        ok = jax.lax.fori_loop(0, calls, one, jnp.bool_(True))
        return ok.reshape((1,) * n)

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False))
    ok = np.asarray(f(jnp.asarray(o), jnp.asarray(lse), jnp.asarray(mask)))
    assert ok.all(), f"peer exchange differs from the collective one on ranks {np.argwhere(~ok).tolist()}"


@pytest.mark.parametrize("dtype,cp,h", [(jnp.bfloat16, 2, 8), (jnp.float32, 4, 12), (jnp.bfloat16, 8, 8)])
def test_peer_transport_equals_all_to_all(dtype, cp, h, rng):
    """helix_exchange_peer (CPU handler: the same rendezvous as on GPU) is bit-identical to pack ->
    lax.all_to_all -> combine, odd head groups (R13: Hc=3), an empty rank (R9), NaN rows (R11)."""
    _peer_vs_collective(make_cp_mesh(cp), dtype, rng, 5, h, mask_rank=cp - 1)


def test_peer_transport_many_calls_and_groups(rng):
    """A 2-D mesh (4 cp groups of 2 devices, cp not the leading axis) and 3 exchanges per program,
    run twice: groups and calls never mix."""
    devs = np.array(jax.devices()[:8]).reshape(2, 4).T          # [dp=4, cp=2], cp pairs (0,4) (1,5) ...
    mesh = jax.sharding.Mesh(devs, ("dp", "cp"))
    assert ex.peer_groups(mesh, "cp") == ((0, 4), (1, 5), (2, 6), (3, 7))
    for _ in range(2):
        _peer_vs_collective(mesh, jnp.bfloat16, rng, 3, 4, calls=3)


def test_transport_selection_and_errors():
    mesh = make_cp_mesh(2)
    groups = ex.peer_groups(mesh, "cp")
    assert groups == ((0, 1),)
    assert ex.resolve_transport(None, implementation="ffi", cp_size=2, peer_groups=groups, platform="cpu") == "collective"
    assert ex.resolve_transport("peer", implementation="ffi", cp_size=2, peer_groups=groups, platform="cpu") == "peer"
    assert ex.resolve_transport(None, implementation="reference", cp_size=2, peer_groups=groups,
                                platform="gpu") == "collective"
    with pytest.raises(ValueError, match="transport must be one of"):
        ex.resolve_transport("nccl", implementation="ffi", cp_size=2, peer_groups=groups)
    with pytest.raises(ValueError, match="part of the ffi backend"):
        ex.resolve_transport("peer", implementation="reference", cp_size=2, peer_groups=groups)
    with pytest.raises(ValueError, match="needs peer_groups"):
        ex.resolve_transport("peer", implementation="ffi", cp_size=2, peer_groups=None)
    with pytest.raises(ValueError, match=r"\[num_groups, cp=4\]"):
        ex.resolve_transport("peer", implementation="ffi", cp_size=4, peer_groups=groups)
    with pytest.raises(ValueError, match="twice"):
        ex.resolve_transport("peer", implementation="ffi", cp_size=2, peer_groups=((0, 0),))
    with pytest.raises(ValueError, match="not an axis"):
        ex.peer_groups(mesh, "tp")


def test_peer_transport_cuda_lowering_emits_custom_call():
    """The CUDA lowering (no GPU needed) emits helix_exchange_peer with the group table attributes."""
    from helix_jax.ops.exchange import ffi as xffi

    def f(o, lse, mask):
        return xffi.exchange_peer(o, lse, mask, peer_groups=((0, 1), (2, 3)))

    args = (jnp.zeros((3, 4, D), jnp.bfloat16), jnp.zeros((3, 4), jnp.float32), jnp.zeros((3,), bool))
    text = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    lines = [ln for ln in text.splitlines() if "custom_call" in ln and "helix_exchange_peer" in ln]
    assert len(lines) == 1, text
    line = lines[0]
    assert "cp = 2 : i64" in line and "groups = dense<[0, 1, 2, 3]> : tensor<4xi64>" in line, line
    assert "timeout_s = 1.200000e+02 : f64" in line, line
    assert "-> (tensor<3x2x512xbf16>, tensor<3x2xf32>)" in line, line


def test_transport_without_gpu_peer_access_falls_back(monkeypatch):
    """GPUs that cannot reach each other's memory: auto picks the collective transport, an explicit
    'peer' raises naming the problem (selection logic only; the CUDA query is replaced)."""
    from helix_jax import _ffi
    from helix_jax.ops.exchange import ffi as xffi
    monkeypatch.setattr(_ffi, "target_availability", lambda platform, **kw: (True, ""))
    monkeypatch.setattr(xffi, "_peer_accessible", lambda ordinals: ordinals != (0, 1))
    assert ex.resolve_transport(None, implementation="ffi", cp_size=2, peer_groups=((2, 3),), platform="gpu") == "peer"
    assert ex.resolve_transport(None, implementation="ffi", cp_size=2, peer_groups=((0, 1),),
                                platform="gpu") == "collective"
    with pytest.raises(ValueError, match="cannot access each other's memory"):
        ex.resolve_transport("peer", implementation="ffi", cp_size=2, peer_groups=((0, 1),), platform="gpu")


def test_peer_transport_unknown_device_is_a_clear_error(rng):
    """Groups that do not name the running devices: an error naming the ordinal, never a hang."""
    mesh = make_cp_mesh(2)
    o = jnp.asarray(rng.standard_normal((2, 2, 4, D)), jnp.float32)
    lse = jnp.zeros((2, 2, 4), jnp.float32)

    def body(o, lse):
        return ex.exchange(o[0], lse[0], None, axis_name="cp", cp_size=2, implementation="ffi",
                           transport="peer", peer_groups=((5, 6),))[0]

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("cp"), P("cp")), out_specs=P("cp"), check_vma=False))
    # Both ranks run at once and neither device is in a group: whichever fails first names its own ordinal.
    with pytest.raises(Exception, match=r"device ordinal [01] is in none of the peer groups"):
        jax.block_until_ready(f(o, lse))


# ------------------------------------------------------------------------------------- bad input
def test_bad_input_raises_value_error(rng):
    o, lse = _partials(rng, 3, 4, D, jnp.float32)
    o, lse = jnp.asarray(o), jnp.asarray(lse)
    with pytest.raises(ValueError, match="divisible by cp_size"):
        ex.sanitize_pack(o, lse, None, cp_size=3)
    with pytest.raises(ValueError, match="lse must have shape"):
        ex.sanitize_pack(o, lse[:, :2], None, cp_size=2)
    with pytest.raises(ValueError, match="zero_kv_mask"):
        ex.sanitize_pack(o, lse, jnp.zeros(3, jnp.int32), cp_size=2)
    with pytest.raises(ValueError, match="bfloat16 or float32"):
        ex.sanitize_pack(o.astype(jnp.float16), lse, None, cp_size=2, implementation="ffi")
    with pytest.raises(ValueError, match="implementation must be"):
        ex.sanitize_pack(o, lse, None, cp_size=2, implementation="cuda")
    p = ex.sanitize_pack(o, lse, None, cp_size=2)
    with pytest.raises(ValueError, match="payload must be uint16"):
        ex.combine_payload(p, dtype=jnp.bfloat16)


def test_reference_is_cpu_default_and_ffi_is_available():
    assert ex.resolve(None, "cpu") == "reference"
    assert ex.resolve("ffi", "cpu") == "ffi"   # CI builds ffi/ before pytest: must not be missing


# ------------------------------------------------------------------------------------------- GPU
def _gpu_devices():
    devs = [d for d in jax.devices() if d.platform == "gpu"]
    assert devs, "this test needs a GPU (run on the device machine with -m gpu)"
    return devs


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_pack_and_combine_contract(dtype, rng):
    _gpu_devices()
    for t, h, cp in [(5, 6, 2), (3, 15, 3), (64, 128, 2)]:
        mask = rng.random(t) < 0.4
        mask[0] = True
        _check_pack("ffi", dtype, rng, t, h, cp, mask)
    for cp, t, hc in [(2, 5, 3), (4, 3, 5), (2, 512, 64)]:
        _check_combine("ffi", dtype, rng, cp, t, hc, empty_src=cp - 1)
    _check_combine("ffi", dtype, rng, 3, 4, 3, all_empty_rows=(1, 3))


@pytest.mark.gpu
def test_gpu_exchange_across_gpus(rng):
    devs = _gpu_devices()
    cp = 2 if len(devs) >= 2 else 1
    for dtype in DTYPES:
        for transport in ("collective", "peer"):
            _run_exchange("ffi", dtype, rng, cp, 4, 4, 16, devices=devs, transport=transport)


@pytest.mark.gpu
def test_gpu_peer_transport_equals_all_to_all(rng):
    """NVLink peer exchange vs pack + lax.all_to_all (NCCL) + combine, bit-identical, incl. T=512 x H=128,
    repeated calls (both receive buffers, and growing them)."""
    devs = _gpu_devices()
    assert len(devs) >= 2, "needs 2 GPUs"
    mesh = make_cp_mesh(2, devices=devs)
    groups = ex.peer_groups(mesh, "cp")
    assert ex.api._backend_module("ffi").peer_availability("gpu", groups) == (True, "")
    assert ex.resolve_transport(None, implementation="ffi", cp_size=2, peer_groups=groups) == "peer"  # the default
    for dtype, t, h, calls in [(jnp.bfloat16, 5, 6, 3), (jnp.float32, 3, 10, 2), (jnp.bfloat16, 512, 128, 2)]:
        _peer_vs_collective(mesh, dtype, rng, t, h, mask_rank=1, calls=calls)


def _helix_cp2_check(seed=0):
    """helix_mla_attention(implementation='ffi') in bf16 on 2 GPUs vs 1 GPU vs float64 dense; raises on mismatch."""
    import helix_jax as hj
    from helix_jax.cli.attention_check import dense_reference
    rng = np.random.default_rng(seed)
    devs = _gpu_devices()
    assert len(devs) >= 2, "needs 2 GPUs"
    b, g, h, page, max_len = 3, 4, 128, 64, 1024
    lens = np.array([62, 300, max_len - g])                # straddling groups, a full cache
    kv = jnp.asarray(rng.standard_normal((b, max_len, 576)), jnp.bfloat16)
    q = jnp.asarray(rng.standard_normal((b, g, h, 576)), jnp.bfloat16)
    pos = lens[:, None] + np.arange(g)
    new = kv[np.arange(b)[:, None], pos]
    scale = 1 / np.sqrt(192.0)
    outs = {}
    for cp in (1, 2):
        cache = hj.HelixMLACache.from_global(kv[..., :512], kv[..., 512:], lens, mesh=make_cp_mesh(cp, devices=devs),
                                             page_size=page, max_len=max_len)
        out, lse, _ = hj.helix_mla_attention(cache, q[..., :512], q[..., 512:], new[..., :512], new[..., 512:], pos,
                                             softmax_scale=scale, implementation="ffi")
        outs[cp] = np.asarray(out.astype(jnp.float32), np.float64)
        assert np.isfinite(outs[cp]).all() and np.isfinite(np.asarray(lse)).all()
    ref = dense_reference(np.asarray(q.astype(jnp.float32)), np.asarray(kv.astype(jnp.float32)), pos, scale)
    errs = {cp: float(np.linalg.norm(o - ref) / np.linalg.norm(ref)) for cp, o in outs.items()}
    errs["cp2_vs_cp1"] = float(np.linalg.norm(outs[2] - outs[1]) / np.linalg.norm(outs[1]))
    print("relative L2 errors:", errs)
    assert max(errs.values()) < 1e-2, errs


@pytest.mark.gpu
def test_gpu_helix_cp2_matches_cp1_and_float64():
    """Runs in a child process: a backend failing on one GPU makes XLA abort the whole process at the
    all-to-all rendezvous, which must fail this test, not take the pytest session down."""
    import os
    import pathlib
    import subprocess
    import sys
    _gpu_devices()
    root = str(pathlib.Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    r = subprocess.run([sys.executable, __file__, "--helix-cp2-check"], capture_output=True, text=True, timeout=240,
                       env=env)
    assert r.returncode == 0, f"exit {r.returncode}:\n{(r.stdout + r.stderr)[-4000:]}"


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--helix-cp2-check"]:
        _helix_cp2_check()
