"""The functional spec-verify step under ``jax.shard_map`` (HELIX_SEMANTICS.md §8, R4, R14).

One jit-compiled pure function per :class:`SpecConfig`:

  positions (overlap: stale host packing corrected with the previous accepted count)
  -> per layer: ledger metadata -> KV append at local slots -> bounded decode -> sanitize
     -> all-to-all -> combine (``helix_attention_local``) -> ``W_UV`` on the rank's head group
     -> row-parallel ``o_proj`` + psum over ``cp``
  -> logits of the G = 1 + k group tokens -> acceptance -> commit (length += accepted + 1;
     rejected drafts' KV stays in place, beyond every bound, to be overwritten)
  -> next linear-chain drafts from the CP-free drafter.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, PartitionSpec as P

from .. import ledger
from ..cache import HelixMLACache
from ..helix import helix_attention_local
from ..ops.exchange import peer_groups
from ..models.config import MLAModelConfig
from ..models.deepseek import MLADecoder
from .acceptance import greedy_accept, probs_from_logits, rejection_accept, sample_probs
from .config import SpecConfig, validate_spec_config
from .drafting import DraftCache, draft_cache_from_prefill, propose_chain

__all__ = ["SpecParams", "SpecState", "init_spec_state", "spec_verify_step", "step_positions",
           "make_params"]


class SpecParams(NamedTuple):
    """Model weights (``nnx.State`` pytrees), replicated on every rank."""
    target: object
    draft: object


class SpecState(NamedTuple):
    """Decode state (a pytree). ``B`` sequences, ``k = draft_len``, ``G = k + 1``.

    caches: one :class:`HelixMLACache` per target layer (ledger-sharded over ``cp``).
    draft_cache: CP-free drafter KV (replicated).
    lens: ``[B]`` committed global length ``p0`` (KV of positions ``< p0`` is final).
    last_token: ``[B]`` token ``t0`` at position ``p0`` (sampled, KV not cached yet).
    drafts: ``[B, k]``; draft_probs: ``[B, k, V]`` the drafter's distributions (one-hot when greedy).
    rng: PRNG key.
    prev_accepted: ``[B]`` drafts accepted by the previous step (overlap correction).
    packed_positions: ``[B, G]`` positions as the overlap scheduler's host packed them (stale base:
      every draft of the step in flight assumed accepted).
    in_flight: ``[B]`` bool, whether the previous step was in flight when packing (False right
      after prefill).
    """
    caches: tuple
    draft_cache: DraftCache
    lens: jax.Array
    last_token: jax.Array
    drafts: jax.Array
    draft_probs: jax.Array
    rng: jax.Array
    prev_accepted: jax.Array
    packed_positions: jax.Array
    in_flight: jax.Array


@functools.lru_cache(maxsize=None)
def _graphdef(cfg: MLAModelConfig):
    return nnx.split(nnx.eval_shape(lambda: MLADecoder(cfg, rngs=nnx.Rngs(0))))[0]


def make_params(target: MLADecoder, drafter: MLADecoder) -> SpecParams:
    return SpecParams(nnx.state(target), nnx.state(drafter))


def _models(params: SpecParams, config: SpecConfig):
    return nnx.merge(_graphdef(config.target), params.target), nnx.merge(_graphdef(config.draft), params.draft)


@functools.lru_cache(maxsize=None)
def _param_structure(cfg: MLAModelConfig):
    return jax.tree_util.tree_structure(nnx.state(nnx.eval_shape(lambda: MLADecoder(cfg, rngs=nnx.Rngs(0)))))


def _check_params(params, config):
    if not isinstance(params, SpecParams):
        raise ValueError(f"params must be SpecParams(target=nnx.State, draft=nnx.State), got {type(params).__name__}")
    for name, cfg in (("target", config.target), ("draft", config.draft)):
        want = _param_structure(cfg)
        got = jax.tree_util.tree_structure(getattr(params, name))
        if want != got:
            raise ValueError(f"params.{name} does not match config.{name} (layers/structure differ)")


def _cp(mesh: Mesh, config: SpecConfig) -> int:
    if not isinstance(mesh, Mesh):
        raise ValueError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if config.axis_name not in mesh.shape:
        raise ValueError(f"config.axis_name {config.axis_name!r} is not an axis of the mesh {dict(mesh.shape)}")
    return int(mesh.shape[config.axis_name])


# ---------------------------------------------------------------------------------------------
# init (prefill)
# ---------------------------------------------------------------------------------------------

@functools.partial(jax.jit, static_argnames=("config", "capacity"))
def _prefill(params, prompts, lens, key, *, config: SpecConfig, capacity: int):
    # ``config`` here is reduced to what prefill depends on (see _prefill_config): one compile
    # serves every cp / page size / overlap setting.
    target, drafter = _models(params, config)
    logits, kvs = target(prompts)
    k_t0, k_draft = jax.random.split(key)
    last = jnp.take_along_axis(logits, (lens - 1)[:, None, None], axis=1)[:, 0]          # [B, V]
    if config.sampling == "greedy":
        t0 = jnp.argmax(last, axis=-1).astype(jnp.int32)
    else:
        t0 = sample_probs(k_t0, probs_from_logits(last, config.temperature))
    _, dkvs = drafter(prompts)
    dcache = draft_cache_from_prefill(dkvs, lens, capacity=capacity)
    prev = jnp.take_along_axis(prompts, (lens - 1)[:, None], axis=1)[:, 0]
    drafts, probs, dcache = propose_chain(
        drafter, dcache, prev, t0, lens, k_draft, draft_len=config.draft_len, sampling=config.sampling,
        temperature=config.temperature, implementation="reference")
    return kvs, dcache, t0, drafts, probs


def _prefill_config(config: SpecConfig) -> SpecConfig:
    return SpecConfig(target=config.target, draft=config.draft, draft_len=config.draft_len,
                      sampling=config.sampling, temperature=config.temperature, max_len=config.max_len)


def init_spec_state(params: SpecParams, prompts, prompt_lens, *, mesh: Mesh, config: SpecConfig,
                    seed: int = 0, shuffle_pages: int | None = None) -> SpecState:
    """Prefill: plain causal attention over the prompts, distribute each layer's KV over the ranks
    with :meth:`HelixMLACache.from_global`, sample ``t0`` and propose the first drafts.

    ``prompts [B, L]`` int (right-padded), ``prompt_lens [B]`` in ``[1, L]``.
    """
    cp = _cp(mesh, config)
    validate_spec_config(config, cp_size=cp)
    _check_params(params, config)
    prompts = np.asarray(prompts)
    lens = np.asarray(prompt_lens)
    if prompts.ndim != 2 or not np.issubdtype(prompts.dtype, np.integer):
        raise ValueError(f"prompts must be an int array [B, L], got {prompts.dtype} {prompts.shape}")
    if lens.shape != prompts.shape[:1] or not np.issubdtype(lens.dtype, np.integer):
        raise ValueError(f"prompt_lens must be an int array [B]={prompts.shape[:1]}, got {lens.shape}")
    if np.any(lens < 1) or np.any(lens > prompts.shape[1]):
        raise ValueError(f"prompt_lens must lie in [1, L={prompts.shape[1]}], got {lens.tolist()}")
    if np.any(prompts < 0) or np.any(prompts >= config.target.vocab_size):
        raise ValueError(f"prompt tokens must lie in [0, vocab_size={config.target.vocab_size})")
    if int(lens.max()) + 2 * config.group_len > config.max_len:
        raise ValueError(f"max_len={config.max_len} leaves no room to decode after prompts of length "
                         f"{int(lens.max())} (need at least prompt + 2*G = {int(lens.max()) + 2 * config.group_len})")
    key, k_pre = jax.random.split(jax.random.key(seed))
    kvs, dcache, t0, drafts, probs = _prefill(params, jnp.asarray(prompts, jnp.int32), jnp.asarray(lens, jnp.int32),
                                              k_pre, config=_prefill_config(config), capacity=config.max_len)
    lens_j = jnp.asarray(lens, jnp.int32)
    caches = tuple(HelixMLACache.from_global(c, k, lens_j, mesh=mesh, page_size=config.page_size,
                                             max_len=config.max_len, axis_name=config.axis_name,
                                             shuffle_pages=shuffle_pages, kv_dtype=config.kv_dtype)
                   for c, k in kvs)
    g = config.group_len
    b = prompts.shape[0]
    return SpecState(caches=caches, draft_cache=dcache, lens=lens_j, last_token=t0, drafts=drafts,
                     draft_probs=probs, rng=key, prev_accepted=jnp.full((b,), config.draft_len, jnp.int32),
                     packed_positions=lens_j[:, None] + jnp.arange(g, dtype=jnp.int32),
                     in_flight=jnp.zeros((b,), bool))


# ---------------------------------------------------------------------------------------------
# the step
# ---------------------------------------------------------------------------------------------

def step_positions(state: SpecState, *, config: SpecConfig):
    """Global positions ``[B, G]`` of this step's verify group.

    Non-overlap: ``lens + j``. Overlap: the host's stale packing corrected on device by
    ``prev_accepted - draft_len`` for rows whose predecessor was in flight (R4, R14).
    """
    g = config.group_len
    if config.overlap:
        return ledger.correct_positions(state.packed_positions, state.prev_accepted, config.draft_len,
                                        in_flight=state.in_flight)
    return state.lens[:, None] + jnp.arange(g, dtype=jnp.int32)


def _verify_logits(target, caches, tokens, positions, *, config, cp, peer_groups=None):
    """Target forward of the verify group on this rank; returns ``(logits [B, G, V], caches)``."""
    a = config.axis_name
    hc = config.target.num_heads // cp
    rank = jax.lax.axis_index(a)
    scale = config.target.softmax_scale

    def attend(i, attn, h, pos):
        q_nope, q_rope = attn.queries(h, pos)
        c_new, k_new = attn.latents(h, pos)
        cache = caches[i]
        out, _, pages = helix_attention_local(
            cache.pages, cache.page_table[0], attn.absorb_query(q_nope), q_rope,
            c_new, k_new, pos, axis_name=a, cp_size=cp, page_size=config.page_size, softmax_scale=scale,
            implementation=config.implementation, peer_groups=peer_groups)
        partial = attn.project_out(out, head_start=rank * hc)          # this head group's o_proj rows
        return jax.lax.psum(partial, a), cache.with_pages(pages)

    logits, new_caches = target.forward_with(tokens, positions, attend)
    return logits, tuple(new_caches)


def _local_step(params, state: SpecState, *, config: SpecConfig, cp: int, capacity: int, peer_groups=None):
    target, drafter = _models(params, config)
    k, g = config.draft_len, config.group_len
    positions = step_positions(state, config=config)
    tokens = jnp.concatenate([state.last_token[:, None], state.drafts], axis=1)            # [B, G]
    logits, caches = _verify_logits(target, state.caches, tokens, positions, config=config, cp=cp,
                                    peer_groups=peer_groups)

    k_acc, k_draft, k_next = jax.random.split(state.rng, 3)
    if config.sampling == "greedy":
        a, emitted = greedy_accept(logits, state.drafts)
    else:
        a, emitted = rejection_accept(probs_from_logits(logits, config.temperature), state.draft_probs,
                                      state.drafts, k_acc)
    p0 = positions[:, 0]
    # A group reaching past the cache cannot be stored: that row emits nothing and stays put.
    fits = positions[:, -1] < capacity
    new_lens = jnp.where(fits, p0 + a + 1, p0)
    bonus = jnp.take_along_axis(emitted, a[:, None], axis=1)[:, 0]
    prev = jnp.take_along_axis(tokens, a[:, None], axis=1)[:, 0]                          # token at new_lens-1
    drafts, probs, dcache = propose_chain(
        drafter, state.draft_cache, prev, bonus, new_lens, k_draft, draft_len=k, sampling=config.sampling,
        temperature=config.temperature, implementation="reference")

    keep = lambda new, old: jnp.where(fits.reshape(fits.shape + (1,) * (new.ndim - 1)), new, old)
    caches = tuple(c.replace(lens=new_lens) for c in caches)
    new_state = SpecState(
        caches=caches,
        draft_cache=jax.tree_util.tree_map(keep, dcache, state.draft_cache),
        lens=new_lens,
        last_token=keep(bonus, state.last_token),
        drafts=keep(drafts, state.drafts),
        draft_probs=keep(probs, state.draft_probs),
        rng=k_next,
        prev_accepted=keep(a, state.prev_accepted),
        # What the overlap scheduler's host packs next: every draft of this step assumed accepted.
        packed_positions=keep(positions + g, state.packed_positions),
        in_flight=keep(jnp.ones_like(state.in_flight), state.in_flight),
    )
    emitted = jnp.where(fits[:, None], emitted, -1)
    num = jnp.where(fits, a + 1, 0).astype(jnp.int32)
    return new_state, emitted, num


def _state_specs(state: SpecState) -> SpecState:
    rep = lambda t: jax.tree_util.tree_map(lambda _: P(), t)
    return state._replace(
        caches=tuple(c.specs() for c in state.caches), draft_cache=rep(state.draft_cache),
        **{f: P() for f in SpecState._fields if f not in ("caches", "draft_cache")})


@functools.partial(jax.jit, static_argnames=("mesh", "config"))
def _step_jit(params, state, *, mesh, config):
    cp = int(mesh.shape[config.axis_name])
    c0 = state.caches[0]
    # A group must fit the target cache and the drafter's (max_len) cache.
    capacity = min(ledger.capacity(c0.page_table.shape[2], page_size=config.page_size, cp_size=cp),
                   state.draft_cache.capacity)
    specs = _state_specs(state)
    body = functools.partial(_local_step, config=config, cp=cp, capacity=capacity,
                             peer_groups=peer_groups(mesh, config.axis_name))
    return jax.shard_map(body, mesh=mesh, in_specs=(P(), specs), out_specs=(specs, P(), P()),
                         check_vma=False)(params, state)


def _check_state(state, mesh, config, cp):
    if not isinstance(state, SpecState):
        raise ValueError(f"state must be a SpecState (from init_spec_state), got {type(state).__name__}")
    if len(state.caches) != config.target.num_layers:
        raise ValueError(f"state has {len(state.caches)} layer caches but config.target.num_layers="
                         f"{config.target.num_layers}")
    c0 = state.caches[0]
    if (c0.mesh != mesh or c0.page_size != config.page_size or c0.axis_name != config.axis_name
            or c0.kv_dtype != config.kv_dtype):
        raise ValueError(f"state caches were built for mesh {dict(c0.mesh.shape)}, page_size={c0.page_size}, "
                         f"axis {c0.axis_name!r}, kv_dtype {c0.kv_dtype!r}; the step got mesh {dict(mesh.shape)}, "
                         f"page_size={config.page_size}, axis {config.axis_name!r}, kv_dtype {config.kv_dtype!r}")
    if state.drafts.shape[1] != config.draft_len:
        raise ValueError(f"state drafts have length {state.drafts.shape[1]} but config.draft_len={config.draft_len}")


def spec_verify_step(params: SpecParams, state: SpecState, *, mesh: Mesh, config: SpecConfig):
    """One speculative verify step with Helix CP.

    Returns ``(state, emitted_tokens [B, G] int32, num_emitted [B] int32)``: row b emitted
    ``emitted_tokens[b, :num_emitted[b]]`` (accepted drafts then the correction/bonus token; -1
    pads). ``num_emitted == accepted + 1`` except for a row whose group would overflow the cache
    (0, nothing changes). The step is one jit-compiled function (cached per mesh and config).
    """
    cp = _cp(mesh, config)
    validate_spec_config(config, cp_size=cp)
    _check_params(params, config)
    _check_state(state, mesh, config, cp)
    return _step_jit(params, state, mesh=mesh, config=config)


_COMPILED = {}


def compile_step(params: SpecParams, state: SpecState, *, mesh: Mesh, config: SpecConfig):
    """Ahead-of-time compile the step (for timing without compile time); cached per mesh, config
    and argument shapes. Returns a callable ``(params, state) -> (state, emitted, num)``."""
    cp = _cp(mesh, config)
    validate_spec_config(config, cp_size=cp)
    _check_params(params, config)
    _check_state(state, mesh, config, cp)
    leaves, tree = jax.tree_util.tree_flatten((params, state))
    key = (mesh, config, tree, tuple((x.shape, str(x.dtype)) for x in leaves))
    if key not in _COMPILED:
        _COMPILED[key] = _step_jit.lower(params, state, mesh=mesh, config=config).compile()
    return _COMPILED[key]
