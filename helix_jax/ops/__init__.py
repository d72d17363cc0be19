"""Ops: one folder per op, each with a public ``api`` and its backends."""
from .combine import combine
from .mla_decode import mla_decode

__all__ = ["mla_decode", "combine"]
