"""Continuous-batching speculative decoding on a :class:`HelixPagePool` (issue 7, demo ``--requests``).

Drives :func:`helix_jax.spec.spec_verify_step` over a fixed batch of ``max_batch`` rows whose KV pages
come from one pool: requests arrive at their ``arrival_step``, are prefilled one at a time
(:func:`helix_jax.spec.init_spec_state` on that prompt alone, its KV handed to the pool's pages with
:func:`write_prompts`), take part in every verify step until they have ``max_new_tokens`` tokens,
then leave and their pages and row are reused. Only public ``helix_jax.spec`` APIs are used.

With ``kv_dtype="bf16"`` and greedy sampling every request's tokens equal plain greedy decoding of
that prompt alone (tests check this); quantized KV formats are lossy and re-quantized on hand-off.
"""
from __future__ import annotations

import time
from typing import Callable, Hashable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from .. import ledger
from .pool import HelixPagePool
from .quota import check_int
from .schedule import Request, ScheduleReport, StepPlan, schedule_requests
from .tables import make_cache, refresh_caches, write_prompts

__all__ = ["ServeResult", "serve_requests"]

_ROW_FIELDS = ("last_token", "drafts", "draft_probs", "prev_accepted", "packed_positions", "in_flight")


class ServeResult(NamedTuple):
    """tokens: ``{req_id: [max_new_tokens ids]}`` (``t0`` from prefill first); report: the schedule;
    seconds: wall time of the verify steps (prefill and first compile included); pool: the page pool."""
    tokens: dict
    report: ScheduleReport
    seconds: float
    pool: HelixPagePool


