"""Save / resume a speculative-decoding run (:class:`helix_jax.spec.SpecState`) on any CP layout.

``save_state(dir, state, config=..., params=...)`` stores the whole decoding state: every layer's
Helix cache (per shard), page tables, committed lengths, the CP-free drafter cache, pending token
``t0``, drafts and their distributions, the PRNG key and the overlap bookkeeping.
``restore_state(dir, mesh=..., config=...)`` re-lays every layer's KV for ``mesh`` and
``config.page_size`` / ``config.max_len``; decoding then continues with exactly the tokens an
uninterrupted run produces.

Compatibility: the target and draft model configs must match (hash), and so must the decoding
rules that shape the state or the token stream (``draft_len``, ``drafting``, ``sampling``,
``temperature``, ``overlap``, ``kv_dtype``). ``page_size``, ``max_len``, ``implementation`` and the
mesh may change.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from .io import CheckpointError, _is_cache, read_manifest, restore, save
from .relayout import layout_template

__all__ = ["save_state", "restore_state", "RestoredState", "save_spec_run", "resume_spec_decode", "ResumedRun",
           "spec_model_config", "DECODE_FIELDS"]

DECODE_FIELDS = ("draft_len", "drafting", "sampling", "temperature", "overlap", "kv_dtype")
_LAYOUT_FIELDS = ("page_size", "max_len", "axis_name", "implementation")


def spec_model_config(config) -> dict:
    """The part of a ``SpecConfig`` a checkpoint must agree on: both model configs."""
    return {"target": dataclasses.asdict(config.target), "draft": dataclasses.asdict(config.draft)}


class RestoredState(NamedTuple):
    state: object    # SpecState on the requested mesh / layout
    params: object   # SpecParams (replicated on the mesh) or None
    extra: dict      # {key path: array} saved with ``extra=`` (empty if none)


def save_state(directory, state, *, config, params=None, extra=None, overwrite: bool = False) -> dict:
    """Checkpoint a ``SpecState`` (and optionally ``SpecParams`` and an ``extra`` pytree of arrays,
    e.g. prompts and the tokens emitted so far) taken between two verify steps."""
    from ..spec import SpecConfig, SpecState

    if not isinstance(state, SpecState):
        raise ValueError(f"state must be a helix_jax.spec.SpecState, got {type(state).__name__}")
    if not isinstance(config, SpecConfig):
        raise ValueError(f"config must be a helix_jax.spec.SpecConfig, got {type(config).__name__}")
    meta = {"kind": "spec_state",
            "decode": {f: getattr(config, f, None) for f in DECODE_FIELDS},
            "layout": {f: getattr(config, f) for f in _LAYOUT_FIELDS},
            "batch": int(state.lens.shape[0])}
    return save(directory, state=state, params=params, extra=extra, model_config=spec_model_config(config),
                metadata=meta, overwrite=overwrite)


def _check_decode(manifest, config):
    meta = manifest.get("metadata", {})
    if meta.get("kind") != "spec_state":
        raise CheckpointError("checkpoint does not hold a speculative-decoding state (saved without save_state)")
    saved = meta["decode"]
    diff = [f"{f}: checkpoint {saved.get(f)!r} vs requested {getattr(config, f, None)!r}"
            for f in DECODE_FIELDS if saved.get(f) != getattr(config, f, None)]
    if diff:
        raise CheckpointError("incompatible decoding config: " + "; ".join(diff))


def _template_leaf(entry, cache_info, *, mesh, config, batch):
    rep = NamedSharding(mesh, P())
    if cache_info is not None:
        return layout_template(batch, mesh=mesh, page_size=config.page_size, max_len=config.max_len,
                               axis_name=config.axis_name, dtype=jnp.dtype(cache_info["dtype"]),
                               kv_dtype=cache_info["kv_dtype"])
    if "key_impl" in entry:
        data = jnp.zeros(entry["shape"], jnp.dtype(entry["dtype"]))
        return jax.device_put(jax.random.wrap_key_data(data, impl=entry["key_impl"]), rep)
    return jax.ShapeDtypeStruct(tuple(entry["shape"]), jnp.dtype(entry["dtype"]), sharding=rep)


def _state_template(manifest, *, mesh, config, batch):
    """A ``SpecState`` whose leaves describe where each saved array goes (caches: the new layout)."""
    from ..cache import HelixMLACache, MLAPages
    from ..spec import DraftCache, SpecState

    dummy = HelixMLACache.__new__(HelixMLACache)
    proto = SpecState(
        caches=(dummy,) * config.target.num_layers,
        draft_cache=DraftCache(tuple(MLAPages(0, 0) for _ in range(config.draft.num_layers))),
        **{f: 0 for f in SpecState._fields if f not in ("caches", "draft_cache")})
    flat, treedef = jax.tree_util.tree_flatten_with_path(proto, is_leaf=_is_cache)
    paths = [jax.tree_util.keystr(p) for p, _ in flat]
    if paths != manifest["trees"].get("state"):
        raise CheckpointError("the checkpoint's state structure does not match this helix_jax SpecState "
                              f"(saved {len(manifest['trees'].get('state', []))} leaves, expected {len(paths)})")
    leaves = []
    for i, (_, leaf) in enumerate(flat):
        key = f"state/{i}"
        info = manifest["caches"].get(key)
        entry = manifest["arrays"].get(key)
        if _is_cache(leaf) != (info is not None):
            raise CheckpointError(f"state leaf {paths[i]}: cache vs array mismatch with the checkpoint")
        leaves.append(_template_leaf(entry, info, mesh=mesh, config=config, batch=batch))
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _params_template(config, mesh):
    from flax import nnx
    from ..models.deepseek import MLADecoder
    from ..spec import SpecParams

    rep = NamedSharding(mesh, P())

    def abstract(cfg):
        state = nnx.state(nnx.eval_shape(lambda: MLADecoder(cfg, rngs=nnx.Rngs(0))))
        return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=rep), state)

    return SpecParams(abstract(config.target), abstract(config.draft))


def restore_state(directory, *, mesh: Mesh, config, with_params: bool | None = None):
    """Restore a ``SpecState`` saved by :func:`save_state` onto ``mesh`` with ``config``'s layout.

    Returns :class:`RestoredState` ``(state, params, extra)``; ``params`` is ``None`` unless the
    checkpoint holds them (``with_params=True`` demands them, ``False`` drops them). Every check (model config, decoding rules, file digests,
    array fingerprints) passes before anything is built; failures raise
    :class:`~helix_jax.checkpoint.CheckpointError`.
    """
    from ..spec import SpecConfig, validate_spec_config

    if not isinstance(config, SpecConfig):
        raise ValueError(f"config must be a helix_jax.spec.SpecConfig, got {type(config).__name__}")
    if not isinstance(mesh, Mesh) or config.axis_name not in mesh.shape:
        raise ValueError(f"mesh must be a jax.sharding.Mesh with axis {config.axis_name!r}")
    validate_spec_config(config, cp_size=int(mesh.shape[config.axis_name]))
    manifest = read_manifest(directory)
    _check_decode(manifest, config)
    has_params = "params" in manifest["trees"]
    if with_params and not has_params:
        raise CheckpointError(f"{directory}: the checkpoint holds no params")
    like = _state_template(manifest, mesh=mesh, config=config, batch=int(manifest["metadata"]["batch"]))
    params_like = _params_template(config, mesh) if has_params else None   # verified even if unwanted
    got = restore(directory, state_like=like, params_like=params_like,
                  model_config=spec_model_config(config))
    return RestoredState(got.state, got.params if with_params is not False else None, got.extra or {})


# -- whole runs: what `python -m helix_jax demo --save DIR / --resume DIR` needs --------------------

def save_spec_run(directory, run, *, prompts, prompt_lens, config, params=None, overwrite: bool = False) -> dict:
    """Checkpoint a ``helix_jax.spec.SpecRun`` (its final state) with its prompts and token history,
    so that :func:`resume_spec_decode` can continue it and report the whole sequence."""
    tokens = run.tokens
    width = max(len(t) for t in tokens)
    padded = np.full((len(tokens), width), -1, np.int32)
    for b, t in enumerate(tokens):
        padded[b, : len(t)] = t
    extra = {"prompts": np.asarray(prompts, np.int32), "prompt_lens": np.asarray(prompt_lens, np.int32),
             "tokens": padded, "num_tokens": np.asarray([len(t) for t in tokens], np.int32),
             "accepted": np.asarray(run.accepted, np.int32), "positions": np.asarray(run.positions, np.int32)}
    return save_state(directory, run.state, config=config, params=params, extra=extra, overwrite=overwrite)


class ResumedRun(NamedTuple):
    run: object       # SpecRun: tokens / accepted / positions cover the saved history and the new steps
    config: object    # the SpecConfig used (max_len raised if the new steps needed room)
    params: object    # SpecParams from the checkpoint
    prompts: np.ndarray
    prompt_lens: np.ndarray


def resume_spec_decode(directory, *, mesh: Mesh, config, steps: int, progress=None, on_ready=None) -> ResumedRun:
    """Restore a run saved by :func:`save_spec_run` onto ``mesh`` / ``config`` (any cp, page size)
    and decode ``steps`` more verify steps. ``on_ready()`` is called once the step is compiled,
    ``progress(n_emitted)`` after each step; ``seconds`` counts only the new steps."""
    import time

    from ..spec import SpecRun, compile_step

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    manifest = read_manifest(directory)
    committed = max((c["max_committed"] for k, c in manifest["caches"].items() if k.startswith("state/")), default=0)
    need = committed + (steps + 1) * config.group_len
    if config.max_len < need:   # room for the new steps (a layout choice, like the page size)
        config = config.replace(max_len=need)
    state, params, extra = restore_state(directory, mesh=mesh, config=config, with_params=True)
    for k in ("['tokens']", "['num_tokens']", "['prompts']", "['prompt_lens']", "['accepted']", "['positions']"):
        if k not in extra:
            raise CheckpointError(f"{directory}: not a saved run (no {k[2:-2]}; use save_spec_run)")
    tokens = [list(map(int, row[:n])) for row, n in zip(extra["['tokens']"], extra["['num_tokens']"])]
    step = compile_step(params, state, mesh=mesh, config=config)
    if on_ready is not None:
        on_ready()
    acc, pos = [], []
    t0 = time.perf_counter()
    for _ in range(steps):
        pos.append(np.asarray(state.packed_positions[:, 0] if config.overlap else state.lens))
        state, emitted, num = step(params, state)
        emitted, num = np.asarray(emitted), np.asarray(num)
        if np.any(num < 1):
            raise RuntimeError(f"a verify group overflowed the cache (num_emitted={num.tolist()})")
        for b, t in enumerate(tokens):
            t.extend(int(x) for x in emitted[b, : num[b]])
        acc.append(num - 1)
        if progress is not None:
            progress(int(num.sum()))
    seconds = time.perf_counter() - t0
    b = len(tokens)
    accepted = np.concatenate([extra["['accepted']"].reshape(-1, b), np.asarray(acc, np.int32).reshape(-1, b)])
    positions = np.concatenate([extra["['positions']"].reshape(-1, b), np.asarray(pos, np.int32).reshape(-1, b)])
    run = SpecRun(tokens, accepted, positions, seconds, state)
    return ResumedRun(run, config, params, extra["['prompts']"], extra["['prompt_lens']"])
