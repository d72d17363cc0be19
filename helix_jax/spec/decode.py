"""Host-side drivers: a spec-decoding loop over :func:`spec_verify_step`, and the plain greedy oracle."""
from __future__ import annotations

import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .config import SpecConfig
from .step import SpecParams, compile_step, init_spec_state

__all__ = ["SpecRun", "run_spec_decode", "greedy_reference", "required_max_len"]


class SpecRun(NamedTuple):
    """Result of :func:`run_spec_decode` (host numpy).

    tokens: per sequence, the generated ids (``t0`` from prefill, then every step's emitted tokens).
    accepted: ``[steps, B]`` accepted drafts per step; positions: ``[steps, B]`` ``p0`` of each verify
    group; seconds: wall time of the steps (compile excluded); state: the final :class:`SpecState`.
    """
    tokens: list
    accepted: np.ndarray
    positions: np.ndarray
    seconds: float
    state: object


def required_max_len(prompt_len: int, *, steps: int, draft_len: int) -> int:
    """Global tokens a sequence needs: prompt + every step's full group + one drafting window."""
    return int(prompt_len) + (int(steps) + 1) * (1 + int(draft_len))


def run_spec_decode(params: SpecParams, prompts, prompt_lens, *, mesh, config: SpecConfig, steps: int,
                    seed: int = 0, progress=None, on_ready=None, shuffle_pages: int | None = None) -> SpecRun:
    """Prefill, then ``steps`` spec-verify steps. ``on_ready()`` is called once prefill and
    compilation are done; ``progress(n_emitted)`` after each step."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    lens = np.asarray(prompt_lens)
    need = required_max_len(int(lens.max()), steps=steps, draft_len=config.draft_len)
    if need > config.max_len:
        raise ValueError(f"config.max_len={config.max_len} is too small for {steps} steps after a prompt of "
                         f"{int(lens.max())} tokens with draft_len={config.draft_len} (need {need})")
    state = init_spec_state(params, prompts, lens, mesh=mesh, config=config, seed=seed, shuffle_pages=shuffle_pages)
    tokens = [[int(t)] for t in np.asarray(state.last_token)]
    step = compile_step(params, state, mesh=mesh, config=config)
    acc, pos = [], []
    if on_ready is not None:
        on_ready()
    t_start = time.perf_counter()
    for _ in range(steps):
        pos.append(np.asarray(state.lens))          # true p0 (overlap mode derives it on device)
        state, emitted, num = step(params, state)
        emitted, num = np.asarray(emitted), np.asarray(num)
        if np.any(num < 1):
            raise RuntimeError(f"a verify group overflowed the cache (num_emitted={num.tolist()})")
        for b in range(len(tokens)):
            tokens[b].extend(int(t) for t in emitted[b, : num[b]])
        acc.append(num - 1)
        if progress is not None:
            progress(int(num.sum()))
    seconds = time.perf_counter() - t_start
    b = len(tokens)
    return SpecRun(tokens, np.asarray(acc, np.int32).reshape(steps, b), np.asarray(pos, np.int32).reshape(steps, b),
                   seconds, state)


@functools.partial(jax.jit, static_argnames=("graphdef", "num_tokens"))
def _greedy(state, prompts, lens, *, graphdef, num_tokens):
    model = nnx.merge(graphdef, state)
    b, length = prompts.shape
    buf = jnp.zeros((b, length + num_tokens), jnp.int32).at[:, :length].set(prompts)
    rows = jnp.arange(b)

    def body(i, buf):
        logits, _ = model(buf)
        cur = lens - 1 + i
        nxt = jnp.argmax(logits[rows, cur], axis=-1).astype(jnp.int32)
        return buf.at[rows, cur + 1].set(nxt)

    buf = jax.lax.fori_loop(0, num_tokens, body, buf)
    idx = lens[:, None] + jnp.arange(num_tokens)
    return jnp.take_along_axis(buf, idx, axis=1)


def greedy_reference(model, prompts, prompt_lens, num_tokens: int) -> np.ndarray:
    """Plain greedy decoding with cp = 1 and no drafts: every token recomputes a full causal forward
    (non-absorbed attention, no cache) over the sequence so far. Returns ``[B, num_tokens]``."""
    graphdef, state = nnx.split(model)
    prompts = jnp.asarray(prompts, jnp.int32)
    return np.asarray(_greedy(state, prompts, jnp.asarray(prompt_lens, jnp.int32), graphdef=graphdef,
                              num_tokens=int(num_tokens)))
