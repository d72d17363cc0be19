"""The Flax NNX MLA model: RoPE, RMSNorm, weight absorption, row-parallel o_proj, Helix verify
forward vs plain causal attention, drafter derivation, config errors."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

import helix_jax as hj
from helix_jax.models import MLAModelConfig, apply_rope, derive_drafter, init_model
from helix_jax.spec import SpecConfig, greedy_reference
from helix_jax.spec.step import _verify_logits

CFG = MLAModelConfig(vocab_size=64, hidden_size=128, num_layers=2, num_heads=8, q_lora_rank=64,
                     intermediate_size=256)


@pytest.fixture(scope="module")
def model():
    return init_model(CFG, seed=11)


def test_rope_matches_float64_and_is_relative(rng):
    x = rng.standard_normal((2, 5, 3, 64)).astype(np.float32)
    pos = np.array([[0, 1, 7, 300, 4095], [2, 3, 4, 5, 6]])
    got = np.asarray(apply_rope(jnp.asarray(x), jnp.asarray(pos), theta=10000.0))
    inv = 10000.0 ** (-np.arange(0, 64, 2) / 64.0)
    ang = pos[..., None, None] * inv
    x1, x2 = x[..., :32].astype(np.float64), x[..., 32:].astype(np.float64)
    ref = np.concatenate([x1 * np.cos(ang) - x2 * np.sin(ang), x2 * np.cos(ang) + x1 * np.sin(ang)], -1)
    # float32 angles: pos * inv_freq rounds to ~pos * 6e-8 rad, i.e. ~2.4e-4 at pos 4095 (times |x| <~ 4).
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=1e-3)
    # q.k after RoPE depends only on the position difference.
    q, k = rng.standard_normal((2, 64)).astype(np.float32)
    dots = [float(jnp.dot(apply_rope(jnp.asarray(q)[None], jnp.array([m]), theta=1e4)[0],
                          apply_rope(jnp.asarray(k)[None], jnp.array([m - 3]), theta=1e4)[0])) for m in (3, 50, 130)]
    np.testing.assert_allclose(dots, dots[0], rtol=1e-4)


def test_rmsnorm(rng, model):
    x = rng.standard_normal((2, 3, 128)).astype(np.float32) * 3
    norm = model.layers[0].attn_norm
    w = rng.standard_normal(128).astype(np.float32)
    norm.weight[...] = jnp.asarray(w)
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + CFG.rms_eps) * w
    np.testing.assert_allclose(np.asarray(norm(jnp.asarray(x))), ref, rtol=1e-5, atol=1e-5)
    norm.weight[...] = jnp.ones(128)


def test_absorbed_decode_equals_plain_attention(rng, model):
    """W_UK folded into the query + attention over the 576-wide latent rows + W_UV after the
    softmax == the non-absorbed per-head attention; and the o_proj row-parallel split over head
    groups sums to the full projection."""
    attn = model.layers[1].attn
    b, t = 2, 9
    x = jnp.asarray(rng.standard_normal((b, t, CFG.hidden_size)), jnp.float32)
    pos = jnp.asarray(np.array([np.arange(t), np.arange(40, 40 + t)]))
    plain, _ = attn(x, pos)
    q_nope, q_rope = attn.queries(x, pos)
    c, kr = attn.latents(x, pos)
    q_lat = np.asarray(attn.absorb_query(q_nope), np.float64)
    q = np.concatenate([q_lat, np.asarray(q_rope, np.float64)], -1)                  # [B, T, H, 576]
    kv = np.concatenate([np.asarray(c, np.float64), np.asarray(kr, np.float64)], -1)  # [B, T, 576]
    logits = np.einsum("bthd,bsd->bhts", q, kv) * CFG.softmax_scale
    logits = np.where(np.tril(np.ones((t, t), bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    o_lat = np.einsum("bhts,bsl->bthl", w, kv[..., :512])                             # [B, T, H, 512]
    full = np.asarray(attn.project_out(jnp.asarray(o_lat, jnp.float32)))
    np.testing.assert_allclose(full, np.asarray(plain), rtol=2e-4, atol=2e-4)
    for cp in (2, 4, 8):
        hc = CFG.num_heads // cp
        parts = sum(np.asarray(attn.project_out(jnp.asarray(o_lat[:, :, g * hc:(g + 1) * hc], jnp.float32),
                                                head_start=g * hc)) for g in range(cp))
        np.testing.assert_allclose(parts, full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cp,page,p0,g", [(2, 4, 18, 5), (4, 4, 6, 8), (1, 64, 60, 4)])
def test_helix_verify_forward_equals_plain_causal_forward(rng, model, cp, page, p0, g):
    """Prefill p0 tokens, distribute their KV by the ledger with every slot past p0 poisoned (NaN),
    then run the verify forward of G tokens under shard_map (append at local slots, bounded decode,
    all-to-all, combine, W_UV + row-parallel o_proj + psum): logits == the plain causal forward."""
    max_len = 64 if page == 4 else 128
    seq = jnp.asarray(rng.integers(0, CFG.vocab_size, (2, p0 + g)), jnp.int32)
    graphdef, state = nnx.split(model)
    fwd = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))
    ref_logits, _ = fwd(state, seq)
    _, kvs = fwd(state, seq[:, :p0])
    mesh = hj.make_cp_mesh(cp)
    poison = lambda a: jnp.concatenate([a, jnp.full((2, max_len - p0, a.shape[-1]), jnp.nan, a.dtype)], 1)
    caches = tuple(hj.HelixMLACache.from_global(poison(c), poison(k), jnp.full((2,), max_len, jnp.int32),
                                                mesh=mesh, page_size=page, max_len=max_len, shuffle_pages=1)
                   for c, k in kvs)
    caches = tuple(c.replace(lens=jnp.full((2,), p0, jnp.int32)) for c in caches)
    cfg = SpecConfig(target=CFG, draft=CFG.replace(num_layers=1), draft_len=g - 1, page_size=page, max_len=max_len)
    positions = jnp.broadcast_to(jnp.arange(p0, p0 + g, dtype=jnp.int32), (2, g))
    specs = tuple(c.specs() for c in caches)

    @jax.jit
    def verify(state, caches, tokens, positions):
        body = lambda s, cs, tk, ps: _verify_logits(nnx.merge(graphdef, s), cs, tk, ps, config=cfg, cp=cp)
        return jax.shard_map(body, mesh=mesh, in_specs=(P(), specs, P(), P()), out_specs=(P(), specs),
                             check_vma=False)(state, caches, tokens, positions)

    logits, new_caches = verify(state, caches, seq[:, p0:], positions)
    assert np.isfinite(np.asarray(logits)).all()
    np.testing.assert_allclose(np.asarray(logits), np.asarray(ref_logits[:, p0:]), rtol=1e-4, atol=1e-4)
    # The group's KV landed at its ledger slots, RoPE'd at global positions.
    _, kv_full = fwd(state, seq)
    for cache, (c, _) in zip(new_caches, kv_full):
        lat, _ = cache.to_global(p0 + g)
        np.testing.assert_allclose(lat[:, p0:], np.asarray(c)[:, p0:], rtol=1e-5, atol=1e-5)


def test_derive_drafter_copies_first_layers(model):
    d = derive_drafter(model, num_layers=1)
    assert d.cfg.num_layers == 1 and len(d.layers) == 1
    np.testing.assert_array_equal(d.embed[...], model.embed[...])
    np.testing.assert_array_equal(d.lm_head[...], model.lm_head[...])
    np.testing.assert_array_equal(d.layers[0].attn.w_uk[...], model.layers[0].attn.w_uk[...])
    with pytest.raises(ValueError, match="num_layers must be an int in"):
        derive_drafter(model, num_layers=3)


def test_init_model_is_seeded():
    a, b, c = init_model(CFG, seed=1), init_model(CFG, seed=1), init_model(CFG, seed=2)
    np.testing.assert_array_equal(a.lm_head[...], b.lm_head[...])
    assert not np.array_equal(a.lm_head[...], c.lm_head[...])
    with pytest.raises(ValueError, match="cfg must be an MLAModelConfig"):
        init_model({"num_layers": 2})


def test_default_model_greedy_text_is_varied():
    """The demo's tiny target must not collapse to a repeated token (acceptance would be meaningless)."""
    target = init_model(MLAModelConfig(), seed=0)
    prompts = np.random.default_rng(0).integers(0, 128, (2, 16))
    out = greedy_reference(target, prompts, np.array([16, 16]), 40)
    for row in out.tolist():
        assert len(set(row)) >= 10, row
        assert max(len(list(g)) for _, g in itertools.groupby(row)) <= 4, row


def test_model_config_errors():
    for kw, match in ((dict(kv_lora_rank=128), "kv_lora_rank must be 512"), (dict(vocab_size=0), "vocab_size"),
                      (dict(residual_decay=-1.0), "residual_decay"), (dict(hidden_size=2.5), "hidden_size")):
        with pytest.raises(ValueError, match=match):
            MLAModelConfig(**kw)
