"""Helix exchange: sanitize + pack, all-to-all over head groups, LSE combine (§6–§7)."""
from .api import combine_payload, exchange, resolve, sanitize_pack

__all__ = ["combine_payload", "exchange", "resolve", "sanitize_pack"]
