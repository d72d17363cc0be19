"""Continuous batching on a :class:`HelixPagePool`: requests arrive, join a free batch row, decode
in verify groups, and leave, between steps (HELIX_SEMANTICS.md §1.3, §4).

Admission reserves each request's worst case (``prompt + max_new_tokens + draft_len`` global
tokens, in super-blocks) against the pool, but pages are handed out lazily, one super-block at a
time as the committed length grows. So a step never runs out of pages, and pages of finished
requests are reused at once.

Lengths: a request's *committed* length is the number of its tokens whose KV is cached
(``p0`` of its next verify group). After prefill it is ``prompt_len``; each verify step commits
``accepted + 1`` tokens (the old bonus token and the accepted drafts).
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Callable, Hashable, Iterable, Mapping

import numpy as np

from .pool import HelixPagePool
from .quota import check_int

__all__ = ["Request", "StepPlan", "ContinuousBatcher", "ScheduleReport", "schedule_requests",
           "staggered_requests"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Request:
    """A request as the scheduler sees it: ``max_new_tokens`` bounds its committed length."""
    req_id: Hashable
    prompt_len: int
    max_new_tokens: int
    arrival_step: int = 0

    def __post_init__(self):
        hash(self.req_id)
        check_int("prompt_len", self.prompt_len)
        check_int("max_new_tokens", self.max_new_tokens)
        check_int("arrival_step", self.arrival_step, 0)


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """One decode step of a fixed-size batch (``B = max_batch`` rows, ``G = draft_len + 1``).

    slots: ``[B]`` request id per row or ``None``.
    admitted: ``(row, Request)`` pairs that joined this step: write their prompt KV first.
    released: request ids that left since the previous plan (their rows/pages are reused).
    committed: ``[B]`` int32 committed global length (0 for empty rows) = ``HelixMLACache.lens``.
    positions: ``[B, G]`` int32 verify-group positions ``committed + j`` (empty rows: ``j``).
    active: ``[B]`` bool, row holds a request.
    page_table: ``[cp, B, pages_per_seq]`` int32 (empty rows and unused entries: the null page).
    """
    step: int
    slots: tuple
    admitted: tuple
    released: tuple
    committed: np.ndarray
    positions: np.ndarray
    active: np.ndarray
    page_table: np.ndarray

    def row_of(self, req_id) -> int:
        return self.slots.index(req_id)


class ContinuousBatcher:
    """Batch-row and page bookkeeping for continuous batching over one :class:`HelixPagePool`.

    Use: ``submit`` requests; each step ``plan = plan_step()``, prefill ``plan.admitted``, run the
    verify step on ``plan`` (``refresh_cache(cache, pool, plan.slots, plan.committed)`` gives the
    cache its tables), then ``commit({req_id: accepted + 1}, stop=...)``.
    """

    def __init__(self, pool: HelixPagePool, *, max_batch: int, draft_len: int, pages_per_seq: int):
        if not isinstance(pool, HelixPagePool):
            raise ValueError(f"pool must be a HelixPagePool, got {type(pool).__name__}")
        self.pool = pool
        self.max_batch = check_int("max_batch", max_batch)
        self.draft_len = check_int("draft_len", draft_len, 0)
        self.pages_per_seq = check_int("pages_per_seq", pages_per_seq)
        self.step = 0
        self._queue: collections.deque[Request] = collections.deque()
        self._known: set = set()
        self._rows: list = [None] * self.max_batch
        self._req: dict[Hashable, Request] = {}
        self._committed: dict[Hashable, int] = {}
        self._reserved = 0                      # super-blocks promised to active requests
        self._released: list = []
        self.admit_step: dict[Hashable, int] = {}
        self.finish_step: dict[Hashable, int] = {}
        self.final_length: dict[Hashable, int] = {}

    @property
    def group_len(self) -> int:
        return self.draft_len + 1

    def reservation(self, req: Request) -> int:
        """Super-blocks ``req`` may ever need: room for ``prompt + max_new_tokens + draft_len`` tokens."""
        return self.pool.superblocks_for(req.prompt_len + req.max_new_tokens + self.draft_len)

    # -- requests ------------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Queue ``req`` (FIFO by ``arrival_step``, then submission order)."""
        if not isinstance(req, Request):
            raise ValueError(f"req must be a Request, got {type(req).__name__}")
        if req.req_id in self._known:
            raise ValueError(f"req_id {req.req_id!r} was already submitted")
        need = self.reservation(req)
        if need > self.pages_per_seq or need > self.pool.usable_pages:
            raise ValueError(
                f"request {req.req_id!r} (prompt {req.prompt_len} + {req.max_new_tokens} new + "
                f"{self.draft_len} draft tokens) needs {need} pages per rank but a batch row holds "
                f"{self.pages_per_seq} and the pool {self.pool.usable_pages}")
        self._known.add(req.req_id)
        q = list(self._queue)
        i = len(q)
        while i and q[i - 1].arrival_step > req.arrival_step:
            i -= 1
        self._queue.insert(i, req)

    @property
    def active(self) -> tuple:
        return tuple(r for r in self._rows if r is not None)

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @property
    def done(self) -> bool:
        return not self._queue and not self.active

    def committed(self, req_id) -> int:
        return self._committed[req_id]

    # -- steps ---------------------------------------------------------------------------
    def plan_step(self) -> StepPlan:
        """Admit arrived requests (FIFO, while a row and their reservation fit), grow every active
        request's pages to ``committed + G``, and describe the batch."""
        admitted = []
        while self._queue and self._queue[0].arrival_step <= self.step and None in self._rows:
            req = self._queue[0]
            need = self.reservation(req)
            if self._reserved + need > self.pool.usable_pages:
                break                                          # head-of-line waits for pages
            self._queue.popleft()
            row = self._rows.index(None)
            self.pool.allocate(req.req_id, req.prompt_len + self.group_len)
            self._rows[row] = req.req_id
            self._req[req.req_id] = req
            self._committed[req.req_id] = req.prompt_len
            self._reserved += need
            self.admit_step[req.req_id] = self.step
            admitted.append((row, req))
        g = self.group_len
        # Never fails: every active request's pages stay within its admission reservation.
        self.pool.grow_many({r: self._committed[r] + g for r in self.active})
        committed = np.array([0 if r is None else self._committed[r] for r in self._rows], np.int32)
        active = np.array([r is not None for r in self._rows])
        positions = committed[:, None] + np.arange(g, dtype=np.int32)[None, :]
        table = self.pool.page_table(self._rows, pages_per_seq=self.pages_per_seq)
        released, self._released = tuple(self._released), []
        return StepPlan(self.step, tuple(self._rows), tuple(admitted), released, committed,
                        positions.astype(np.int32), active, table)

    def commit(self, new_tokens: Mapping[Hashable, int], *, stop: Iterable[Hashable] = ()) -> tuple:
        """Advance committed lengths after a verify step and release finished requests.

        ``new_tokens[req] = accepted + 1`` (in ``[1, G]``) for every active request; ``stop``:
        requests that ended early (EOS). A request also ends when its committed length reaches
        ``prompt_len + max_new_tokens``. Returns the released request ids.
        """
        act = set(self.active)
        if set(new_tokens) != act:
            raise ValueError(f"new_tokens must have one entry per active request {sorted(map(str, act))}, "
                             f"got {sorted(map(str, new_tokens))}")
        stop = set(stop)
        if not stop <= act:
            raise ValueError(f"stop names requests that are not active: {sorted(map(str, stop - act))}")
        for r, n in new_tokens.items():
            n = check_int(f"new_tokens[{r!r}]", n, 1)
            if n > self.group_len:
                raise ValueError(f"new_tokens[{r!r}]={n} exceeds the verify group G={self.group_len}")
            self._committed[r] += n
        finished = tuple(r for r in self._rows if r is not None and (
            r in stop or self._committed[r] >= self._req[r].prompt_len + self._req[r].max_new_tokens))
        for r in finished:
            self.release(r)
        self.step += 1
        return finished

    def idle(self) -> None:
        """Advance the step counter without a verify step (nothing active, arrivals pending)."""
        if self.active:
            raise ValueError("idle() with active requests; run the step and commit() instead")
        self.step += 1

    def release(self, req_id) -> None:
        """Free ``req_id``'s row, pages and reservation (finished or cancelled)."""
        if req_id not in self._req:
            raise ValueError(f"req_id {req_id!r} is not active")
        self.pool.free(req_id)
        self._rows[self._rows.index(req_id)] = None
        self._reserved -= self.reservation(self._req.pop(req_id))
        self.final_length[req_id] = self._committed.pop(req_id)
        self.finish_step[req_id] = self.step
        self._released.append(req_id)


