"""Spec-verify step: greedy spec decoding == plain greedy decoding, overlap correction, rejection
sampling, allowlist and fallback refusals, bad configs, the demo CLI."""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import stats

import helix_jax as hj
from helix_jax import ledger
from helix_jax.models import MLAModelConfig, derive_drafter, init_model
from helix_jax.spec import (SpecConfig, SpecState, fallback_supports_verify, greedy_accept, greedy_reference, init_spec_state,
                            make_params, rejection_accept, required_max_len, run_spec_decode,
                            select_attention_backend, spec_verify_step, step_positions,
                            validate_spec_config)

# A smaller-than-default target keeps compile times low; latent 512 + rope 64 stay.
TCFG = MLAModelConfig(vocab_size=64, hidden_size=128, num_layers=2, num_heads=8, q_lora_rank=64,
                      intermediate_size=256)
DCFG = TCFG.replace(num_layers=1)
# Prompt lengths: 61 and 126 put the first groups across the 64- and 128-token page/rank
# boundaries at page 64; with page 4 every group straddles pages.
PROMPT_LENS = np.array([61, 126, 30])
STEPS = 6
ORACLE_TOKENS = 1 + STEPS * 8


@pytest.fixture(scope="module")
def models():
    target = init_model(TCFG, seed=3)
    drafter = derive_drafter(target, num_layers=1)
    return target, drafter, make_params(target, drafter)


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(7)
    p = np.zeros((len(PROMPT_LENS), PROMPT_LENS.max()), np.int32)
    for b, n in enumerate(PROMPT_LENS):
        p[b, :n] = rng.integers(0, TCFG.vocab_size, n)
    return p


@pytest.fixture(scope="module")
def oracle(models, prompts):
    return greedy_reference(models[0], prompts, PROMPT_LENS, ORACLE_TOKENS)


def _config(k, page, overlap, **kw):
    return SpecConfig(target=TCFG, draft=DCFG, draft_len=k, page_size=page, overlap=overlap,
                      max_len=required_max_len(int(PROMPT_LENS.max()), steps=STEPS, draft_len=k), **kw)


_RUNS = {}


def _run(models, prompts, cp, k, page, overlap):
    key = (cp, k, page, overlap)
    if key not in _RUNS:
        _RUNS[key] = run_spec_decode(models[2], prompts, PROMPT_LENS, mesh=hj.make_cp_mesh(cp),
                                     config=_config(k, page, overlap), steps=STEPS, shuffle_pages=cp)
    return _RUNS[key]


def test_oracle_text_is_not_degenerate(oracle):
    for row in oracle:
        assert len(set(row.tolist())) >= 8, row
        assert max(len(list(g)) for _, g in __import__("itertools").groupby(row.tolist())) <= 4, row


# Every value of every axis, plus the risky combinations: cp 4 + page 4 + overlap (partial
# acceptance across page *and* rank boundaries with a stale base), G = 8 > page 4, page 64 at the
# 64/128 boundaries.
GREEDY_CASES = [
    (1, 1, 64, True),
    (2, 3, 4, True),
    (2, 7, 64, False),
    (4, 7, 4, True),
    (4, 3, 4, True),
    (4, 3, 4, False),
    (4, 1, 64, False),
]


