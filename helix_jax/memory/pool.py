"""Super-block page pool per CP rank (HELIX_SEMANTICS.md §2.3, §4, §9.3).

A request holding ``n`` super-blocks owns exactly one page on every rank per super-block: its
rank-``r`` local page ``k`` holds global positions ``[(k*C + r)*P, (k*C + r + 1)*P)``. So growing to
``g`` global tokens costs ``ceil(g / (P*C))`` pages on *every* rank (never ``ceil(g / C)`` tokens),
and all ranks' free counts stay equal, which is what makes all-or-nothing allocation cheap.

Host-side Python: each operation costs O(pages it touches); building a page table costs its size.
"""
from __future__ import annotations

from typing import Hashable, Iterable, Mapping, Sequence

import numpy as np

from .quota import check_int, global_to_superblocks

__all__ = ["OutOfPagesError", "HelixPagePool"]


class OutOfPagesError(ValueError):
    """The pool cannot hold the requested tokens; nothing was allocated (the pool is unchanged).

    Attributes: ``needed`` and ``free`` super-blocks (one page per rank each).
    """

    def __init__(self, message: str, *, needed: int, free: int):
        super().__init__(message)
        self.needed = needed
        self.free = free


class HelixPagePool:
    """Page allocator for one Helix KV cache: ``cp`` rank pools of ``num_pages`` pages each.

    Args (keyword-only):
      num_pages: pages in each rank's pool (``HelixMLACache.num_pages``).
      page_size: tokens per page ``P``.
      cp_size: CP ranks ``C``; 1 gives an ordinary paged pool (e.g. the CP-free draft cache).
      reserve_null_page: keep page ``0`` of every rank out of circulation as the *null page*; it
        pads page tables (empty batch slots, unused entries) so that padding rows read and write
        a harmless page instead of another request's KV.
      seed: if given, every rank hands out its pages in its own random order (realism, tests);
        otherwise in increasing id order.
    """

    def __init__(self, *, num_pages: int, page_size: int, cp_size: int,
                 reserve_null_page: bool = True, seed: int | None = None):
        self.num_pages = check_int("num_pages", num_pages, 2 if reserve_null_page else 1)
        self.page_size = check_int("page_size", page_size)
        self.cp_size = check_int("cp_size", cp_size)
        self.null_page = 0 if reserve_null_page else None
        first = 1 if reserve_null_page else 0
        rng = None if seed is None else np.random.default_rng(seed)
        self._free: list[list[int]] = []
        for _ in range(self.cp_size):
            ids = np.arange(first, self.num_pages)
            if rng is not None:
                ids = rng.permutation(ids)
            self._free.append(ids[::-1].tolist())     # pop() from the end hands out ids[0] first
        self._blocks: dict[Hashable, list[tuple[int, ...]]] = {}   # req -> per super-block: page per rank
        self._tokens: dict[Hashable, int] = {}

    # -- capacity -------------------------------------------------------------------------
    @property
    def usable_pages(self) -> int:
        """Pages per rank that can hold KV (the null page excluded)."""
        return self.num_pages - (self.null_page is not None)

    @property
    def superblock_tokens(self) -> int:
        """Global tokens per super-block, ``P * C``."""
        return self.page_size * self.cp_size

    @property
    def local_capacity_tokens(self) -> int:
        """Rank-local tokens one rank's pool holds (the same on every rank)."""
        return self.usable_pages * self.page_size

    @property
    def global_capacity_tokens(self) -> int:
        """Global ledger tokens the whole pool holds = sum over ranks of the local capacity."""
        return self.usable_pages * self.superblock_tokens

    @property
    def free_superblocks(self) -> int:
        return len(self._free[0])

    @property
    def used_superblocks(self) -> int:
        return self.usable_pages - self.free_superblocks

    def free_pages(self, rank: int) -> int:
        """Free pages on ``rank`` (equal on every rank)."""
        return len(self._free[self._rank(rank)])

    def superblocks_for(self, global_tokens: int) -> int:
        """Super-blocks needed for ``global_tokens``: ``ceil(g / (P*C))``."""
        return global_to_superblocks(global_tokens, page_size=self.page_size, cp_size=self.cp_size)

    def can_hold(self, global_tokens: int) -> bool:
        """Whether a *new* request of ``global_tokens`` would fit now."""
        return self.superblocks_for(global_tokens) <= self.free_superblocks

    # -- requests -------------------------------------------------------------------------
    @property
    def requests(self) -> tuple:
        return tuple(self._blocks)

    def __contains__(self, req_id) -> bool:
        return req_id in self._blocks

    def num_superblocks(self, req_id) -> int:
        return len(self._get(req_id))

    def reserved_tokens(self, req_id) -> int:
        """Largest global length ``req_id`` was grown to (its pages hold at least this many)."""
        self._get(req_id)
        return self._tokens[req_id]

    def capacity_of(self, req_id) -> int:
        """Global tokens ``req_id``'s pages can hold (whole super-blocks)."""
        return self.num_superblocks(req_id) * self.superblock_tokens

    def pages(self, req_id) -> np.ndarray:
        """``[cp, n_superblocks]`` int32 rank-local page ids of ``req_id`` (row r = rank r's table)."""
        blocks = self._get(req_id)
        out = np.asarray(blocks, np.int32).reshape(len(blocks), self.cp_size)
        return np.ascontiguousarray(out.T)

    def allocate(self, req_id: Hashable, global_tokens: int) -> int:
        """Admit a new request with room for ``global_tokens``; returns super-blocks allocated.

        Raises ``ValueError`` if ``req_id`` is already present, :class:`OutOfPagesError` (pool
        unchanged) if the pool is too full.
        """
        if req_id in self._blocks:
            raise ValueError(f"req_id {req_id!r} is already allocated; use grow()")
        global_tokens = check_int("global_tokens", global_tokens, 0)
        self._reserve({req_id: self.superblocks_for(global_tokens)})
        self._blocks[req_id] = []
        self._tokens[req_id] = 0
        return self._grow_unchecked(req_id, global_tokens)

    def grow(self, req_id: Hashable, global_tokens: int) -> int:
        """Grow ``req_id`` to hold at least ``global_tokens`` (never shrinks); returns new super-blocks."""
        return self.grow_many({req_id: global_tokens})

    def ensure_step(self, req_id: Hashable, *, committed_len: int, group_len: int) -> int:
        """Grow ``req_id`` for its next verify group: positions ``[0, committed_len + group_len)``."""
        committed_len = check_int("committed_len", committed_len, 0)
        group_len = check_int("group_len", group_len, 1)
        return self.grow(req_id, committed_len + group_len)

    def grow_many(self, targets: Mapping[Hashable, int]) -> int:
        """Grow several requests at once, all or nothing; returns super-blocks allocated in total.

        ``targets``: ``{req_id: global_tokens}``. On :class:`OutOfPagesError` nothing changed.
        """
        need = {}
        for req_id, tokens in targets.items():
            blocks = self._get(req_id)
            tokens = check_int(f"global_tokens[{req_id!r}]", tokens, 0)
            need[req_id] = max(0, self.superblocks_for(tokens) - len(blocks))
        self._reserve(need)
        return sum(self._grow_unchecked(r, targets[r]) for r in targets)

    def free(self, req_id: Hashable) -> int:
        """Release every page of ``req_id`` (request finished or preempted); returns super-blocks freed."""
        blocks = self._get(req_id)
        for block in reversed(blocks):            # LIFO: recently used pages are reused first
            for r, page in enumerate(block):
                self._free[r].append(page)
        del self._blocks[req_id], self._tokens[req_id]
        return len(blocks)

    # -- page tables ----------------------------------------------------------------------
    def page_table(self, slots: Sequence[Hashable | None], *, pages_per_seq: int) -> np.ndarray:
        """Page tables of a batch: ``[cp, B, pages_per_seq]`` int32 rank-local page ids.

        ``slots[b]`` is the request in batch row ``b`` or ``None`` (an empty row). Entries past a
        request's super-blocks, and empty rows, hold the null page.
        """
        pages_per_seq = check_int("pages_per_seq", pages_per_seq)
        if self.null_page is None:
            raise ValueError("page_table needs a pool built with reserve_null_page=True (padding rows)")
        if isinstance(slots, (str, bytes)) or not isinstance(slots, Iterable):
            raise ValueError(f"slots must be a sequence of request ids or None, got {type(slots).__name__}")
        slots = list(slots)
        seen = set()
        out = np.full((self.cp_size, len(slots), pages_per_seq), self.null_page, np.int32)
        for b, req_id in enumerate(slots):
            if req_id is None:
                continue
            if req_id in seen:
                raise ValueError(f"slots: request {req_id!r} appears in two batch rows")
            seen.add(req_id)
            blocks = self._get(req_id)
            if len(blocks) > pages_per_seq:
                raise ValueError(
                    f"slots: request {req_id!r} holds {len(blocks)} super-blocks but the table has "
                    f"pages_per_seq={pages_per_seq}")
            if blocks:
                out[:, b, : len(blocks)] = np.asarray(blocks, np.int32).T
        return out

    # -- invariants -----------------------------------------------------------------------
    def snapshot(self) -> tuple:
        """A hashable copy of the whole allocator state (equal snapshots = identical pools)."""
        return (tuple(tuple(f) for f in self._free),
                tuple((k, tuple(v), self._tokens[k]) for k, v in self._blocks.items()))

    def check(self) -> None:
        """Verify the invariants (O(pool size)); raises ``RuntimeError`` naming the broken one.

        Every usable page of every rank is either free or owned by exactly one request, never
        both; the null page is never handed out; every request holds ``superblocks_for(reserved)``
        super-blocks; all ranks have the same number of free pages.
        """
        for r in range(self.cp_size):
            owned = [b[r] for blocks in self._blocks.values() for b in blocks]
            every = owned + self._free[r]
            if len(set(every)) != len(every):
                raise RuntimeError(f"rank {r}: a page is assigned twice (free or owned)")
            expect = set(range(self.num_pages)) - ({self.null_page} if self.null_page is not None else set())
            if set(every) != expect:
                raise RuntimeError(f"rank {r}: pages leaked or invented: {sorted(expect ^ set(every))[:8]}")
        if len({len(f) for f in self._free}) != 1:
            raise RuntimeError(f"ranks disagree on free pages: {[len(f) for f in self._free]}")
        for req_id, blocks in self._blocks.items():
            if any(len(b) != self.cp_size for b in blocks):
                raise RuntimeError(f"request {req_id!r}: a super-block lacks a page on some rank")
            if len(blocks) != self.superblocks_for(self._tokens[req_id]):
                raise RuntimeError(f"request {req_id!r}: {len(blocks)} super-blocks for "
                                   f"{self._tokens[req_id]} tokens")

    # -- internals ------------------------------------------------------------------------
    def _rank(self, rank) -> int:
        rank = check_int("rank", rank, 0)
        if rank >= self.cp_size:
            raise ValueError(f"rank must be in [0, cp_size={self.cp_size}), got {rank}")
        return rank

    def _get(self, req_id):
        try:
            return self._blocks[req_id]
        except KeyError:
            raise ValueError(f"req_id {req_id!r} is not allocated in this pool") from None
        except TypeError:
            raise ValueError(f"req_id must be hashable, got {type(req_id).__name__}") from None

    def _reserve(self, need: Mapping[Hashable, int]) -> None:
        total = sum(need.values())
        if total > self.free_superblocks:
            per = ", ".join(f"{k!r}: {v}" for k, v in need.items() if v)
            raise OutOfPagesError(
                f"out of KV pages: need {total} super-blocks ({per}; one page on each of "
                f"{self.cp_size} ranks, {self.superblock_tokens} global tokens each) but only "
                f"{self.free_superblocks} of {self.usable_pages} are free",
                needed=total, free=self.free_superblocks)

    def _grow_unchecked(self, req_id, global_tokens: int) -> int:
        blocks = self._blocks[req_id]
        add = self.superblocks_for(global_tokens) - len(blocks)
        for _ in range(add):
            blocks.append(tuple(f.pop() for f in self._free))
        self._tokens[req_id] = max(self._tokens[req_id], global_tokens)
        return max(add, 0)
