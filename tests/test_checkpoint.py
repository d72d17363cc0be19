"""Orbax checkpoints: elastic CP / page-size re-layout (exact), params, config guard, corruption."""
import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from helix_jax import HelixMLACache, checkpoint as ck, make_cp_mesh

LAT, ROPE = 512, 64
CONFIG = {"layers": 2, "heads": 8, "kv_lora_rank": 512, "qk_rope_head_dim": 64}


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint8) if x.dtype.itemsize == 1 else x.view(f"u{x.dtype.itemsize}")


def _assert_same_kv(a: HelixMLACache, b: HelixMLACache, length: int):
    """Exact (bitwise) equality of the logical global KV of two caches over ``[0, length)``."""
    ga, gb = a.to_global(length), b.to_global(length)
    for x, y in zip(ga, gb):
        np.testing.assert_array_equal(_bits(x), _bits(y))
    np.testing.assert_array_equal(np.asarray(a.lens), np.asarray(b.lens))


def _random_cache(rng, *, cp, page_size, batch=2, length=45, max_len=48, **kw):
    lat = jnp.asarray(rng.standard_normal((batch, length, LAT)), jnp.bfloat16)
    rope = jnp.asarray(rng.standard_normal((batch, length, ROPE)), jnp.bfloat16)
    lens = jnp.asarray(rng.integers(length // 2, length + 1, size=batch), jnp.int32)
    return HelixMLACache.from_global(lat, rope, lens, mesh=make_cp_mesh(cp), page_size=page_size,
                                     max_len=max_len, **kw)


def test_cache_relayout_cp2_to_cp4_to_cp1_and_page_size(rng, tmp_path):
    # Shuffled page tables with spare pages: the source layout is not the standard one.
    c2 = _random_cache(rng, cp=2, page_size=4, shuffle_pages=int(rng.integers(1 << 30)), num_pages=30)
    man = ck.save(tmp_path / "a", cache=c2, model_config=CONFIG)
    assert (man["cp_size"], man["page_size"], man["kv_layout"]) == (2, 4, ck.io.KV_LAYOUT)
    assert man["model_config_hash"] == ck.config_hash(CONFIG)
    assert all(len(e["fingerprint"]) == 16 for e in man["arrays"].values())
    # Written per shard: each stored chunk of the pool is one rank's [N, P, 512] shard.
    meta = ocp.StandardCheckpointer().metadata(tmp_path / "a" / "arrays").item_metadata.tree
    assert tuple(meta["cache"]["0"]["c_latent"].storage.chunk_shape) == (30, 4, LAT)

    c4 = ck.restore(tmp_path / "a", mesh=make_cp_mesh(4), model_config=CONFIG).cache
    assert (c4.cp_size, c4.page_size, c4.capacity) == (4, 4, 48)
    assert c4.c_latent.sharding.spec == P("cp") and len(c4.c_latent.sharding.device_set) == 4
    _assert_same_kv(c2, c4, 48)

    ck.save(tmp_path / "b", cache=c4, model_config=CONFIG)
    c1 = ck.restore(tmp_path / "b", mesh=make_cp_mesh(1), page_size=8).cache
    assert (c1.cp_size, c1.page_size) == (1, 8)
    _assert_same_kv(c2, c1, 48)

    # In-memory elastic re-layout gives the same result, including a capacity change.
    c8 = ck.relayout_cache(c1, mesh=make_cp_mesh(8), page_size=2, max_len=64)
    assert c8.capacity == 64
    _assert_same_kv(c2, c8, 48)


def _random_quantized(rng, kv_dtype, *, cp, page_size):
    """A quantized cache with random stored codes and scales (re-layout is format-agnostic: it must
    move every stored byte; quantization itself is tested with the cache)."""
    base = _random_cache(rng, cp=cp, page_size=page_size, shuffle_pages=int(rng.integers(1 << 30)), num_pages=14)
    rows = base.c_latent.shape[:2]
    f8 = jnp.float8_e4m3fn
    if kv_dtype == "fp8_e4m3":
        leaves = [(LAT, f8), (ROPE, f8)]
    else:   # nvfp4: packed codes [.., 256] / [.., 32], block scales [.., 32] / [.., 4] (cache.NVFP4Pages)
        leaves = [(LAT // 2, jnp.uint8), (ROPE // 2, jnp.uint8), (LAT // 16, f8), (ROPE // 16, f8)]
    shard = NamedSharding(base.mesh, P("cp"))
    arrs = [jax.device_put(jnp.asarray(rng.integers(0, 120, size=rows + (d,)), jnp.uint8).view(dt)
                           if dt != jnp.uint8 else jnp.asarray(rng.integers(0, 256, size=rows + (d,)), jnp.uint8),
                           shard) for d, dt in leaves]
    scale = jax.device_put(jnp.full((cp,), float(rng.uniform(1, 100)), jnp.float32), shard)
    return HelixMLACache(c_latent=arrs[0], k_rope=arrs[1], page_table=base.page_table, lens=base.lens,
                         mesh=base.mesh, axis_name="cp", page_size=page_size, kv_dtype=kv_dtype,
                         scales=tuple(arrs[2:]) + (scale,))


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "nvfp4"])
def test_quantized_cache_relayout_keeps_codes_and_scales(rng, tmp_path, kv_dtype):
    c2 = _random_quantized(rng, kv_dtype, cp=2, page_size=4)
    ck.save(tmp_path / "q", cache=c2)
    c4 = ck.restore(tmp_path / "q", mesh=make_cp_mesh(4), page_size=8).cache
    assert c4.kv_dtype == kv_dtype and (c4.cp_size, c4.page_size) == (4, 8)
    raw2, raw4 = c2.to_global(48, raw=True), c4.to_global(48, raw=True)
    assert type(raw2) is type(raw4)
    for name, x, y in zip(raw2._fields, raw2, raw4):
        if x.ndim > 1:    # per-row codes and block scales: exact
            np.testing.assert_array_equal(_bits(x), _bits(y), err_msg=name)
        else:             # per-tensor scale: one value on every rank
            assert np.all(np.asarray(y) == np.asarray(x)[0]) and y.shape == (4,), name


def test_params_and_keys_roundtrip_onto_another_mesh(rng, tmp_path):
    m4, m2 = make_cp_mesh(4), make_cp_mesh(2)
    params = {
        "w": jax.device_put(jnp.asarray(rng.standard_normal((8, 6)), jnp.bfloat16), NamedSharding(m4, P("cp"))),
        "layers": [{"b": jnp.asarray(rng.standard_normal(5), jnp.float32)},
                   {"b": jnp.asarray(rng.integers(-9, 9, size=(3, 2)), jnp.int32)}],
        "host": (np.asarray(rng.integers(0, 1 << 40, size=4), np.int64), 7),
        "key": jax.random.key(int(rng.integers(1 << 30))),
    }
    ck.save(tmp_path / "p", params=params, model_config=CONFIG)
    like = jax.tree.map(lambda x: x, params)
    like["w"] = jax.ShapeDtypeStruct((8, 6), jnp.bfloat16, sharding=NamedSharding(m2, P(None, "cp")))
    got = ck.restore(tmp_path / "p", params_like=like, model_config=CONFIG).params
    assert got["w"].sharding == like["w"].sharding
    assert isinstance(got["host"][0], np.ndarray) and got["host"][0].dtype == np.int64
    assert got["host"][1] == 7 and isinstance(got["host"][1], int)
    assert jax.random.key_impl(got["key"]) == jax.random.key_impl(params["key"])
    want = jax.tree.leaves(jax.tree.map(lambda x: jax.random.key_data(x) if ck.io._is_key(x) else x, params))
    have = jax.tree.leaves(jax.tree.map(lambda x: jax.random.key_data(x) if ck.io._is_key(x) else x, got))
    for a, b in zip(want, have, strict=True):
        np.testing.assert_array_equal(_bits(np.asarray(a)), _bits(np.asarray(b)))
    # Without a template: {key path: array}.
    flat = ck.restore(tmp_path / "p").params
    assert set(flat) == {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]}
    with pytest.raises(ValueError, match="params_like: structure differs"):
        ck.restore(tmp_path / "p", params_like={"w": like["w"]})
    bad = dict(like, w=jax.ShapeDtypeStruct((8, 7), jnp.bfloat16))
    with pytest.raises(ValueError, match=r"params_like\['w'\].*\[8, 7\]"):
        ck.restore(tmp_path / "p", params_like=bad)


def test_incompatible_model_config_is_refused(rng, tmp_path):
    c = _random_cache(rng, cp=2, page_size=4, batch=1)
    ck.save(tmp_path / "c", cache=c, model_config=CONFIG)
    with pytest.raises(ck.CheckpointError, match=r"incompatible model config: heads: checkpoint 8 vs requested 16"):
        ck.restore(tmp_path / "c", model_config=dict(CONFIG, heads=16))
    ck.save(tmp_path / "n", cache=c)
    with pytest.raises(ck.CheckpointError, match="saved without one"):
        ck.restore(tmp_path / "n", model_config=CONFIG)
    with pytest.raises(ValueError, match="max_len=8 is smaller than the longest committed"):
        ck.restore(tmp_path / "c", max_len=8)
    with pytest.raises(ValueError, match="exists and is not empty"):
        ck.save(tmp_path / "c", cache=c)
    ck.save(tmp_path / "c", cache=c, model_config=dict(CONFIG, heads=16), overwrite=True)
    assert ck.read_manifest(tmp_path / "c")["model_config"]["heads"] == 16
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "n"]   # no temporary folders left