def serve_requests(params, requests: Sequence[Request], prompts: Mapping[Hashable, Sequence[int]], *,
                   mesh, config, max_batch: int, num_pages: int | None = None, seed: int = 0,
                   shuffle_pages: int | None = None, prompt_bucket: int | None = None,
                   progress: Callable[[StepPlan, dict], None] | None = None) -> ServeResult:
    """Serve ``requests`` with continuous batching and Helix speculative decoding.

    Args:
      params: :class:`helix_jax.spec.SpecParams`; config: :class:`helix_jax.spec.SpecConfig`
        (``config.max_len`` = global tokens one batch row can hold).
      requests: :class:`Request` list (``prompt_len`` must equal ``len(prompts[req_id])``).
      prompts: token ids per request.
      max_batch: batch rows ``B`` (one compiled step serves every batch composition).
      num_pages: pages per rank in the pool (default: every row at full length, plus the null page);
        smaller pools make requests wait for pages.
      shuffle_pages: seed for a random per-rank page order (realism, tests).
      prompt_bucket: prompts are padded to a multiple of this for prefill (default: the row
        capacity, so one prefill shape is compiled; pass a smaller bucket for long rows).
      progress: ``progress(plan, {req_id: tokens so far})`` after every step.
    """
    from ..spec import init_spec_state, spec_verify_step

    cp = int(mesh.shape[config.axis_name])
    page, g = config.page_size, config.group_len
    npp = ledger.pages_per_rank(config.max_len, page_size=page, cp_size=cp)
    # Whole pages may exceed max_len; the drafter's cache (and so the step) holds max_len tokens.
    capacity = min(ledger.capacity(npp, page_size=page, cp_size=cp), config.max_len)
    max_batch = check_int("max_batch", max_batch)
    requests = list(requests)
    for r in requests:
        if r.req_id not in prompts:
            raise ValueError(f"prompts has no entry for request {r.req_id!r}")
        if len(prompts[r.req_id]) != r.prompt_len:
            raise ValueError(f"request {r.req_id!r}: prompt_len={r.prompt_len} but its prompt has "
                             f"{len(prompts[r.req_id])} tokens")
        if r.prompt_len + r.max_new_tokens + 2 * g > capacity:
            raise ValueError(f"request {r.req_id!r} needs prompt {r.prompt_len} + {r.max_new_tokens} new + "
                             f"2*G={2 * g} <= {capacity} global tokens per row; raise config.max_len")
    pool = HelixPagePool(num_pages=1 + max_batch * npp if num_pages is None else num_pages,
                         page_size=page, cp_size=cp, seed=shuffle_pages)
    bucket = capacity if prompt_bucket is None else check_int("prompt_bucket", prompt_bucket)

    box: dict = {}                       # the batch SpecState, built at the first admission
    tokens: dict = {}
    want = {r.req_id: r.max_new_tokens for r in requests}
    rep = NamedSharding(mesh, P())

    def batch_state(one):
        """A ``max_batch``-row state shaped like the one-request state ``one``, caches from the pool."""
        dtype = one.caches[0].dtype if config.kv_dtype == "bf16" else jnp.float32
        caches = tuple(make_cache(pool, batch=max_batch, mesh=mesh, max_len=config.max_len, dtype=dtype,
                                  axis_name=config.axis_name, kv_dtype=config.kv_dtype) for _ in one.caches)
        tile = lambda x: jnp.repeat(x[:1], max_batch, axis=0)
        rows = {f: tile(getattr(one, f)) for f in _ROW_FIELDS + ("lens",)}
        return one._replace(caches=caches, draft_cache=jax.tree_util.tree_map(tile, one.draft_cache), **rows)

    def on_admit(plan: StepPlan, row: int, req: Request):
        length = req.prompt_len
        width = min(-(-length // bucket) * bucket, capacity)
        prompt = np.zeros((1, width), np.int32)
        prompt[0, :length] = np.asarray(prompts[req.req_id], np.int32)
        one = init_spec_state(params, prompt, np.array([length], np.int32), mesh=mesh, config=config,
                              seed=seed + 7919 * (1 + len(tokens)))
        if "state" not in box:
            box["state"] = batch_state(one)
        st = box["state"]
        kvs = [tuple(x[0] for x in c.to_global(length)) for c in one.caches]
        st = st._replace(caches=write_prompts(st.caches, pool, req.req_id, kvs))
        rows = {f: getattr(st, f).at[row].set(getattr(one, f)[0]) for f in _ROW_FIELDS}
        dc = jax.tree_util.tree_map(lambda big, small: big.at[row].set(small[0]), st.draft_cache, one.draft_cache)
        box["state"] = st._replace(draft_cache=dc, **rows)
        tokens[req.req_id] = [int(np.asarray(one.last_token)[0])]

    def run_step(plan: StepPlan):
        st = box["state"]
        empty = jnp.asarray(~plan.active)
        st = st._replace(
            caches=refresh_caches(st.caches, pool, plan.slots, plan.committed),
            lens=jax.device_put(plan.committed, rep),
            # Empty rows restart at position 0 every step: their writes stay in the null page.
            packed_positions=jnp.where(empty[:, None], jnp.arange(g, dtype=jnp.int32), st.packed_positions),
            in_flight=jnp.where(empty, False, st.in_flight))
        # Same (replicated) placement every step, so the compiled step is reused, never re-traced.
        st = st._replace(**{f: jax.device_put(getattr(st, f), rep) for f in st._fields if f != "caches"})
        st, emitted, num = spec_verify_step(params, st, mesh=mesh, config=config)
        box["state"] = st
        emitted, num = np.asarray(emitted), np.asarray(num)
        out = {}
        for b, r in enumerate(plan.slots):
            if r is None:
                continue
            if num[b] < 1:
                raise RuntimeError(f"request {r!r}: verify group overflowed the cache (positions "
                                   f"{plan.positions[b].tolist()}, capacity {capacity})")
            tokens[r].extend(int(t) for t in emitted[b, : num[b]])
            out[r] = (int(num[b]), len(tokens[r]) >= want[r])
        if progress is not None:
            progress(plan, tokens)
        return out

    t0 = time.perf_counter()
    report = schedule_requests(requests, pool=pool, max_batch=max_batch, draft_len=config.draft_len,
                               pages_per_seq=npp, run_step=run_step, on_admit=on_admit)
    seconds = time.perf_counter() - t0
    return ServeResult({r: t[: want[r]] for r, t in tokens.items()}, report, seconds, pool)