@dataclasses.dataclass(frozen=True)
class ScheduleReport:
    steps: int                     # verify steps run
    idle_steps: int                # steps with nothing active (waiting for arrivals)
    peak_active: int
    peak_superblocks: int          # most super-blocks in use at once (per rank: pages)
    admit_step: dict
    finish_step: dict
    final_length: dict             # committed global length at release


def schedule_requests(requests: Iterable[Request], *, pool: HelixPagePool, max_batch: int,
                      draft_len: int, pages_per_seq: int, run_step: Callable[[StepPlan], Mapping],
                      on_admit: Callable[[StepPlan, int, Request], None] | None = None,
                      on_release: Callable[[Hashable], None] | None = None,
                      max_steps: int = 1_000_000) -> ScheduleReport:
    """Drive continuous batching to completion.

    Each step: admit arrived requests (``on_admit(plan, row, request)`` must write the prompt KV
    of the new row, e.g. with :func:`helix_jax.memory.write_prompt`), then
    ``run_step(plan) -> {req_id: n or (n, stop)}`` runs one verify step for every active row of
    ``plan`` and says how many tokens each request committed (``accepted + 1``) and whether it
    stopped (EOS). Released requests are reported to ``on_release(req_id)``.
    """
    b = ContinuousBatcher(pool, max_batch=max_batch, draft_len=draft_len, pages_per_seq=pages_per_seq)
    for r in requests:
        b.submit(r)
    steps = idle = peak_a = peak_sb = 0
    while not b.done:
        if steps + idle >= max_steps:
            raise RuntimeError(f"schedule_requests: not done after max_steps={max_steps}")
        plan = b.plan_step()
        if not plan.active.any():
            b.idle()
            idle += 1
            continue
        for row, req in plan.admitted:
            if on_admit is not None:
                on_admit(plan, row, req)
        peak_a = max(peak_a, int(plan.active.sum()))
        peak_sb = max(peak_sb, pool.used_superblocks)
        out = run_step(plan)
        if not isinstance(out, Mapping):
            raise ValueError(f"run_step must return a mapping req_id -> n or (n, stop), got {type(out).__name__}")
        n = {r: (v[0] if isinstance(v, tuple) else v) for r, v in out.items()}
        stop = [r for r, v in out.items() if isinstance(v, tuple) and v[1]]
        for r in b.commit(n, stop=stop):
            if on_release is not None:
                on_release(r)
        steps += 1
    return ScheduleReport(steps, idle, peak_a, peak_sb, dict(b.admit_step), dict(b.finish_step),
                          dict(b.final_length))


def staggered_requests(n: int, *, seed: int = 0, prompt_len: tuple[int, int] = (8, 64),
                       max_new_tokens: int | tuple[int, int] = 16, max_gap: int = 2) -> list[Request]:
    """``n`` requests with random prompt lengths in ``[lo, hi]`` and arrival gaps in ``[0, max_gap]`` steps."""
    n = check_int("n", n)
    lo, hi = prompt_len
    check_int("prompt_len[0]", lo)
    if hi < lo:
        raise ValueError(f"prompt_len must be (lo, hi) with lo <= hi, got {prompt_len}")
    rng = np.random.default_rng(seed)
    mn = (max_new_tokens, max_new_tokens) if isinstance(max_new_tokens, int) else max_new_tokens
    t, out = 0, []
    for i in range(n):
        out.append(Request(req_id=i, prompt_len=int(rng.integers(lo, hi + 1)),
                           max_new_tokens=int(rng.integers(mn[0], mn[1] + 1)), arrival_step=t))
        t += int(rng.integers(0, check_int("max_gap", max_gap, 0) + 1))
    return out
