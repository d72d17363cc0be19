"""helix_jax.memory: super-block pool, quotas, cost model, state sizing, continuous batching (issue 7).

HELIX_SEMANTICS.md §2, §4, §9.2-§9.4, R15-R17. The pool's tables are checked end to end by real
``helix_mla_attention`` calls on an 8-device CPU mesh against a dense float64 oracle.
"""
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import helix_jax as hj
from helix_jax import ledger
from helix_jax import memory as hm

# -- §9.3 worked numbers ----------------------------------------------------------------------


def test_quota_worked_numbers():
    # rank-local quota -> physical tokens -> whole pages -> global ledger tokens
    assert hm.usable_physical_tokens(100, page_size=32) == 96
    assert hm.physical_to_global_tokens(100, page_size=32, cp_size=4) == 384
    assert hm.local_bytes_to_global_tokens(100 * 576 + 575, bytes_per_token=576, page_size=32, cp_size=4) == 384
    assert hm.pages_from_bytes(100 * 576, bytes_per_token=576, page_size=32) == 3
    # global -> super-blocks -> physical tokens per rank (not ceil(401/4) = 101)
    assert hm.global_to_superblocks(401, page_size=32, cp_size=4) == 4
    assert hm.global_to_physical_tokens(401, page_size=32, cp_size=4) == 128
    assert hm.global_to_physical_tokens(384, page_size=32, cp_size=4) == 96


