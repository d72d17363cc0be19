"""helix_mla_attention end to end on a real CP mesh vs a float64 dense causal oracle (R1, R10, R11, R21)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import helix_jax as hj
from helix_jax import ledger
from oracles import dense_causal_mla, rel_err

SCALE = 1.0 / np.sqrt(192.0)


def poison_unused(cache):
    """NaN into every pool entry that holds no committed KV (spare pages and slots past lens)."""
    cp, P, n = cache.cp_size, cache.page_size, cache.num_pages
    live = np.zeros((cp * n, P), bool)
    tables = np.asarray(cache.page_table)
    lens = np.asarray(cache.lens)
    for r in range(cp):
        for b, length in enumerate(lens):
            cnt = int(ledger.local_len(int(length), r, page_size=P, cp_size=cp))
            for s in range(cnt):
                live[r * n + tables[r, b, s // P], s % P] = True
    m = jnp.asarray(live)[..., None]
    sh = cache.c_latent.sharding
    return cache.replace(c_latent=jax.device_put(jnp.where(m, cache.c_latent, jnp.nan), sh),
                         k_rope=jax.device_put(jnp.where(m, cache.k_rope, jnp.nan), sh))


def run_case(rng, *, cp, P, lens, G, H, max_len, dtype=jnp.float32, poison=True, shuffle=True, spare=3):
    B = len(lens)
    mesh = hj.make_cp_mesh(cp)
    kv = rng.standard_normal((B, max_len, 576)).astype(np.float32)
    q = rng.standard_normal((B, G, H, 576)).astype(np.float32)
    kv_d, q_d = jnp.asarray(kv, dtype), jnp.asarray(q, dtype)
    lens = np.asarray(lens)
    npp = ledger.pages_per_rank(max_len, page_size=P, cp_size=cp)
    cache = hj.HelixMLACache.from_global(kv_d[..., :512], kv_d[..., 512:], lens, mesh=mesh, page_size=P,
                                         max_len=max_len, num_pages=B * npp + spare,
                                         shuffle_pages=int(rng.integers(1 << 30)) if shuffle else None)
    if poison:
        cache = poison_unused(cache)
    pos = lens[:, None] + np.arange(G)
    new = kv_d[np.arange(B)[:, None], pos]
    out, lse, cache2 = hj.helix_mla_attention(cache, q_d[..., :512], q_d[..., 512:], new[..., :512], new[..., 512:],
                                              pos, softmax_scale=SCALE)
    ref_o, ref_lse = dense_causal_mla(np.asarray(q_d.astype(jnp.float32)), np.asarray(kv_d.astype(jnp.float32)), pos, SCALE)
    out = np.asarray(out.astype(jnp.float32))
    assert np.isfinite(out).all() and np.isfinite(np.asarray(lse)).all()
    return out, np.asarray(lse), ref_o, ref_lse, cache2, pos, kv_d


@pytest.mark.parametrize("cp,P,H", [(1, 4, 8), (2, 4, 8), (4, 4, 8), (8, 2, 16), (4, 64, 8)])
def test_helix_matches_dense_f32(rng, cp, P, H):
    G = 4
    span = P * cp
    # bases: 0, a page boundary, straddling ranks, tail-page-only ranks, random
    lens = [0, span - 2, P - 1, 2 * span + P - 2, int(rng.integers(0, 3 * span))]
    max_len = 3 * span + 2 * G + P
    out, lse, ref_o, ref_lse, cache2, pos, kv = run_case(rng, cp=cp, P=P, lens=lens, G=G, H=H, max_len=max_len)
    assert rel_err(out, ref_o) < 1e-5
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-5, atol=1e-5)
    # the new KV was appended by the ledger: the cache's global view now holds positions [0, pos_last]
    lat, rope = cache2.to_global(int(pos.max()) + 1)
    for b, row in enumerate(pos):
        np.testing.assert_array_equal(lat[b, : row[-1] + 1], np.asarray(kv[b, : row[-1] + 1, :512]))
        np.testing.assert_array_equal(rope[b, : row[-1] + 1], np.asarray(kv[b, : row[-1] + 1, 512:]))


def test_tail_page_only_rank_R1_with_nan_pool_R11(rng):
    # Example B: cp=2, P=4, p0=2, G=4 -> rank 1 has kv_len 2 but tokens 0, 1 see nothing there.
    out, lse, ref_o, ref_lse, *_ = run_case(rng, cp=2, P=4, lens=[2, 6], G=4, H=4, max_len=16, spare=4)
    assert rel_err(out, ref_o) < 1e-5


def test_whole_sequence_empty_ranks_R10(rng):
    # Example C: cp=4, P=64, p0=61, G=8 -> ranks 2, 3 own nothing of the sequence.
    out, lse, ref_o, ref_lse, *_ = run_case(rng, cp=4, P=64, lens=[61, 3], G=8, H=8, max_len=256)
    assert rel_err(out, ref_o) < 1e-5


def test_group_longer_than_page(rng):
    out, lse, ref_o, ref_lse, *_ = run_case(rng, cp=2, P=2, lens=[3, 0, 9], G=7, H=4, max_len=32)
    assert rel_err(out, ref_o) < 1e-5


def test_bf16_within_spec_tolerance(rng):
    out, lse, ref_o, ref_lse, *_ = run_case(rng, cp=4, P=4, lens=[0, 7, 30], G=4, H=8, max_len=48, dtype=jnp.bfloat16)
    np.testing.assert_allclose(out, ref_o, atol=1e-1, rtol=5e-2)
    assert rel_err(out, ref_o) < 2e-2


def test_output_is_head_sharded_and_cache_stays_sharded(rng):
    out, lse, ref_o, ref_lse, cache2, *_ = run_case(rng, cp=2, P=4, lens=[5], G=2, H=4, max_len=16, poison=False)
    assert cache2.c_latent.sharding.spec == jax.sharding.PartitionSpec("cp")


def _small(rng, cp=2, H=4, B=2, G=2, P=4, max_len=16):
    mesh = hj.make_cp_mesh(cp)
    cache = hj.HelixMLACache.from_global(jnp.asarray(rng.standard_normal((B, max_len, 512)), jnp.float32),
                                         jnp.asarray(rng.standard_normal((B, max_len, 64)), jnp.float32),
                                         np.array([3] * B), mesh=mesh, page_size=P, max_len=max_len)
    args = dict(q_latent=jnp.ones((B, G, H, 512)), q_rope=jnp.ones((B, G, H, 64)),
                c_latent_new=jnp.ones((B, G, 512)), k_rope_new=jnp.ones((B, G, 64)),
                positions=jnp.array([[3, 4]] * B))
    return cache, args


@pytest.mark.parametrize("field, value, match", [
    ("q_latent", jnp.ones((2, 2, 4, 256)), "q_latent must have shape"),
    ("q_rope", jnp.ones((2, 2, 4, 32)), "q_rope must have shape"),
    ("c_latent_new", jnp.ones((2, 3, 512)), "c_latent_new must have shape"),
    ("k_rope_new", jnp.ones((2, 2, 65)), "k_rope_new must have shape"),
    ("positions", jnp.array([[3.0, 4.0]] * 2), "positions must be an integer"),
    ("positions", jnp.array([[3, 5]] * 2), "not consecutive"),
    ("positions", jnp.array([[15, 16]] * 2), "cache holds 16 global tokens"),
    ("q_latent", jnp.ones((2, 2, 3, 512)), "divisible by cp"),
    ("q_latent", jnp.ones((2, 2, 4, 512), jnp.int32), "floating point"),
    ("q_latent", jnp.ones((3, 2, 4, 512)), "q_rope must have shape"),
])
def test_bad_input_raises(rng, field, value, match):
    cache, args = _small(rng)
    args[field] = value
    if field == "q_latent" and value.shape[2] == 3:
        args["q_rope"] = jnp.ones((2, 2, 3, 64))
    with pytest.raises(ValueError, match=match):
        hj.helix_mla_attention(cache, **args, softmax_scale=SCALE)


def test_bad_scale_and_batch(rng):
    cache, args = _small(rng)
    with pytest.raises(ValueError, match="softmax_scale"):
        hj.helix_mla_attention(cache, **args, softmax_scale=-1.0)
    args = {k: (v[:1] if hasattr(v, "shape") else v) for k, v in args.items()}
    with pytest.raises(ValueError, match="batch"):
        hj.helix_mla_attention(cache, **args, softmax_scale=SCALE)


def test_overflow_under_jit_is_loud_nan(rng):
    cache, args = _small(rng)
    f = jax.jit(lambda pos: hj.helix_mla_attention(cache, **{**args, "positions": pos}, softmax_scale=SCALE)[0])
    out = np.asarray(f(jnp.array([[3, 4], [15, 16]])))
    assert np.isfinite(out[0]).all() and np.isnan(out[1, 1]).all()


@pytest.mark.parametrize("kw, match", [
    (dict(page_size=0), "page_size"), (dict(max_len=0), "max_len"), (dict(axis_name="tp"), "axis_name"),
    (dict(num_pages=1), "num_pages"), (dict(lens=np.array([20, 1])), "lens must lie")])
def test_from_global_bad_input(rng, kw, match):
    mesh = hj.make_cp_mesh(2)
    base = dict(c_latent=jnp.ones((2, 16, 512)), k_rope=jnp.ones((2, 16, 64)), lens=np.array([3, 4]),
                mesh=mesh, page_size=4, max_len=16)
    base.update(kw)
    with pytest.raises(ValueError, match=match):
        hj.HelixMLACache.from_global(**base)
    with pytest.raises(ValueError, match="k_rope must have shape"):
        hj.HelixMLACache.from_global(jnp.ones((2, 16, 512)), jnp.ones((2, 16, 32)), np.array([1, 1]),
                                     mesh=mesh, page_size=4, max_len=16)


def test_mesh_errors():
    with pytest.raises(ValueError, match="devices"):
        hj.make_cp_mesh(len(jax.devices()) + 1)