@pytest.mark.parametrize("cp,k,page,overlap", GREEDY_CASES)
def test_greedy_spec_equals_greedy_decoding(models, prompts, oracle, cp, k, page, overlap):
    run = _run(models, prompts, cp, k, page, overlap)
    for b, toks in enumerate(run.tokens):
        assert len(toks) == 1 + int((run.accepted[:, b] + 1).sum())
        assert toks == oracle[b, : len(toks)].tolist(), f"row {b} diverges from greedy decoding"
    # The run really exercised what it claims: groups across pages and (cp > 1) ranks, and
    # partial acceptance (some but not all drafts accepted).
    g = k + 1
    pos = run.positions.reshape(-1)
    assert np.array_equal(run.positions[0], PROMPT_LENS)
    np.testing.assert_array_equal(run.positions[1:], run.positions[:-1] + run.accepted[:-1] + 1)
    assert any(len({(p + j) // page for j in range(g)}) > 1 for p in pos)
    if cp > 1:
        assert any(len({((p + j) // page) % cp for j in range(g)}) > 1 for p in pos)
    assert run.accepted.max() >= 1
    if k >= 3:
        assert np.any((run.accepted > 0) & (run.accepted < k))
    # Committed lengths advanced by accepted + 1 per step.
    np.testing.assert_array_equal(np.asarray(run.state.lens), PROMPT_LENS + (run.accepted + 1).sum(0))


def test_overlap_matches_non_overlap(models, prompts):
    a = _run(models, prompts, 4, 3, 4, True)
    b = _run(models, prompts, 4, 3, 4, False)
    assert a.tokens == b.tokens
    np.testing.assert_array_equal(a.accepted, b.accepted)
    # Overlap positions were packed from the stale base and corrected on device.
    st = a.state
    # packed = last p0 + G = lens - (a + 1) + G = lens + k - a
    np.testing.assert_array_equal(np.asarray(st.packed_positions[:, 0]), np.asarray(st.lens) + 3 - np.asarray(st.prev_accepted))


def test_cache_holds_the_committed_kv_at_global_positions(models, prompts):
    """After spec steps, every layer's ledger-sharded cache holds exactly the KV a plain causal
    forward computes for the committed sequence (RoPE at global positions, local slots, R3)."""
    run = _run(models, prompts, 4, 3, 4, True)
    lens = np.asarray(run.state.lens)
    seqs = np.zeros((len(lens), lens.max()), np.int32)
    for b in range(len(lens)):
        full = list(prompts[b, : PROMPT_LENS[b]]) + run.tokens[b]
        seqs[b, : lens[b]] = full[: lens[b]]
    graphdef, state = nnx.split(models[0])
    _, kvs = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))(state, jnp.asarray(seqs))
    for cache, (c, k) in zip(run.state.caches, kvs):
        lat, rope = cache.to_global(int(lens.max()))
        for b in range(len(lens)):
            np.testing.assert_allclose(lat[b, : lens[b]], np.asarray(c)[b, : lens[b]], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(rope[b, : lens[b]], np.asarray(k)[b, : lens[b]], rtol=1e-5, atol=1e-5)


def test_step_positions_overlap_correction_r4():
    """§8 worked example: host packs [8..11] assuming all 3 drafts accepted; 1 was -> [6..9]."""
    cfg = _config(3, 4, True)
    fake = SpecState(caches=(), draft_cache=None, lens=jnp.array([6, 20]), last_token=None, drafts=None,
                             draft_probs=None, rng=None, prev_accepted=jnp.array([1, 1]),
                             packed_positions=jnp.array([[8, 9, 10, 11], [20, 21, 22, 23]]),
                             in_flight=jnp.array([True, False]))
    np.testing.assert_array_equal(step_positions(fake, config=cfg), [[6, 7, 8, 9], [20, 21, 22, 23]])
    meta = ledger.verify_metadata(np.array([[6, 7, 8, 9]]), 1, page_size=4, cp_size=2)
    np.testing.assert_array_equal(meta.kv_bounds, [[3, 4, 4, 4]])         # worked example A, r1
    np.testing.assert_array_equal(step_positions(fake, config=cfg.replace(overlap=False)),
                                  [[6, 7, 8, 9], [20, 21, 22, 23]])


def test_rejection_sampling_step_runs_and_is_seeded(models, prompts):
    cfg = _config(3, 4, False, sampling="rejection", temperature=1.0)
    mesh = hj.make_cp_mesh(2)
    runs = [run_spec_decode(models[2], prompts, PROMPT_LENS, mesh=mesh, config=cfg, steps=3, seed=s)
            for s in (5, 5, 6)]
    assert runs[0].tokens == runs[1].tokens
    assert runs[0].tokens != runs[2].tokens
    for r in runs:
        assert all(0 <= t < TCFG.vocab_size for row in r.tokens for t in row)
        assert np.all((r.accepted >= 0) & (r.accepted <= 3))


# --------------------------------------------------------------------------------------------
# acceptance functions
# --------------------------------------------------------------------------------------------

def test_greedy_accept_prefix_and_bonus(rng):
    v = 11
    best = np.array([[3, 5, 7, 2], [3, 5, 7, 2], [3, 5, 7, 2]])
    logits = rng.standard_normal((3, 4, v)).astype(np.float32)
    logits[np.arange(3)[:, None], np.arange(4)[None], best] += 10.0
    drafts = np.array([[3, 5, 7], [3, 9, 7], [1, 5, 7]])
    a, toks = greedy_accept(jnp.asarray(logits), jnp.asarray(drafts))
    np.testing.assert_array_equal(a, [3, 1, 0])
    np.testing.assert_array_equal(toks, [[3, 5, 7, 2], [3, 5, -1, -1], [3, -1, -1, -1]])


def _chi2_pvalue(samples, probs):
    probs = np.asarray(probs, np.float64) / np.sum(probs, dtype=np.float64)
    counts = np.bincount(samples, minlength=len(probs))
    exp = probs * len(samples)
    keep = exp > 5
    obs = np.append(counts[keep], counts[~keep].sum())
    ex = np.append(exp[keep], exp[~keep].sum())
    if ex[-1] == 0:
        obs, ex = obs[:-1], ex[:-1]
    return stats.chisquare(obs, ex * obs.sum() / ex.sum()).pvalue


def _sample_chain(p, q, n, seed, accept_fn):
    """n independent verify steps of one sequence: drafts ~ q, then ``accept_fn``."""
    keys = jax.random.split(jax.random.key(seed), n)

    def one(key):
        kd, ka = jax.random.split(key)
        d = jax.random.categorical(kd, jnp.log(q), axis=-1)          # [k]
        a, toks = accept_fn(p[None], q[None], d[None].astype(jnp.int32), ka)
        return a[0], toks[0]

    a, toks = jax.jit(jax.vmap(one))(keys)
    return np.asarray(a), np.asarray(toks)


def test_rejection_sampling_preserves_target_distribution():
    r = np.random.default_rng(1234)
    v, k, n = 6, 3, 20000
    p = r.dirichlet(np.ones(v), size=k + 1).astype(np.float32)
    q = r.dirichlet(np.ones(v), size=k).astype(np.float32)
    a, toks = _sample_chain(jnp.asarray(p), jnp.asarray(q), n, 0, rejection_accept)
    assert 0 < (a == 0).mean() < 1 and (a == k).any()
    # Position j of the emitted tokens exists iff a >= j; it must be distributed as p_j (the p_j
    # here do not depend on earlier tokens, so conditioning on a >= j leaves p_j unchanged).
    for j in range(k + 1):
        sel = toks[a >= j, j]
        assert len(sel) > 500
        pv = _chi2_pvalue(sel, p[j])
        assert pv > 1e-4, (j, pv)
        tv = 0.5 * np.abs(np.bincount(sel, minlength=v) / len(sel) - p[j]).sum()
        assert tv < 4 * np.sqrt(v / len(sel)), (j, tv)


def test_rejection_test_has_power():
    """Negative control: accepting every draft emits q, not p; the same statistic must reject."""
    r = np.random.default_rng(1234)
    v, k, n = 6, 3, 20000
    p = r.dirichlet(np.ones(v), size=k + 1).astype(np.float32)
    q = r.dirichlet(np.ones(v), size=k).astype(np.float32)

    def accept_all(pp, qq, d, key):
        return rejection_accept(pp, qq, d, key)[0] * 0 + k, jnp.concatenate([d, d[:, :1]], axis=1)

    _, toks = _sample_chain(jnp.asarray(p), jnp.asarray(q), n, 0, accept_all)
    assert _chi2_pvalue(toks[:, 0], p[0]) < 1e-6


def test_rejection_identical_distributions_accept_everything():
    p = jnp.asarray(np.random.default_rng(0).dirichlet(np.ones(5), size=4), jnp.float32)
    a, toks = _sample_chain(p, p[:3], 2000, 1, rejection_accept)
    assert (a == 3).all() and (toks >= 0).all()


# --------------------------------------------------------------------------------------------
# allowlist, fallback dispatch, bad configs
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,match", [
    (dict(max_total_draft_tokens=6), "tree-shaped.*linear chains"),
    (dict(draft_len=8), r"draft_len must be in \[1, 7\]"),
    (dict(draft_len=0), r"draft_len must be in \[1, 7\]"),
    (dict(drafting="medusa"), "not admitted under Helix.*linear-chain"),
    (dict(drafting="eagle3_tree"), "not admitted under Helix"),
    (dict(drafting="foo"), "unknown drafting method 'foo'.*'dspark'"),
    (dict(sampling="topk"), "sampling must be one of"),
    (dict(sampling="rejection", temperature=0.0), "temperature must be"),
    (dict(draft=MLAModelConfig(vocab_size=99, num_layers=1)), "vocab_size"),
    (dict(kv_dtype="int4"), "kv_dtype must be one of"),
    (dict(page_size=0), "page_size"),
])
def test_config_refusals(kw, match):
    with pytest.raises(ValueError, match=match):
        SpecConfig(**{"target": TCFG, "draft": DCFG, **kw})


def test_linear_chain_alias_and_chain_shaped_tree_are_admitted():
    assert SpecConfig(drafting="linear_chain", draft_len=7, max_total_draft_tokens=7).drafting == "dspark"


def test_heads_not_divisible_by_cp():
    with pytest.raises(ValueError, match="num_heads=8 must be divisible by cp=3"):
        validate_spec_config(SpecConfig(target=TCFG, draft=DCFG), cp_size=3)


def test_model_config_refusals():
    with pytest.raises(ValueError, match="kv_lora_rank must be 512"):
        MLAModelConfig(kv_lora_rank=256)
    with pytest.raises(ValueError, match="qk_rope_head_dim must be 64"):
        MLAModelConfig(qk_rope_head_dim=32)
    with pytest.raises(ValueError, match="num_heads"):
        MLAModelConfig(num_heads=0)


def test_fallback_dispatch_r7():
    # 1 context of 4 tokens + 2 generation rows of 1 token: 6 - 4 = 2 > 2 is false -> supported.
    ok, _ = fallback_supports_verify(position_offsets_present=True, spec_tokens_valid=True,
                                     num_generations=2, q_tokens=6, num_ctx_tokens=4)
    assert ok
    # 2 generation rows of 4 tokens: 12 - 4 = 8 > 2 -> refused.
    ok, why = fallback_supports_verify(position_offsets_present=True, spec_tokens_valid=True,
                                       num_generations=2, q_tokens=12, num_ctx_tokens=4)
    assert not ok and "per-token" in why
    # Each other condition alone lifts the refusal.
    for kw in (dict(position_offsets_present=False), dict(spec_tokens_valid=False)):
        args = dict(position_offsets_present=True, spec_tokens_valid=True, num_generations=2, q_tokens=12,
                    num_ctx_tokens=4) | kw
        assert fallback_supports_verify(**args)[0]
    assert fallback_supports_verify(position_offsets_present=True, spec_tokens_valid=True, num_generations=0,
                                    q_tokens=4, num_ctx_tokens=4)[0]
    batch = dict(position_offsets_present=True, spec_tokens_valid=True, num_generations=2, q_tokens=12,
                 num_ctx_tokens=4)
    refuse = lambda **b: (False, "no Helix support")
    with pytest.raises(ValueError, match="no attention backend supports.*fallback: fallback attention cannot"):
        select_attention_backend([("cute_dsl", refuse), ("fallback", fallback_supports_verify)], **batch)
    assert select_attention_backend([("trtllm", lambda **b: (True, "")), ("fallback", fallback_supports_verify)],
                                    **batch) == "trtllm"
    with pytest.raises(ValueError, match="num_ctx_tokens=5 cannot exceed q_tokens=4"):
        fallback_supports_verify(position_offsets_present=True, spec_tokens_valid=True, num_generations=1,
                                 q_tokens=4, num_ctx_tokens=5)


def test_bad_step_inputs(models, prompts):
    cfg = _config(1, 64, False)
    with pytest.raises(ValueError, match="prompt_lens must lie in"):
        init_spec_state(models[2], prompts, np.array([0, 5, 5]), mesh=hj.make_cp_mesh(1), config=cfg)
    with pytest.raises(ValueError, match="divisible by cp=3"):
        init_spec_state(models[2], prompts, PROMPT_LENS, mesh=hj.make_cp_mesh(3), config=cfg)
    with pytest.raises(ValueError, match="params.target does not match"):
        init_spec_state(make_params(models[1], models[1]), prompts, PROMPT_LENS, mesh=hj.make_cp_mesh(1), config=cfg)
    st = _run(models, prompts, 1, 1, 64, False).state
    with pytest.raises(ValueError, match="state caches were built for"):
        spec_verify_step(models[2], st, mesh=hj.make_cp_mesh(1), config=cfg.replace(page_size=4))
    with pytest.raises(ValueError, match="draft_len"):
        spec_verify_step(models[2], st, mesh=hj.make_cp_mesh(1), config=cfg.replace(draft_len=2))
    with pytest.raises(ValueError, match="too small"):
        run_spec_decode(models[2], prompts, PROMPT_LENS, mesh=hj.make_cp_mesh(1), config=cfg, steps=500)


# --------------------------------------------------------------------------------------------
# the demo CLI
# --------------------------------------------------------------------------------------------

def _demo(*args):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-m", "helix_jax", "demo", *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_demo_check_json():
    p = _demo("--check", "--json", "--steps", "4", "--cp", "2", "--overlap", "--no-progress")
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    for key in ("cp", "draft_len", "steps", "tokens_emitted", "mean_accepted_length", "tokens_per_s",
                "identical_to_greedy", "tokens"):
        assert key in out
    assert out["cp"] == 2 and out["steps"] == 4 and out["identical_to_greedy"] is True
    assert 1.0 <= out["mean_accepted_length"] <= out["draft_len"] + 1
    assert out["tokens_emitted"] == sum(len(t) - 1 for t in out["tokens"])
    assert "identical to greedy" in p.stdout and "mean accepted length" in p.stdout


def test_demo_bad_flags_exit_2():
    p = _demo("--draft-len", "8")
    assert p.returncode == 2 and "draft_len must be in [1, 7]" in p.stderr
    p = _demo("--check", "--sampling", "rejection")
    assert p.returncode == 2 and "--check" in p.stderr


def test_drafter_cache_is_cp_free_and_consistent(models, prompts):
    """The drafter KV is replicated on every rank (never ledger-sharded) and, for every committed
    position, equals the drafter's own plain causal forward of the committed sequence."""
    run = _run(models, prompts, 4, 3, 4, True)
    lens = np.asarray(run.state.lens)
    for layer in run.state.draft_cache.layers:
        assert layer.c_latent.sharding.is_fully_replicated
        assert layer.c_latent.shape[:2] == (len(lens), _config(3, 4, True).max_len)
    seqs = np.zeros((len(lens), lens.max()), np.int32)
    for b in range(len(lens)):
        seqs[b, : lens[b]] = (list(prompts[b, : PROMPT_LENS[b]]) + run.tokens[b])[: lens[b]]
    graphdef, state = nnx.split(models[1])
    _, kvs = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))(state, jnp.asarray(seqs))
    for layer, (c, k) in zip(run.state.draft_cache.layers, kvs):
        for b in range(len(lens)):
            np.testing.assert_allclose(np.asarray(layer.c_latent)[b, : lens[b]], np.asarray(c)[b, : lens[b]],
                                       rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(np.asarray(layer.k_rope)[b, : lens[b]], np.asarray(k)[b, : lens[b]],
                                       rtol=1e-5, atol=1e-5)


def test_rejected_drafts_kv_left_in_place(models, prompts):
    """Commit only moves the length: the KV of rejected drafts stays in the target cache beyond the
    committed length (to be overwritten), it is not erased."""
    run = _run(models, prompts, 2, 3, 4, True)
    lens = np.asarray(run.state.lens)
    last_p0 = lens - 1 - run.accepted[-1]
    np.testing.assert_array_equal(last_p0, run.positions[-1])
    lat, _ = run.state.caches[0].to_global(int((last_p0 + 4).max()))
    for b in range(len(lens)):
        if run.accepted[-1, b] < 3:                      # some draft of the last group was rejected
            assert np.abs(lat[b, lens[b]]).sum() > 0


def test_overflowing_group_emits_nothing(models, prompts):
    """Stepping past the cache: the row whose group no longer fits emits 0 tokens and keeps its
    state; the other rows go on."""
    cfg = _config(1, 64, True)
    mesh = hj.make_cp_mesh(1)
    run = _run(models, prompts, 1, 1, 64, True)
    step = hj.spec.compile_step(models[2], run.state, mesh=mesh, config=cfg)
    state, seen_overflow = run.state, False
    for _ in range(2 * cfg.max_len):
        before = np.asarray(state.lens)
        state, emitted, num = step(models[2], state)
        num, emitted = np.asarray(num), np.asarray(emitted)
        over = num == 0
        np.testing.assert_array_equal(np.asarray(state.lens)[over], before[over])
        assert (emitted[over] == -1).all()
        if over[1]:
            seen_overflow = True
            assert not over[2]
            break
    assert seen_overflow
    assert cfg.max_len - 2 < np.asarray(state.lens)[1] <= cfg.max_len      # next group [lens, lens+1] no longer fits