@pytest.mark.parametrize("tokens", [0, 1, 31, 32, 33, 100, 401])
def test_quota_cp1_is_identity_on_whole_pages(tokens):
    usable = hm.usable_physical_tokens(tokens, page_size=32)
    assert hm.physical_to_global_tokens(tokens, page_size=32, cp_size=1) == usable
    assert hm.global_to_physical_tokens(usable, page_size=32, cp_size=1) == usable
    assert hm.global_to_physical_tokens(tokens, page_size=32, cp_size=1) == -(-tokens // 32) * 32


@given(g=st.integers(0, 5000), p=st.sampled_from([1, 2, 4, 32, 64]), c=st.sampled_from([1, 2, 4, 8]))
@settings(max_examples=60, deadline=None)
def test_quota_round_trip(g, p, c):
    phys = hm.global_to_physical_tokens(g, page_size=p, cp_size=c)
    back = hm.physical_to_global_tokens(phys, page_size=p, cp_size=c)
    assert g <= back < g + p * c                       # whole super-blocks, never short
    assert phys % p == 0
    # every rank's ledger share fits its pages (ledger L_r is the independent count)
    lr = np.asarray(ledger.local_len(g, np.arange(c), page_size=p, cp_size=c))
    assert lr.sum() == g and (lr <= phys).all()


def test_quota_rejects_bad_input():
    with pytest.raises(ValueError, match="page_size"):
        hm.usable_physical_tokens(10, page_size=0)
    with pytest.raises(ValueError, match="global_tokens"):
        hm.global_to_superblocks(-1, page_size=4, cp_size=2)
    with pytest.raises(ValueError, match="bytes_per_token"):
        hm.physical_tokens_from_bytes(10, bytes_per_token=1.5)


# -- pool: unit behaviour ----------------------------------------------------------------------


def test_pool_allocates_whole_superblocks_per_rank():
    pool = hm.HelixPagePool(num_pages=9, page_size=4, cp_size=4, seed=3)
    assert pool.usable_pages == 8 and pool.global_capacity_tokens == 8 * 16
    assert pool.allocate("x", 17) == 2                   # 17 global tokens -> 2 super-blocks
    pages = pool.pages("x")
    assert pages.shape == (4, 2) and pages.dtype == np.int32
    assert (pages != pool.null_page).all()
    assert pool.free_superblocks == 6 and all(pool.free_pages(r) == 6 for r in range(4))
    assert pool.grow("x", 32) == 0 and pool.grow("x", 33) == 1 and pool.num_superblocks("x") == 3
    assert pool.grow("x", 5) == 0 and pool.num_superblocks("x") == 3       # never shrinks
    assert pool.ensure_step("x", committed_len=46, group_len=4) == 1       # 50 tokens -> 4 blocks
    assert pool.capacity_of("x") == 64
    pool.check()
    assert pool.free("x") == 4 and pool.free_superblocks == 8
    pool.check()
    with pytest.raises(ValueError, match="not allocated"):
        pool.pages("x")


def test_pool_ranks_get_independent_page_ids():
    pool = hm.HelixPagePool(num_pages=33, page_size=2, cp_size=4, seed=0)
    pool.allocate(0, 2 * 4 * 20)
    pages = pool.pages(0)
    assert len({tuple(r) for r in pages.tolist()}) > 1   # shuffled per rank: tables really differ


def test_out_of_pages_leaves_pool_unchanged():
    pool = hm.HelixPagePool(num_pages=6, page_size=4, cp_size=2, seed=1)
    pool.allocate("a", 20)                                 # 3 super-blocks
    pool.allocate("b", 8)                                  # 1
    before = pool.snapshot()
    with pytest.raises(hm.OutOfPagesError, match="out of KV pages") as e:
        pool.allocate("c", 17)                             # needs 3, 1 free
    assert isinstance(e.value, ValueError) and (e.value.needed, e.value.free) == (3, 1)
    assert pool.snapshot() == before and "c" not in pool
    with pytest.raises(hm.OutOfPagesError):
        pool.grow("b", 24)                                 # needs 2 more
    with pytest.raises(hm.OutOfPagesError):                # one fits, both do not: all or nothing
        pool.grow_many({"a": 28, "b": 16})
    assert pool.snapshot() == before
    pool.check()
    assert pool.grow_many({"a": 28}) == 1 and pool.free_superblocks == 0
    with pytest.raises(ValueError, match="already allocated"):
        pool.allocate("a", 1)


def test_page_table_layout_and_padding():
    pool = hm.HelixPagePool(num_pages=10, page_size=4, cp_size=2, seed=2)
    pool.allocate("a", 20)
    pool.allocate("b", 3)
    t = pool.page_table(["b", None, "a"], pages_per_seq=4)
    assert t.shape == (2, 3, 4) and t.dtype == np.int32
    np.testing.assert_array_equal(t[:, 2, :3], pool.pages("a"))
    np.testing.assert_array_equal(t[:, 0, :1], pool.pages("b"))
    assert (t[:, 1] == pool.null_page).all() and (t[:, 2, 3] == pool.null_page).all()
    with pytest.raises(ValueError, match="two batch rows"):
        pool.page_table(["a", "a"], pages_per_seq=4)
    with pytest.raises(ValueError, match="pages_per_seq=2"):
        pool.page_table(["a"], pages_per_seq=2)


# -- pool: property tests ----------------------------------------------------------------------

_op = st.tuples(st.sampled_from(["alloc", "grow", "free", "grow_many"]), st.integers(0, 7),
                st.integers(0, 90), st.integers(0, 90))


@given(ops=st.lists(_op, max_size=40), cp=st.sampled_from([1, 2, 4, 8]), p=st.sampled_from([1, 2, 4]),
       n=st.integers(2, 14), seed=st.integers(0, 3))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_pool_random_sequences_never_leak_or_double_assign(ops, cp, p, n, seed):
    pool = hm.HelixPagePool(num_pages=n, page_size=p, cp_size=cp, seed=seed)
    model = {}                                         # req -> super-blocks (independent bookkeeping)
    span = p * cp
    for kind, req, tok, tok2 in ops:
        before = pool.snapshot()
        free_before = pool.free_superblocks
        try:
            if kind == "alloc":
                if req in model:
                    with pytest.raises(ValueError):
                        pool.allocate(req, tok)
                    continue
                pool.allocate(req, tok)
                model[req] = -(-tok // span)
            elif kind == "grow" and req in model:
                pool.grow(req, tok)
                model[req] = max(model[req], -(-tok // span))
            elif kind == "grow_many" and req in model and len(model) > 1:
                other = next(r for r in model if r != req)
                pool.grow_many({req: tok, other: tok2})
                model[req] = max(model[req], -(-tok // span))
                model[other] = max(model[other], -(-tok2 // span))
            elif kind == "free" and req in model:
                assert pool.free(req) == model.pop(req)
        except hm.OutOfPagesError as e:
            assert pool.snapshot() == before, "refusal changed the pool"
            assert e.needed > free_before == e.free
        pool.check()
        assert pool.free_superblocks + sum(model.values()) == pool.usable_pages
        assert pool.local_capacity_tokens * cp == pool.global_capacity_tokens
        for r, blocks in model.items():
            assert pool.num_superblocks(r) == blocks
            pages = pool.pages(r)
            assert pages.shape == (cp, blocks)
            g = pool.reserved_tokens(r)
            local = np.asarray(ledger.local_len(g, np.arange(cp), page_size=p, cp_size=cp))
            # the ranks' local capacities add up to the request's global capacity and cover L_r(g)
            assert blocks * p * cp == pool.capacity_of(r) and (local <= blocks * p).all()
        owned = np.concatenate([pool.pages(r) for r in model], axis=1) if model else np.zeros((cp, 0))
        for rank in range(cp):
            assert len(set(owned[rank].tolist())) == owned.shape[1]          # no page twice on a rank
            assert pool.null_page not in owned[rank]


# -- cost model and mappings (§9.2, §9.3, R15, R16) --------------------------------------------


def test_draft_mapping_repurposes_cp_into_tp():
    m = hm.Mapping(tp=2, cp=4, world=16, rank=13)
    d = hm.draft_mapping(m)
    assert (d.tp, d.cp, d.world, d.rank, d.attention_dp) == (8, 1, 16, 13, False)
    assert hm.draft_mapping(d) == d
    with pytest.raises(ValueError, match="multiple of tp"):
        hm.Mapping(tp=3, cp=2, world=8)
    with pytest.raises(ValueError, match="rank"):
        hm.Mapping(tp=2, cp=2, rank=4)


def test_r15_draft_manager_rejects_helix_mapping():
    helix = hm.Mapping(tp=1, cp=4)
    with pytest.raises(ValueError, match="CP-free"):
        hm.draft_page_pool(mapping=helix, num_pages=8, page_size=4)
    pool = hm.draft_page_pool(mapping=hm.draft_mapping(helix), num_pages=8, page_size=4)
    assert pool.cp_size == 1 and pool.superblock_tokens == 4


def test_r16_draft_cost_scales_slope_by_cp():
    assert hm.helix_draft_cost(hm.CacheCost(100, 1000), cp=4) == hm.CacheCost(400, 1000)
    assert hm.helix_draft_cost(hm.CacheCost(100, 1000), cp=1) == hm.CacheCost(100, 1000)
    # the preset path: computed on the repurposed mapping, slope x cp, intercept unchanged
    draft = hm.get_preset("tiny-hybrid")        # has recurrent state -> non-zero intercept
    for cp in (1, 2, 4):
        m = hm.Mapping(tp=1, cp=cp)
        c = hm.draft_cache_cost(draft, m)
        assert c.slope == cp * draft.mla_layers * 576 * 4
        assert c.intercept == hm.state_bytes_per_request(draft.recurrent, hm.draft_mapping(m))
    assert hm.CacheCost(3, 5).bytes(10, 2) == 40


def test_presets_bytes_per_token():
    v3 = hm.get_preset("deepseek-v3")
    assert v3.mla_layers == 61 and v3.kv_bytes_per_token() == 576 * 2 * 61
    assert v3.kv_bytes_per_token("float8_e4m3fn") == 576 * 61
    assert hm.get_preset("kimi-linear-style").recurrent.num_layers > 0
    with pytest.raises(ValueError, match="known"):
        hm.get_preset("gpt-2")


def test_tiny_presets_match_the_tiny_models():
    from flax import nnx

    from helix_jax.models import MLADecoder
    from helix_jax.spec import SpecConfig

    spec = SpecConfig()
    for name, cfg in (("tiny", spec.target), ("tiny-draft", spec.draft)):
        pre = hm.get_preset(name)
        leaves = jax.tree_util.tree_leaves(nnx.state(nnx.eval_shape(lambda: MLADecoder(cfg, rngs=nnx.Rngs(0)))))
        assert pre.mla_layers == cfg.num_layers
        assert pre.weight_bytes == sum(x.size * x.dtype.itemsize for x in leaves)
    assert hm.get_preset("tiny").draft == "tiny-draft"


@given(budget=st.integers(0, 10**7), slope=st.integers(1, 600), dslope=st.integers(0, 200),
       ti=st.integers(0, 5000), di=st.integers(0, 500), cp=st.sampled_from([1, 2, 4, 8]),
       p=st.sampled_from([4, 16, 64]), ctx=st.integers(1, 3000), k=st.integers(0, 7))
@settings(max_examples=150, deadline=None)
def test_budget_split_is_optimal_and_fits_the_pools(budget, slope, dslope, ti, di, cp, p, ctx, k):
    target = hm.CacheCost(slope, ti)
    draft = hm.helix_draft_cost(hm.CacheCost(dslope, di), cp=cp)
    sb = hm.global_to_superblocks(ctx + k + 1, page_size=p, cp_size=cp)
    s = hm.split_budget(budget, target=target, draft=draft, cp=cp, page_size=p, superblocks_per_request=sb)
    n = s.max_requests
    assert s.target_bytes + s.draft_bytes + s.state_bytes + s.unused_bytes == budget
    assert s.unused_bytes >= 0
    # one more request cannot fit in any split: each needs these whole pages + state on this rank
    per_req = sb * p * (slope + dslope * cp) + ti + di
    fixed = p * slope + p * dslope
    assert (n + 1) * per_req + fixed > budget
    assert s.state_bytes == n * (ti + di)
    # the pools sized by the split really admit n such requests
    if n:
        tpool = hm.HelixPagePool(num_pages=s.target_pages, page_size=p, cp_size=cp)
        for i in range(n):
            tpool.allocate(i, ctx + k + 1)
        if dslope:
            dpool = hm.HelixPagePool(num_pages=s.draft_pages, page_size=p, cp_size=1)
            for i in range(n):
                dpool.allocate(i, ctx + k + 1)


def test_plan_memory_deepseek_helix_vs_plain():
    gib = hm.plan.GIB
    plain = hm.plan_memory("deepseek-v3", gpu_bytes=141 * gib, mapping=hm.Mapping(tp=8), context=128 * 1024,
                           draft_len=3)
    helix = hm.plan_memory("deepseek-v3", gpu_bytes=141 * gib, mapping=hm.Mapping(cp=8), context=128 * 1024,
                           draft_len=3)
    assert plain.target_cost == helix.target_cost                      # MLA latent is not split by tp
    assert helix.draft_cost.slope == 8 * plain.draft_cost.slope       # R16 through the planner
    assert helix.split.max_requests > 4 * plain.split.max_requests    # Helix shards the KV 8 ways
    assert helix.target_bytes_per_global_token == 576 * 2 * 61 / 8
    with pytest.raises(ValueError, match="no memory left"):
        hm.plan_memory("deepseek-v3", gpu_bytes=80 * gib, mapping=hm.Mapping(), context=10, draft_len=1)


# -- recurrent state (§9.4, R17) ---------------------------------------------------------------


@pytest.mark.parametrize("tp,cp", [(1, 1), (2, 1), (8, 1), (1, 4), (2, 4), (4, 2)])
def test_r17_attention_dp_takes_precedence(tp, cp):
    assert hm.effective_tp(hm.Mapping(tp=tp, cp=cp, attention_dp=True)) == 1


def test_r17_effective_tp_helix_and_plain():
    assert hm.effective_tp(hm.Mapping(tp=2, cp=4)) == 8
    assert hm.effective_tp(hm.Mapping(tp=8)) == 8
    assert hm.effective_tp(hm.Mapping(tp=2, cp=1)) == 2


@pytest.mark.parametrize("mapping", [hm.Mapping(tp=2, cp=4), hm.Mapping(tp=8), hm.Mapping(tp=2, cp=4, attention_dp=True),
                                     hm.Mapping(tp=1, cp=1)])
def test_r17_budget_equals_allocated_pool(mapping):
    spec = hm.RecurrentSpec(num_layers=3, num_heads=16, head_dim=8, n_groups=4, state_size=8, conv_kernel=4,
                            dtype="bfloat16", ssm_dtype="float32")
    tpe = hm.effective_tp(mapping)
    # §9.4 formulas written out independently
    conv = (8 * 16 + 2 * 4 * 8) // tpe * (4 - 1) * 2
    ssm = (16 // tpe) * 8 * 8 * 4
    assert hm.state_bytes_per_request(spec, mapping) == 3 * (conv + ssm)
    pool = hm.StatePool(spec, mapping=mapping, max_requests=5, materialize=True)
    assert pool.nbytes == sum(a.nbytes for a in pool.arrays.values()) == 5 * hm.state_bytes_per_request(spec, mapping)
    # the planner's state budget is the pool the runtime would allocate
    preset = dataclasses.replace(hm.get_preset("tiny-hybrid"), recurrent=spec)
    plan = hm.plan_memory(preset, gpu_bytes=1 << 28, mapping=mapping, context=100, draft_len=2, draft=None)
    runtime = hm.StatePool(spec, mapping=mapping, max_requests=plan.split.max_requests)
    assert plan.split.state_bytes == runtime.nbytes and plan.tp_eff_state == runtime.tp_eff
    slot = pool.allocate("r")
    assert 0 <= slot < 5
    with pytest.raises(ValueError):
        pool.allocate("r")
    pool.free("r")


def test_state_rejects_indivisible_heads():
    spec = hm.RecurrentSpec(num_layers=1, num_heads=6, head_dim=8, n_groups=1, state_size=8, conv_kernel=4)
    with pytest.raises(ValueError, match="effective TP 4"):
        hm.state_bytes_per_request(spec, hm.Mapping(tp=1, cp=4))


# -- the pool's page tables drive real Helix attention ------------------------------------------

CP, P, G, H = 8, 4, 4, 8          # super-block = 32 global tokens; groups straddle pages and ranks
SCALE = 1.0 / np.sqrt(192.0)


def _dense(q, kv_rows):
    """float64 oracle: q [H, 576] over kv_rows [L, 576] -> [H, 512]."""
    q = np.asarray(q, np.float64)
    kv = np.asarray(kv_rows, np.float64)
    lg = SCALE * q @ kv.T
    w = np.exp(lg - lg.max(-1, keepdims=True))
    return (w @ kv[:, :512]) / w.sum(-1, keepdims=True)


def test_continuous_batching_tables_match_dense_oracle(rng):
    """Requests join and leave between steps; pages are reused; every active token's output equals
    dense causal attention over exactly what was committed plus its own group prefix."""
    pool = hm.HelixPagePool(num_pages=6, page_size=P, cp_size=CP, seed=int(rng.integers(1 << 30)))
    mesh = hj.make_cp_mesh(CP)
    batch, max_len = 3, 96
    cache = hm.make_cache(pool, batch=batch, mesh=mesh, max_len=max_len, dtype=jnp.float32, fill=np.nan)
    reqs = [hm.Request(req_id="r0", prompt_len=37, max_new_tokens=9, arrival_step=0),
            hm.Request(req_id="r1", prompt_len=5, max_new_tokens=6, arrival_step=0),
            hm.Request(req_id="r2", prompt_len=61, max_new_tokens=20, arrival_step=0),   # waits for pages
            hm.Request(req_id="r3", prompt_len=29, max_new_tokens=5, arrival_step=1)]
    truth = {r.req_id: rng.standard_normal((r.prompt_len + r.max_new_tokens + G, 576)).astype(np.float32)
             for r in reqs}
    state = {"cache": cache, "checked": 0, "rows_seen": set()}

    def on_admit(plan, row, req):
        kv = truth[req.req_id][: req.prompt_len]
        state["cache"] = hm.write_prompt(state["cache"], pool, req.req_id, kv[:, :512], kv[:, 512:])

    def run_step(plan):
        pool.check()
        c = hm.refresh_cache(state["cache"], pool, plan.slots, plan.committed)
        assert c.page_table.sharding.spec == jax.sharding.PartitionSpec("cp")
        accept = {r: int(rng.integers(1, G + 1)) for r in plan.slots if r is not None}
        new = rng.standard_normal((batch, G, 576)).astype(np.float32)          # rejected drafts: garbage
        for b, r in enumerate(plan.slots):
            if r is not None:
                p0 = plan.committed[b]
                new[b, : accept[r]] = truth[r][p0: p0 + accept[r]]
        q = rng.standard_normal((batch, G, H, 576)).astype(np.float32)
        out, _, c = hj.helix_mla_attention(c, q[..., :512], q[..., 512:], new[..., :512], new[..., 512:],
                                           plan.positions, softmax_scale=SCALE)
        out = np.asarray(out)
        for b, r in enumerate(plan.slots):
            if r is None:
                continue
            p0 = plan.committed[b]
            for j in range(G):
                rows = np.concatenate([truth[r][:p0], new[b, : j + 1]])
                np.testing.assert_allclose(out[b, j], _dense(q[b, j], rows), atol=2e-5, rtol=1e-4)
                state["checked"] += 1
            state["rows_seen"].add((r, b))
        state["cache"] = c
        return accept

    report = hm.schedule_requests(reqs, pool=pool, max_batch=batch, draft_len=G - 1,
                                  pages_per_seq=ledger.pages_per_rank(max_len, page_size=P, cp_size=CP),
                                  run_step=run_step, on_admit=on_admit)
    assert set(report.finish_step) == {"r0", "r1", "r2", "r3"}
    assert report.admit_step["r2"] >= report.finish_step["r1"] > 0     # waited for r1's pages
    assert len({r for r, _ in state["rows_seen"]}) == 4
    assert len({b for _, b in state["rows_seen"]}) < 4                  # rows were reused
    assert report.peak_active <= batch and report.peak_superblocks <= pool.usable_pages
    for r in reqs:
        assert r.prompt_len + r.max_new_tokens <= report.final_length[r.req_id] < r.prompt_len + r.max_new_tokens + G
    assert pool.free_superblocks == pool.usable_pages and not pool.requests
    assert state["checked"] > 40
    pool.check()


def test_batcher_rejects_bad_use():
    pool = hm.HelixPagePool(num_pages=4, page_size=4, cp_size=2)
    b = hm.ContinuousBatcher(pool, max_batch=2, draft_len=3, pages_per_seq=2)
    with pytest.raises(ValueError, match="needs 3 pages"):
        b.submit(hm.Request(req_id=0, prompt_len=10, max_new_tokens=7))   # 10+7+3 = 20 tokens > 2 blocks
    b.submit(hm.Request(req_id=1, prompt_len=4, max_new_tokens=4))
    with pytest.raises(ValueError, match="already submitted"):
        b.submit(hm.Request(req_id=1, prompt_len=4, max_new_tokens=4))
    plan = b.plan_step()
    assert plan.slots == (1, None) and plan.positions[0].tolist() == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="one entry per active"):
        b.commit({})
    with pytest.raises(ValueError, match="exceeds the verify group"):
        b.commit({1: 5})
    assert b.commit({1: 4}) == (1,) and b.done                               # 8 >= 4 + 4: finished


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8_e4m3"])
def test_write_prompt_places_positions_by_ledger(rng, kv_dtype):
    from helix_jax import quant

    pool = hm.HelixPagePool(num_pages=6, page_size=2, cp_size=4, seed=5)
    mesh = hj.make_cp_mesh(4)
    cache = hm.make_cache(pool, batch=2, mesh=mesh, max_len=24, dtype=jnp.float32, kv_dtype=kv_dtype,
                          fill=np.nan if kv_dtype == "bf16" else None)
    assert cache.num_pages == 6 and cache.pages_per_seq == 3 and cache.kv_dtype == kv_dtype
    pool.allocate("z", 19)
    kv = rng.standard_normal((19, 576)).astype(np.float32)
    cache = hm.write_prompt(cache, pool, "z", kv[:, :512], kv[:, 512:])
    cache = hm.refresh_cache(cache, pool, [None, "z"], [0, 19])
    lat, rope = cache.to_global(19)                                           # the cache's own inverse
    if kv_dtype == "bf16":
        want = kv
        rows, offs = hm.prompt_rows(pool, "z", 19)                            # host-side placement
        np.testing.assert_array_equal(np.asarray(cache.c_latent)[rows, offs], kv[:, :512])
        assert np.isnan(np.asarray(cache.c_latent)[pool.null_page]).all()     # nothing else written
    else:
        sc = cache.scales[0][:1]
        want = np.asarray(quant.dequantize_fp8(quant.quantize_fp8(jnp.asarray(kv), sc), sc, jnp.float32))
    np.testing.assert_array_equal(lat[1], want[:, :512])
    np.testing.assert_array_equal(rope[1], want[:, 512:])
    with pytest.raises(ValueError, match="grow it first"):
        hm.write_prompt(cache, pool, "z", np.zeros((25, 512), np.float32), np.zeros((25, 64), np.float32))


def test_multi_layer_helpers_share_one_table(rng):
    pool = hm.HelixPagePool(num_pages=5, page_size=2, cp_size=2, seed=7)
    mesh = hj.make_cp_mesh(2)
    caches = [hm.make_cache(pool, batch=2, mesh=mesh, max_len=12, dtype=jnp.float32) for _ in range(3)]
    pool.allocate("a", 9)
    kvs = [rng.standard_normal((9, 576)).astype(np.float32) for _ in caches]
    caches = hm.write_prompts(caches, pool, "a", [(kv[:, :512], kv[:, 512:]) for kv in kvs])
    caches = hm.refresh_caches(caches, pool, ["a", None], [9, 0])
    for c, kv in zip(caches, kvs):
        assert c.page_table is caches[0].page_table
        np.testing.assert_array_equal(np.asarray(c.lens), [9, 0])
        np.testing.assert_array_equal(c.to_global(9)[0][0], kv[:, :512])
    with pytest.raises(ValueError, match="one .c_latent, k_rope. pair per cache"):
        hm.write_prompts(caches, pool, "a", [])


def test_serve_requests_is_token_identical_to_greedy_per_request(rng):
    """Continuous batching with Helix spec decoding (cp=2, staggered arrivals, varying prompt lengths,
    fewer rows than requests, pages reused): each request's tokens equal plain greedy decoding of its
    prompt alone."""
    from helix_jax.models import MLAModelConfig, derive_drafter, init_model
    from helix_jax.spec import SpecConfig, greedy_reference, make_params

    tcfg = MLAModelConfig()
    config = SpecConfig(target=tcfg, draft=tcfg.replace(num_layers=1), draft_len=3, page_size=4, max_len=48)
    target = init_model(tcfg, seed=0)
    params = make_params(target, derive_drafter(target, num_layers=1))
    reqs = [hm.Request(req_id="a", prompt_len=5, max_new_tokens=9, arrival_step=0),
            hm.Request(req_id="b", prompt_len=14, max_new_tokens=6, arrival_step=1),
            hm.Request(req_id="c", prompt_len=9, max_new_tokens=8, arrival_step=1),
            hm.Request(req_id="d", prompt_len=11, max_new_tokens=7, arrival_step=4)]
    prompts = {r.req_id: rng.integers(0, tcfg.vocab_size, r.prompt_len).tolist() for r in reqs}
    res = hm.serve_requests(params, reqs, prompts, mesh=hj.make_cp_mesh(2), config=config, max_batch=2,
                            num_pages=7, shuffle_pages=int(rng.integers(1 << 20)))
    width = max(r.prompt_len for r in reqs)
    batch = np.zeros((len(reqs), width), np.int32)
    for i, r in enumerate(reqs):
        batch[i, : r.prompt_len] = prompts[r.req_id]
    ref = greedy_reference(target, batch, np.array([r.prompt_len for r in reqs]), max(r.max_new_tokens for r in reqs))
    for i, r in enumerate(reqs):
        assert res.tokens[r.req_id] == ref[i, : r.max_new_tokens].tolist(), r.req_id
    rep = res.report
    assert rep.peak_active == 2 and rep.admit_step["c"] > 1                   # "c" waited for a free row
    assert not res.pool.requests and res.pool.free_superblocks == res.pool.usable_pages
    res.pool.check()


# -- CLI -----------------------------------------------------------------------------------------


def test_plan_memory_cli_json():
    from helix_jax.__main__ import main

    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["plan-memory", "--model", "deepseek-v3", "--gpu-mem", "141", "--cp", "8",
                   "--context", "131072", "--draft-len", "3", "--json"])
    assert rc == 0
    lines = buf.getvalue().strip().splitlines()
    d = json.loads(lines[-1])
    assert d["mapping"]["cp"] == 8 and d["draft_mapping"] == {"tp": 8, "cp": 1, "world": 8, "rank": 0,
                                                              "attention_dp": False}
    assert d["target_cost"]["slope"] == 576 * 2 * 61 and d["draft_cost"]["slope"] == 8 * 576 * 2
    assert d["max_requests"] == d["split"]["max_requests"] > 0
    assert any("max concurrent requests" in ln for ln in lines)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["plan-memory", "--model", "deepseek-v3", "--gpu-mem", "80", "--cp", "1"]) == 2
    assert "no memory left" in buf.getvalue()
