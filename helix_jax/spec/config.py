"""Spec-verify configuration and the Helix allowlist (HELIX_SEMANTICS.md §9.1, §9.5, R7).

Everything here runs on the host at configuration time and raises ``ValueError`` with a message
that says what is supported, so that an unsupported setup never runs wrong.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import quant
from ..models.config import MLAModelConfig

__all__ = ["SpecConfig", "MAX_DRAFT_LEN", "SUPPORTED_DRAFTING", "validate_spec_config",
           "fallback_supports_verify", "select_attention_backend"]

MAX_DRAFT_LEN = 7                       # DSpark: up to 7 draft tokens per step (G <= 8)
SUPPORTED_DRAFTING = ("dspark",)        # linear-chain drafting; "linear_chain" is an alias
_ALIASES = {"linear_chain": "dspark", "chain": "dspark"}
# Methods we know of but that Helix refuses (tree / dynamic-tree / custom-mask drafting).
_REFUSED_DRAFTING = ("eagle3", "eagle3_tree", "medusa", "dynamic_tree", "tree", "lookahead")
SAMPLING = ("greedy", "rejection")


def _int(name, v, lo, hi=None):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {v!r}")
    if v < lo or (hi is not None and v > hi):
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be in {rng}, got {v}")


@dataclasses.dataclass(frozen=True)
class SpecConfig:
    """Static configuration of the spec-verify step (hashable: a jit static argument).

    Fields:
      target, draft: model configs (same vocabulary; the drafter runs on the CP-free mapping).
      draft_len: drafts per step ``k`` in ``[1, 7]``; verify groups have ``G = 1 + k`` tokens.
      drafting: ``"dspark"`` (linear chain; alias ``"linear_chain"``) — the only method Helix admits.
      max_total_draft_tokens: draft-tree size; ``None`` means ``draft_len`` (a chain). Any other
        value describes a tree and is refused.
      sampling: ``"greedy"`` or ``"rejection"`` (speculative sampling at ``temperature > 0``).
      overlap: overlap-scheduler mode (positions packed from the stale base, corrected on device).
      page_size, max_len: target cache layout (``max_len`` global tokens per sequence).
      implementation: per-rank MLA decode backend (``None`` = auto).
      kv_dtype: target KV format, ``"bf16"`` (unquantized, stored in the model dtype),
        ``"fp8_e4m3"`` or ``"nvfp4"`` (see :mod:`helix_jax.quant`; lossy, so not greedy-exact).
    """
    target: MLAModelConfig = MLAModelConfig()
    draft: MLAModelConfig = MLAModelConfig(num_layers=1)
    draft_len: int = 3
    drafting: str = "dspark"
    max_total_draft_tokens: int | None = None
    sampling: str = "greedy"
    temperature: float = 1.0
    overlap: bool = False
    page_size: int = 64
    max_len: int = 256
    implementation: str | None = None
    kv_dtype: str = "bf16"
    axis_name: str = "cp"

    def __post_init__(self):
        for name in ("target", "draft"):
            if not isinstance(getattr(self, name), MLAModelConfig):
                raise ValueError(f"{name} must be an MLAModelConfig, got {type(getattr(self, name)).__name__}")
        if not isinstance(self.drafting, str):
            raise ValueError(f"drafting must be a string, got {self.drafting!r}")
        method = _ALIASES.get(self.drafting, self.drafting)
        if method not in SUPPORTED_DRAFTING:
            if method in _REFUSED_DRAFTING:
                raise ValueError(
                    f"drafting={self.drafting!r} is not admitted under Helix: only linear-chain drafting "
                    f"(drafting='dspark', alias 'linear_chain') is supported with Helix context parallelism")
            raise ValueError(f"unknown drafting method {self.drafting!r}; under Helix the supported method is "
                             "'dspark' (linear-chain drafting, alias 'linear_chain')")
        object.__setattr__(self, "drafting", method)
        _int("draft_len", self.draft_len, 1, MAX_DRAFT_LEN)
        if self.max_total_draft_tokens is not None and self.max_total_draft_tokens != self.draft_len:
            raise ValueError(
                f"max_total_draft_tokens={self.max_total_draft_tokens!r} != draft_len={self.draft_len} "
                "describes a tree-shaped draft; under Helix only linear chains are supported "
                "(max_total_draft_tokens must be None or equal to draft_len)")
        if self.sampling not in SAMPLING:
            raise ValueError(f"sampling must be one of {SAMPLING}, got {self.sampling!r}")
        t = self.temperature
        if not (isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0):
            raise ValueError(f"temperature must be a finite float > 0, got {t!r}")
        if not isinstance(self.overlap, bool):
            raise ValueError(f"overlap must be a bool, got {self.overlap!r}")
        _int("page_size", self.page_size, 1)
        _int("max_len", self.max_len, 1 + self.draft_len + 1)
        if self.draft.vocab_size != self.target.vocab_size:
            raise ValueError(f"draft.vocab_size={self.draft.vocab_size} must equal target.vocab_size="
                             f"{self.target.vocab_size} (acceptance compares token ids)")
        quant.check_kv_dtype(self.kv_dtype)
        if self.implementation is not None and not isinstance(self.implementation, str):
            raise ValueError(f"implementation must be a backend name or None, got {self.implementation!r}")

    @property
    def group_len(self) -> int:
        """``G = 1 + draft_len``."""
        return 1 + self.draft_len

    def replace(self, **kw) -> "SpecConfig":
        return dataclasses.replace(self, **kw)


def validate_spec_config(config: SpecConfig, *, cp_size: int) -> None:
    """Checks that depend on the mesh: ``num_heads % cp == 0`` (Helix all-to-all over head groups)."""
    if not isinstance(config, SpecConfig):
        raise ValueError(f"config must be a SpecConfig, got {type(config).__name__}")
    _int("cp_size", cp_size, 1)
    h = config.target.num_heads
    if h % cp_size:
        raise ValueError(f"target num_heads={h} must be divisible by cp={cp_size} "
                         f"(Helix sends H/cp heads to each rank); use cp in "
                         f"{[c for c in range(1, h + 1) if h % c == 0]}")


def fallback_supports_verify(*, position_offsets_present: bool, spec_tokens_valid: bool,
                             num_generations: int, q_tokens: int, num_ctx_tokens: int) -> tuple[bool, str]:
    """Whether the generic attention fallback can run this batch (§9.5, R7).

    The fallback assumes the new KV of a generation row are the trailing slots of one rank's
    kv_len, so it cannot honour per-token bounds. It is unsupported iff Helix position offsets are
    present, the spec-token flag is valid, there are generation rows, and the generation part has
    more tokens than rows: ``(q_tokens - num_ctx_tokens) > num_generations``.
    Returns ``(supported, reason)``.
    """
    for name, v in (("num_generations", num_generations), ("q_tokens", q_tokens), ("num_ctx_tokens", num_ctx_tokens)):
        _int(name, v, 0)
    if num_ctx_tokens > q_tokens:
        raise ValueError(f"num_ctx_tokens={num_ctx_tokens} cannot exceed q_tokens={q_tokens}")
    gen_tokens = q_tokens - num_ctx_tokens
    if position_offsets_present and spec_tokens_valid and num_generations > 0 and gen_tokens > num_generations:
        return False, (f"fallback attention cannot honour per-token Helix kv_bounds: {gen_tokens} generation tokens "
                       f"for {num_generations} generation rows (verify groups need a bounded-decode backend)")
    return True, ""


def select_attention_backend(backends, **batch) -> str:
    """First backend in ``backends`` (sequence of ``(name, supports(**batch) -> (ok, reason))``) that
    supports ``batch``; raises ``ValueError`` listing every refusal when none does (the fallback
    is last, so its refusal makes dispatch raise rather than run wrong)."""
    reasons = []
    for name, supports in backends:
        ok, why = supports(**batch)
        if ok:
            return name
        reasons.append(f"{name}: {why}")
    raise ValueError("no attention backend supports this batch: " + "; ".join(reasons))
