"""Mappings and the per-rank KV-cache cost model (HELIX_SEMANTICS.md §9.2, §9.3, R15, R16).

A cost is ``bytes = slope * tokens + intercept * requests`` on one rank. Under Helix the budget is
counted in **rank-local target tokens**: one such token stands for ``C`` global tokens, and the
CP-free draft keeps every global token on every rank, so the draft's slope is multiplied by ``C``
while its intercept (already rank-local bytes per request) is unchanged.
"""
from __future__ import annotations

import dataclasses

from .quota import check_int

__all__ = ["Mapping", "draft_mapping", "CacheCost", "helix_draft_cost", "require_cp_free",
           "mla_bytes_per_token"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mapping:
    """Parallel layout of one rank: attention TP width, CP (Helix KVP) width, world, rank.

    ``world`` defaults to ``tp * cp``; it must be a multiple of ``tp * cp`` and ``0 <= rank < world``.
    ``attention_dp``: every rank runs attention on its own requests (recurrent state replicated).
    """
    tp: int = 1
    cp: int = 1
    world: int | None = None
    rank: int = 0
    attention_dp: bool = False

    def __post_init__(self):
        check_int("tp", self.tp)
        check_int("cp", self.cp)
        if self.world is None:
            object.__setattr__(self, "world", self.tp * self.cp)
        check_int("world", self.world)
        if self.world % (self.tp * self.cp):
            raise ValueError(f"world={self.world} must be a multiple of tp*cp={self.tp * self.cp}")
        check_int("rank", self.rank, 0)
        if self.rank >= self.world:
            raise ValueError(f"rank must be in [0, world={self.world}), got {self.rank}")
        if not isinstance(self.attention_dp, bool):
            raise ValueError(f"attention_dp must be a bool, got {self.attention_dp!r}")

    @property
    def is_helix(self) -> bool:
        return self.cp > 1


def draft_mapping(mapping: Mapping) -> Mapping:
    """The CP-free mapping of the draft model (§9.2): CP repurposed as TP, same world and rank."""
    if not isinstance(mapping, Mapping):
        raise ValueError(f"mapping must be a helix_jax.memory.Mapping, got {type(mapping).__name__}")
    return dataclasses.replace(mapping, tp=mapping.tp * mapping.cp, cp=1)


def require_cp_free(mapping: Mapping, *, what: str = "the draft KV manager") -> Mapping:
    """R15: reject a Helix mapping where only a CP-free one makes sense."""
    if not isinstance(mapping, Mapping):
        raise ValueError(f"mapping must be a helix_jax.memory.Mapping, got {type(mapping).__name__}")
    if mapping.cp != 1:
        raise ValueError(f"{what} needs the CP-free mapping (cp=1) but got cp={mapping.cp}; "
                         f"pass draft_mapping(mapping) = {draft_mapping(mapping)}")
    return mapping


@dataclasses.dataclass(frozen=True)
class CacheCost:
    """Per-rank cache cost: ``slope`` bytes per (rank-local) token + ``intercept`` bytes per request."""
    slope: int
    intercept: int = 0

    def __post_init__(self):
        check_int("slope", self.slope, 0)
        check_int("intercept", self.intercept, 0)

    def bytes(self, tokens: int, requests: int = 1) -> int:
        return self.slope * check_int("tokens", tokens, 0) + self.intercept * check_int("requests", requests, 0)

    def __add__(self, other: "CacheCost") -> "CacheCost":
        return CacheCost(self.slope + other.slope, self.intercept + other.intercept)


def helix_draft_cost(cp_free: CacheCost, *, cp: int) -> CacheCost:
    """A CP-free draft cost re-expressed per rank-local target token (R16): ``(slope*cp, intercept)``."""
    if not isinstance(cp_free, CacheCost):
        raise ValueError(f"cp_free must be a CacheCost, got {type(cp_free).__name__}")
    return CacheCost(cp_free.slope * check_int("cp", cp), cp_free.intercept)


def mla_bytes_per_token(*, num_layers: int, dtype_bytes: int, kv_lora_rank: int = 512,
                        rope_dim: int = 64) -> int:
    """MLA cache bytes per token on one rank: ``(512 + 64) * dtype_bytes * layers``.

    MLA has one latent KV head, so attention TP replicates it (no division by tp).
    """
    return ((check_int("kv_lora_rank", kv_lora_rank) + check_int("rope_dim", rope_dim, 0))
            * check_int("dtype_bytes", dtype_bytes) * check_int("num_layers", num_layers, 0))
