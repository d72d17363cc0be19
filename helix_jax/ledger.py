"""Round-robin page ledger: pure int32 math for Helix CP ownership (HELIX_SEMANTICS.md §2–§3, §8).

Global page ``b`` (positions ``[b*P, (b+1)*P)``) lives on rank ``b % cp``. Every function here is
jit- and vmap-able, broadcasts its array arguments, and accepts a traced ``rank``
(e.g. ``lax.axis_index("cp")``). Nothing here depends on the rest of the package.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "owner", "local_len", "local_slots", "kv_bounds", "VerifyMetadata", "verify_metadata",
    "correct_positions", "pack_groups", "capacity", "pages_per_rank",
]


def _check_layout(page_size, cp_size):
    for name, v in (("page_size", page_size), ("cp_size", cp_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{name} must be a Python int >= 1, got {v!r}")
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")


def _i32(x, name):
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise ValueError(f"{name} must be an integer array, got dtype {x.dtype}")
    return x.astype(jnp.int32)


def owner(positions, *, page_size: int, cp_size: int):
    """Rank that owns each global position: ``(pos // P) % cp``. int32, same shape."""
    _check_layout(page_size, cp_size)
    p = _i32(positions, "positions")
    return (p // page_size) % cp_size


def local_len(g, rank, *, page_size: int, cp_size: int):
    """Number of positions in ``[0, g)`` owned by ``rank`` (closed form, §2.2). int32, broadcast."""
    _check_layout(page_size, cp_size)
    g = _i32(g, "g")
    r = _i32(rank, "rank")
    span = page_size * cp_size
    full, rem = g // span, g % span
    return full * page_size + jnp.clip(rem - r * page_size, 0, page_size)


def local_slots(positions, rank, *, page_size: int, cp_size: int):
    """Rank-local write index of each position (``L_r(pos)``), or -1 where ``rank`` does not own it."""
    own = owner(positions, page_size=page_size, cp_size=cp_size)
    r = _i32(rank, "rank")
    return jnp.where(own == r, local_len(positions, rank, page_size=page_size, cp_size=cp_size), -1)


def kv_bounds(positions, rank, *, page_size: int, cp_size: int):
    """Exclusive bound of rank-local entries visible to each token: ``L_r(pos + 1)``.

    Includes the token itself when ``rank`` owns it (causal with the diagonal); 0 means the rank
    contributes nothing for that token.
    """
    p = _i32(positions, "positions")
    return local_len(p + 1, rank, page_size=page_size, cp_size=cp_size)


class VerifyMetadata(NamedTuple):
    """Per-rank metadata of a batch of verify groups (§2.4). All int32."""
    local_slots: jax.Array       # [B, G] rank-local write index, -1 if not owned
    kv_bounds: jax.Array         # [B, G] exclusive visible bound per token
    kv_lens: jax.Array           # [B]    rank-local length after the group = bound of last token
    cached_lens: jax.Array       # [B]    rank-local committed length before the group
    owned_new_tokens: jax.Array  # [B]    group tokens this rank owns (kv_lens - cached_lens)


def _is_concrete(x) -> bool:
    try:
        np.asarray(x)
        return True
    except Exception:  # tracer
        return False


def verify_metadata(positions, rank, *, page_size: int, cp_size: int) -> VerifyMetadata:
    """Metadata of verify groups ``positions [B, G]`` (global positions ``p0 + j``) on ``rank``.

    Groups must be uniform (a rectangular ``[B, G]`` array) and consecutive
    (``positions[:, j] == positions[:, 0] + j``); consecutiveness is checked whenever the
    positions are concrete (outside ``jit``). Closed forms hold for any G, also ``G > P``.
    """
    if isinstance(positions, (list, tuple)):
        lens = {len(row) if hasattr(row, "__len__") else -1 for row in positions}
        if len(lens) > 1:
            raise ValueError(
                "positions: verify groups must be uniform (every row G tokens); got row lengths "
                f"{sorted(lens)} (R8: pack a request without drafts separately, never mis-slice)")
    p = _i32(positions, "positions")
    if p.ndim != 2:
        raise ValueError(f"positions must have shape [B, G], got {p.shape}")
    if p.shape[1] < 1:
        raise ValueError("positions: group length G must be >= 1")
    if _is_concrete(p):
        host = np.asarray(p)
        if np.any(host < 0):
            raise ValueError("positions must be >= 0")
        step = host - host[:, :1]
        if not np.array_equal(step, np.broadcast_to(np.arange(host.shape[1]), host.shape)):
            bad = int(np.nonzero((step != np.arange(host.shape[1])).any(axis=1))[0][0])
            raise ValueError(
                f"positions: verify group {bad} is not consecutive ({host[bad].tolist()}); "
                "groups must be p0, p0+1, ..., p0+G-1 (linear chains only)")
    slots = local_slots(p, rank, page_size=page_size, cp_size=cp_size)
    bounds = kv_bounds(p, rank, page_size=page_size, cp_size=cp_size)
    kv_len = bounds[:, -1]
    cached = local_len(p[:, 0], rank, page_size=page_size, cp_size=cp_size)
    return VerifyMetadata(slots, bounds, kv_len, cached, kv_len - cached)


def pack_groups(flat_positions, *, group_len: int, num_generations: int):
    """Reshape generation-relative per-token positions ``[T]`` into uniform groups ``[B, G]``.

    Raises (R8) unless ``T % G == 0`` and ``T // G == num_generations``.
    """
    p = _i32(flat_positions, "flat_positions")
    if p.ndim != 1:
        raise ValueError(f"flat_positions must be 1-D [T], got shape {p.shape}")
    t = p.shape[0]
    if group_len < 1 or t % group_len != 0 or t // group_len != num_generations:
        raise ValueError(
            f"flat_positions: {t} generation tokens cannot form {num_generations} uniform verify "
            f"groups of group_len={group_len} (need T % G == 0 and T // G == num_generations)")
    return p.reshape(num_generations, group_len)


def correct_positions(positions, accepted, draft_len: int, *, in_flight=None):
    """Overlap-scheduler stale-base correction (§8 step 2, R4, R14).

    ``positions [B, G]`` were packed on the host assuming every draft of the previous step was
    accepted. ``accepted [B]`` is the number of drafts that step really accepted (``0..draft_len``).
    Each row shifts by ``delta = accepted - draft_len <= 0``. Rows whose ``in_flight [B]`` is False
    (no predecessor in flight) are left unchanged.
    """
    if isinstance(draft_len, bool) or not isinstance(draft_len, (int, np.integer)) or draft_len < 0:
        raise ValueError(f"draft_len must be an int >= 0, got {draft_len!r}")
    p = _i32(positions, "positions")
    a = _i32(accepted, "accepted")
    if p.ndim != 2 or a.shape != p.shape[:1]:
        raise ValueError(
            f"positions must be [B, G] and accepted [B]; got {p.shape} and {a.shape}")
    if _is_concrete(a):
        host = np.asarray(a)
        if np.any(host < 0) or np.any(host > draft_len):
            raise ValueError(f"accepted must lie in [0, draft_len={draft_len}], got {host.tolist()}")
    delta = a - draft_len
    if in_flight is not None:
        delta = jnp.where(jnp.asarray(in_flight, bool), delta, 0)
    return p + delta[:, None]


def pages_per_rank(max_len: int, *, page_size: int, cp_size: int) -> int:
    """Pages each rank needs per sequence to hold ``max_len`` global tokens (whole super-blocks)."""
    _check_layout(page_size, cp_size)
    return -(-int(max_len) // (page_size * cp_size))


def capacity(pages_per_seq: int, *, page_size: int, cp_size: int) -> int:
    """Global tokens a sequence can hold when every rank has ``pages_per_seq`` local pages."""
    _check_layout(page_size, cp_size)
    return int(pages_per_seq) * page_size * cp_size
