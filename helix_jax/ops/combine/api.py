"""Public entry for the LSE combine (one dispatch point for its backends)."""
from __future__ import annotations

from . import reference


def combine(outs, lses, *, axis: int, implementation: str | None = None):
    """Exact LSE merge of partials along ``axis``; see :func:`reference.combine` for the contract."""
    if implementation not in (None, "reference", "xla"):
        raise ValueError(f"implementation must be None, 'reference' or 'xla' for combine, got {implementation!r}")
    return reference.combine(outs, lses, axis=axis)
