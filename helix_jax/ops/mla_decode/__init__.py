"""Bounded MLA decode of one rank's paged KV."""
from .api import BACKENDS, mla_decode

__all__ = ["mla_decode", "BACKENDS"]