def _data_files(root: Path):
    return sorted((p for p in (root / "arrays").rglob("*") if p.is_file() and p.parent.name == "d"),
                  key=lambda p: p.stat().st_size)


def _flip(path: Path, at: float = 0.5):
    b = bytearray(path.read_bytes())
    b[int(len(b) * at)] ^= 0x5A
    path.write_bytes(bytes(b))


def _rehash(root: Path, path: Path):
    """Simulate corruption that happened before the digest was taken (in memory, on the device)."""
    man = json.loads((root / "manifest.json").read_text())
    man["files"] = {f"arrays/{k}": v for k, v in ck.integrity.file_digests(root / "arrays").items()}
    (root / "manifest.json").write_text(json.dumps(man))


CORRUPTIONS = {
    "deleted data file": lambda root: _data_files(root)[-1].unlink(),
    "deleted metadata": lambda root: (root / "arrays" / "_METADATA").unlink(),
    "flipped byte": lambda root: _flip(_data_files(root)[-1]),
    "truncated file": lambda root: os.truncate(_data_files(root)[-1], _data_files(root)[-1].stat().st_size // 2),
    "no manifest (interrupted save)": lambda root: (root / "manifest.json").unlink(),
    "garbled manifest": lambda root: (root / "manifest.json").write_text('{"format": "helix_jax.chec'),
}


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_corrupted_checkpoint_is_detected_before_reading(rng, tmp_path, monkeypatch, how):
    c = _random_cache(rng, cp=2, page_size=4, batch=1)
    ck.save(tmp_path / "x", cache=c, params={"w": jnp.ones(3)})
    CORRUPTIONS[how](tmp_path / "x")
    reads = []
    monkeypatch.setattr(ocp.StandardCheckpointer, "restore", lambda *a, **k: reads.append(a))
    with pytest.raises(ck.CheckpointError):
        ck.restore(tmp_path / "x", mesh=make_cp_mesh(4))
    assert reads == []   # never half-loaded: refused before any array was read


@pytest.mark.parametrize("where", [0.3, 0.7])
def test_content_corruption_behind_valid_digests_is_detected(rng, tmp_path, where):
    c = _random_cache(rng, cp=2, page_size=4, batch=1)
    ck.save(tmp_path / "y", cache=c)
    target = _data_files(tmp_path / "y")[-1]
    _flip(target, where)
    _rehash(tmp_path / "y", target)
    with pytest.raises(ck.CheckpointError, match="fingerprint mismatch|could not read"):
        ck.restore(tmp_path / "y", mesh=make_cp_mesh(4))


def test_fingerprint_is_layout_independent_and_sensitive(rng):
    x = np.asarray(rng.standard_normal((16, 4, 8)), np.float32)
    ref = ck.fingerprint(x)
    for cp in (1, 2, 8):   # host_bytes=0: reduce on the devices
        assert ck.fingerprint(jax.device_put(x, NamedSharding(make_cp_mesh(cp), P("cp"))), host_bytes=0) == ref
    y = x.copy()
    y[int(rng.integers(16)), int(rng.integers(4)), int(rng.integers(8))] *= -1
    assert ck.fingerprint(y) != ref
    assert ck.fingerprint(x.reshape(4, 16, 8)) == ref   # shape is checked separately in the manifest


# -- the whole decoding state ------------------------------------------------------------------

def _spec_setup():
    from helix_jax.models.config import MLAModelConfig
    from helix_jax.models.deepseek import init_model
    from helix_jax.spec import SpecConfig, make_params

    # One layer each keeps compile time low; an independent drafter makes acceptance vary.
    tcfg = MLAModelConfig(num_layers=1, hidden_size=64, num_heads=4, q_lora_rank=32, qk_nope_head_dim=16,
                          v_head_dim=16, intermediate_size=128, logit_scale=2.0)
    target = init_model(tcfg, seed=1)
    params = make_params(target, target)
    # The drafter: the target's weights, perturbed by ~20% (accepts 0/1/2 drafts ~30/10/60% of the
    # time, so a 12-sample run mixes them; no second init compile).
    draft = jax.jit(lambda s: jax.tree.map(lambda w: w * (1 + 0.2 * jnp.sin(7 * w)), s))(params.draft)
    cfg = SpecConfig(target=tcfg, draft=tcfg, draft_len=2, sampling="rejection", page_size=4, max_len=48)
    return params._replace(draft=draft), cfg


def test_decoding_resumes_on_another_cp_with_identical_tokens(rng, tmp_path):
    from helix_jax.spec import SpecRun, init_spec_state, spec_verify_step

    params, cfg = _spec_setup()
    prompts = rng.integers(0, cfg.target.vocab_size, size=(2, 11))
    lens = np.array([11, int(rng.integers(5, 11))])
    m2 = make_cp_mesh(2)
    state = init_spec_state(params, prompts, lens, mesh=m2, config=cfg, seed=int(rng.integers(1 << 30)),
                            shuffle_pages=int(rng.integers(1 << 30)))
    # Replicate the non-cache leaves on the mesh as the step returns them (saves one recompile).
    rep = NamedSharding(m2, P())
    state = state._replace(**{f: jax.device_put(getattr(state, f), rep)
                              for f in state._fields if f != "caches"})
    n, m = 3, 3
    tokens = [[int(t)] for t in np.asarray(state.last_token)]
    accepted, positions = [], []
    for i in range(n + m):   # uninterrupted run, checkpointed after n steps
        if i == n:
            run_n = SpecRun([list(t) for t in tokens], np.asarray(accepted), np.asarray(positions), 0.0, state)
            ck.save_spec_run(tmp_path / "s", run_n, prompts=prompts, prompt_lens=lens, config=cfg, params=params)
            saved_lens = np.asarray(state.lens)
        positions.append(np.asarray(state.lens))
        state, emitted, num = spec_verify_step(params, state, mesh=m2, config=cfg)
        emitted, num = np.asarray(emitted), np.asarray(num)
        for b, t in enumerate(tokens):
            t.extend(int(x) for x in emitted[b, : num[b]])
        accepted.append(num - 1)
    assert len({int(x) for a in accepted for x in a}) > 1, "acceptance should vary across steps"
    # Resume on cp=4 with page size 8 (params come from the checkpoint) and decode m more steps.
    cfg4, m4 = cfg.replace(page_size=8), make_cp_mesh(4)
    res = ck.resume_spec_decode(tmp_path / "s", mesh=m4, config=cfg4, steps=m)
    state4 = res.run.state
    assert (state4.caches[0].cp_size, state4.caches[0].page_size) == (4, 8)
    assert res.run.tokens == tokens
    np.testing.assert_array_equal(res.run.accepted, np.asarray(accepted))
    np.testing.assert_array_equal(res.run.positions, np.asarray(positions))
    np.testing.assert_array_equal(res.prompts, prompts)
    np.testing.assert_array_equal(np.asarray(state4.lens), np.asarray(state.lens))
    # The restored KV is bit-identical; KV computed after the resume went through cp=4 attention
    # (another reduction order) and agrees to float rounding.
    for a, b in zip(state.caches, state4.caches):
        ga, gb = a.to_global(int(np.max(state.lens))), b.to_global(int(np.max(state.lens)))
        for row, (l0, l1) in enumerate(zip(saved_lens, np.asarray(state.lens))):
            for x, y in zip(ga, gb):
                np.testing.assert_array_equal(_bits(x[row, :l0]), _bits(y[row, :l0]))
                np.testing.assert_allclose(np.float32(x[row, l0:l1]), np.float32(y[row, l0:l1]), rtol=1e-4, atol=1e-5)
    # A different decoding rule or model is refused.
    with pytest.raises(ck.CheckpointError, match="incompatible decoding config: sampling"):
        ck.restore_state(tmp_path / "s", mesh=m4, config=cfg4.replace(sampling="greedy"))
    with pytest.raises(ck.CheckpointError, match="incompatible model config"):
        ck.restore_state(tmp_path / "s", mesh=m4, config=cfg4.replace(target=cfg.target.replace(vocab_size=64),
                                                                      draft=cfg.draft.replace(vocab_size=64)))
