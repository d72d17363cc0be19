"""Quota conversions between rank-local bytes, physical tokens and global ledger tokens (§9.3).

Under Helix each rank holds exactly one physical page per super-block of ``page_size * cp``
global tokens (§2, §4), so a rank-local quota only means something in whole pages, and a global
demand always costs whole super-blocks on *every* rank. All functions are host-side integer math.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "check_int", "physical_tokens_from_bytes", "usable_physical_tokens", "physical_to_global_tokens",
    "local_bytes_to_global_tokens", "global_to_superblocks", "global_to_physical_tokens",
    "pages_from_bytes",
]


def check_int(name: str, v, lo: int = 1) -> int:
    """``v`` as a Python int, or a ``ValueError`` naming ``name`` unless it is an int >= ``lo``."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    return int(v)


def physical_tokens_from_bytes(budget_bytes: int, *, bytes_per_token: int) -> int:
    """Rank-local byte budget -> rank-local (physical) tokens it can hold, rounded down."""
    budget_bytes = check_int("budget_bytes", budget_bytes, 0)
    bytes_per_token = check_int("bytes_per_token", bytes_per_token)
    return budget_bytes // bytes_per_token


def usable_physical_tokens(physical_tokens: int, *, page_size: int) -> int:
    """Floor a rank-local token count to whole pages (100 tokens, P=32 -> 96)."""
    physical_tokens = check_int("physical_tokens", physical_tokens, 0)
    page_size = check_int("page_size", page_size)
    return physical_tokens // page_size * page_size


def physical_to_global_tokens(physical_tokens: int, *, page_size: int, cp_size: int) -> int:
    """Rank-local tokens -> global ledger tokens: whole pages x cp (100, P=32, C=4 -> 96 -> 384).

    Every rank holds one page per super-block, so ``n`` usable pages on each rank are ``n``
    super-blocks = ``n * P * C`` global tokens.
    """
    cp_size = check_int("cp_size", cp_size)
    return usable_physical_tokens(physical_tokens, page_size=page_size) * cp_size


def local_bytes_to_global_tokens(budget_bytes: int, *, bytes_per_token: int, page_size: int,
                                 cp_size: int) -> int:
    """Rank-local byte budget -> physical tokens -> whole pages -> global ledger tokens."""
    phys = physical_tokens_from_bytes(budget_bytes, bytes_per_token=bytes_per_token)
    return physical_to_global_tokens(phys, page_size=page_size, cp_size=cp_size)


def global_to_superblocks(global_tokens: int, *, page_size: int, cp_size: int) -> int:
    """Super-blocks (one page on every rank) needed for ``global_tokens``: ``ceil(g / (P*C))``."""
    global_tokens = check_int("global_tokens", global_tokens, 0)
    span = check_int("page_size", page_size) * check_int("cp_size", cp_size)
    return -(-global_tokens // span)


def global_to_physical_tokens(global_tokens: int, *, page_size: int, cp_size: int) -> int:
    """Physical tokens each rank reserves for ``global_tokens`` (401, P=32, C=4 -> 4 blocks -> 128).

    Not ``ceil(global / C)``: the ledger hands out whole super-blocks, one page per rank each.
    """
    return global_to_superblocks(global_tokens, page_size=page_size, cp_size=cp_size) * page_size


def pages_from_bytes(budget_bytes: int, *, bytes_per_token: int, page_size: int) -> int:
    """Whole pages of ``page_size`` tokens that fit in a rank-local byte budget."""
    phys = physical_tokens_from_bytes(budget_bytes, bytes_per_token=bytes_per_token)
    return usable_physical_tokens(phys, page_size=page_size) // page_size
