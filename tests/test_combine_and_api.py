"""combine (§7, R9, R11, all-empty rows) and the mla_decode API's argument checks (R19)."""
import jax.numpy as jnp
import numpy as np
import pytest

import helix_jax as hj
from helix_jax.exchange import sanitize
from oracles import bounded_decode


def np_combine(o, lse, axis):
    o = np.moveaxis(np.asarray(o, np.float64), axis, 0)
    lse = np.moveaxis(np.asarray(lse, np.float64), axis, 0)
    z = np.exp(lse)                     # float64 partition functions (inputs are small)
    return (z[..., None] * np.nan_to_num(o)).sum(0) / z.sum(0)[..., None], np.log(z.sum(0))


def test_combine_matches_float64(rng):
    o = rng.standard_normal((3, 5, 4, 512)).astype(np.float32)
    lse = rng.standard_normal((3, 5, 4)).astype(np.float32) * 3
    out, l = hj.combine(o, lse, axis=1)
    ref_o, ref_l = np_combine(o, lse, 1)
    np.testing.assert_allclose(out, ref_o, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(l, ref_l, rtol=1e-6, atol=1e-6)
    out2, _ = hj.combine(np.moveaxis(o, 1, 0), np.moveaxis(lse, 1, 0), axis=-3)
    np.testing.assert_allclose(out2, out, rtol=1e-6)


def test_combine_is_exact_split_of_softmax(rng):
    # Splitting one softmax over disjoint key sets and combining gives the whole softmax.
    q = rng.standard_normal((1, 1, 2, 576))
    kv = rng.standard_normal((1, 40, 576))
    parts = [kv[:, :13], kv[:, 13:14], kv[:, 14:]]
    os, ls = [], []
    for p in parts:
        o, l = bounded_decode(q, p, np.array([[p.shape[1]]]), 0.1)
        os.append(o)
        ls.append(l)
    out, lse = hj.combine(np.stack(os, 0).astype(np.float32), np.stack(ls, 0).astype(np.float32), axis=0)
    full_o, full_l = bounded_decode(q, kv, np.array([[40]]), 0.1)
    np.testing.assert_allclose(out, full_o, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse, full_l, rtol=1e-6)


def test_empty_rank_R9(rng):
    o = rng.standard_normal((4, 2, 3, 512)).astype(np.float32)
    lse = rng.standard_normal((4, 2, 3)).astype(np.float32)
    lse[3] = -np.inf
    o[3] = 0.0
    out, l = hj.combine(o, lse, axis=0)
    out3, l3 = hj.combine(o[:3], lse[:3], axis=0)
    np.testing.assert_allclose(out, out3, rtol=1e-6)
    np.testing.assert_allclose(l, l3, rtol=1e-6)
    assert np.isfinite(np.asarray(out)).all()


def test_all_empty_rows_give_zero_not_nan(rng):
    o = np.full((3, 2, 512), np.nan, np.float32)
    lse = np.full((3, 2), -np.inf, np.float32)
    out, l = hj.combine(o, lse, axis=0)
    assert (np.asarray(out) == 0).all() and np.isneginf(np.asarray(l)).all()


def test_empty_partial_with_garbage_contributes_nothing(rng):
    o = rng.standard_normal((2, 1, 512)).astype(np.float32)
    lse = np.array([[0.5], [-np.inf]], np.float32)
    o[1] = np.nan
    out, _ = hj.combine(o, lse, axis=0)
    np.testing.assert_allclose(out, o[0], rtol=1e-6)


def test_sanitize_R11(rng):
    o = rng.standard_normal((2, 3, 4, 512)).astype(np.float32)
    lse = rng.standard_normal((2, 3, 4)).astype(np.float32)
    o[0, 1] = np.nan
    lse[0, 1] = np.nan
    mask = np.zeros((2, 3), bool)
    mask[0, 1] = True
    so, sl = sanitize(jnp.asarray(o), jnp.asarray(lse), mask)
    so, sl = np.asarray(so), np.asarray(sl)
    assert (so[0, 1] == 0).all() and np.isneginf(sl[0, 1]).all()
    keep = ~mask
    np.testing.assert_array_equal(so[keep], o[keep])
    np.testing.assert_array_equal(sl[keep], lse[keep])
    po, pl = sanitize(jnp.asarray(o), jnp.asarray(lse), None)
    np.testing.assert_array_equal(np.asarray(po), o)


def test_combine_bad_input():
    with pytest.raises(ValueError, match="lses must have shape"):
        hj.combine(np.zeros((2, 3, 8)), np.zeros((2, 4)), axis=0)
    with pytest.raises(ValueError, match="axis"):
        hj.combine(np.zeros((2, 3, 8)), np.zeros((2, 3)), axis=2)


def _decode_args(rng, B=2, G=3, H=4, N=6, P=4, npp=2):
    return dict(q_latent=jnp.asarray(rng.standard_normal((B, G, H, 512)), jnp.float32),
                q_rope=jnp.asarray(rng.standard_normal((B, G, H, 64)), jnp.float32),
                pages=hj.MLAPages(jnp.asarray(rng.standard_normal((N, P, 512)), jnp.float32),
                                  jnp.asarray(rng.standard_normal((N, P, 64)), jnp.float32)),
                page_table=jnp.array([[0, 1], [2, 3]], jnp.int32))


def test_mla_decode_bounds_are_keyword_only_R19(rng):
    a = _decode_args(rng)
    with pytest.raises(TypeError):
        hj.ops.mla_decode(a["q_latent"], a["q_rope"], a["pages"], a["page_table"], jnp.ones((2, 3), jnp.int32), 0.1)


@pytest.mark.parametrize("change, match", [
    (dict(kv_bounds=jnp.full((2, 3), 9, jnp.int32)), "kv_bounds must lie"),   # page table too small
    (dict(kv_bounds=jnp.ones((2, 4), jnp.int32)), "kv_bounds must have shape"),
    (dict(kv_bounds=jnp.ones((2, 3), jnp.float32)), "kv_bounds must be an integer"),
    (dict(page_table=jnp.zeros((3, 2), jnp.int32)), "page_table must have shape"),
    (dict(q_rope=jnp.ones((2, 3, 5, 64))), "q_rope must have shape"),
    (dict(softmax_scale=0.0), "softmax_scale"),
    (dict(implementation="cuda-magic"), "implementation must be one of"),
])
def test_mla_decode_bad_input(rng, change, match):
    a = _decode_args(rng)
    kw = dict(kv_bounds=jnp.ones((2, 3), jnp.int32), softmax_scale=0.1)
    a.update({k: v for k, v in change.items() if k in a})
    kw.update({k: v for k, v in change.items() if k not in a})
    with pytest.raises(ValueError, match=match):
        hj.ops.mla_decode(a["q_latent"], a["q_rope"], a["pages"], a["page_table"], **kw)


def test_mla_decode_reference_zero_bound_identity(rng):
    a = _decode_args(rng)
    bounds = jnp.array([[0, 3, 8], [5, 0, 1]], jnp.int32)
    o, lse = hj.ops.mla_decode(a["q_latent"], a["q_rope"], a["pages"], a["page_table"], kv_bounds=bounds,
                               softmax_scale=0.07, implementation="reference")
    kv = np.concatenate([np.asarray(a["pages"].c_latent), np.asarray(a["pages"].k_rope)], -1)
    kv_local = kv[np.asarray(a["page_table"])].reshape(2, 8, 576)
    q = np.concatenate([np.asarray(a["q_latent"]), np.asarray(a["q_rope"])], -1)
    ro, rl = bounded_decode(q, kv_local, np.asarray(bounds), 0.07)
    np.testing.assert_allclose(o, ro, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse, rl, rtol=1e-5, atol=1e-5)
    assert (np.asarray(o)[0, 0] == 0).all() and np.isneginf(np.asarray(lse)[0, 0]).all()


def test_auto_dispatch_skips_backends_that_cannot_take_the_operands(monkeypatch):
    # On a GPU, an f32 model must fall back past the bf16/fp16-only FFI kernel instead of failing.
    from helix_jax.ops.mla_decode import api, ffi, pallas
    monkeypatch.setattr(ffi, "availability", lambda platform: (True, ""))
    monkeypatch.setattr(pallas, "availability", lambda platform: (True, ""))

    def ops(dtype, page):
        return (jnp.zeros((1, 1, 4, 512), dtype),
                hj.MLAPages(jnp.zeros((2, page, 512), dtype), jnp.zeros((2, page, 64), dtype)))

    q, pages = ops(jnp.float32, 4)
    assert api._resolve(None, "gpu", "bf16", q, pages) == "reference"
    q, pages = ops(jnp.float32, 64)
    assert api._resolve(None, "gpu", "bf16", q, pages) == "pallas"
    q, pages = ops(jnp.bfloat16, 64)
    assert api._resolve(None, "gpu", "bf16", q, pages) == "ffi"
    q, pages = ops(jnp.float32, 64)
    with pytest.raises(ValueError, match="bf16/fp16"):
        api._resolve("ffi", "gpu", "bf16", q, pages)
