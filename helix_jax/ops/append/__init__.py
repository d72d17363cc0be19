"""Append-and-quantize of new KV rows into paged pools: a Pallas kernel twin of ``cache.append_kv``."""
from .pallas import append_rows

__all__ = ["append_rows"]
