"""Helix exchange: sanitize + pack, all-to-all over head groups, LSE combine (§6–§7)."""
from .api import (TRANSPORTS, combine_payload, exchange, peer_groups, resolve, resolve_transport,
                  sanitize_pack)

__all__ = ["TRANSPORTS", "combine_payload", "exchange", "peer_groups", "resolve", "resolve_transport",
           "sanitize_pack"]
