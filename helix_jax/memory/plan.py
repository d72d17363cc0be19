"""Per-rank memory plan: weights, target KV (Helix), draft KV (CP-free), recurrent state (§9).

The split maximises concurrent requests of a given context length and draft length: each request
costs, on every rank, whole target pages (``ceil((context+G)/(P*C))`` super-blocks, one page per
rank each), the draft's pages for the same global tokens on the CP-free mapping, and its recurrent
state. Any split holding ``n`` requests needs ``n`` times that, so ``n = floor(budget / per_request)``
is optimal; the remainder is shared between the two KV pools in proportion to their cost.
"""
from __future__ import annotations

import dataclasses

from .cost import CacheCost, Mapping, draft_mapping, helix_draft_cost
from .presets import ModelPreset, get_preset
from .quota import check_int, global_to_superblocks
from .state import effective_tp, state_bytes_per_request

__all__ = ["target_cache_cost", "draft_cache_cost", "BudgetSplit", "split_budget", "MemoryPlan",
           "plan_memory", "GIB"]

GIB = 1 << 30


def _preset(model) -> ModelPreset:
    return model if isinstance(model, ModelPreset) else get_preset(model)


def target_cache_cost(model, mapping: Mapping, *, kv_dtype: str | None = None) -> CacheCost:
    """Target cost per rank-local token under ``mapping``; intercept = its recurrent state per request."""
    m = _preset(model)
    return CacheCost(m.kv_bytes_per_token(kv_dtype), state_bytes_per_request(m.recurrent, mapping))


def draft_cache_cost(draft, mapping: Mapping, *, kv_dtype: str | None = None) -> CacheCost:
    """The draft's cost per rank-local *target* token (R16).

    ``mapping`` is the target's (possibly Helix) mapping; the draft's own cost is computed on
    ``draft_mapping(mapping)`` (CP-free) and its slope scaled by ``cp``.
    """
    d = _preset(draft)
    cp_free = draft_mapping(mapping)
    own = CacheCost(d.kv_bytes_per_token(kv_dtype), state_bytes_per_request(d.recurrent, cp_free))
    return helix_draft_cost(own, cp=mapping.cp)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BudgetSplit:
    """How one rank's KV budget is cut. Page counts include each pool's null page."""
    max_requests: int
    superblocks_per_request: int
    target_pages: int        # per rank, page_size tokens each (rank-local)
    draft_pages: int         # per rank, CP-free pool, page_size tokens each (global tokens)
    state_bytes: int         # recurrent state pool (target + draft), max_requests slots
    target_bytes: int
    draft_bytes: int
    request_bytes: int       # per rank, one request
    unused_bytes: int


def split_budget(budget_bytes: int, *, target: CacheCost, draft: CacheCost | None, cp: int,
                 page_size: int, superblocks_per_request: int) -> BudgetSplit:
    """Split a rank-local byte budget between the target KV, draft KV and state pools.

    Args:
      target: target cost per rank-local token (intercept = recurrent state per request).
      draft: Helix-scaled draft cost (:func:`draft_cache_cost`) or ``None`` (no draft).
      superblocks_per_request: ``ceil((context + G) / (P*C))``.
    """
    budget_bytes = check_int("budget_bytes", budget_bytes, 0)
    cp, page_size = check_int("cp", cp), check_int("page_size", page_size)
    sb = check_int("superblocks_per_request", superblocks_per_request)
    draft = draft or CacheCost(0, 0)
    if draft.slope % cp:
        raise ValueError(f"draft.slope={draft.slope} must be a Helix-scaled cost (multiple of cp={cp})")
    t_page = target.slope * page_size                 # one target page on this rank
    d_page = draft.slope // cp * page_size            # one CP-free draft page (page_size global tokens)
    local_tokens = sb * page_size
    t_req = target.slope * local_tokens
    d_req = draft.slope * local_tokens                # = sb*cp draft pages
    per_req = t_req + d_req + target.intercept + draft.intercept
    fixed = t_page + d_page                           # the null pages
    n = max(0, (budget_bytes - fixed) // per_req) if per_req else 0
    if n == 0:                                        # not even one request: no pools at all
        return BudgetSplit(max_requests=0, superblocks_per_request=sb, target_pages=0, draft_pages=0,
                           state_bytes=0, target_bytes=0, draft_bytes=0, request_bytes=per_req,
                           unused_bytes=budget_bytes)
    left = max(0, budget_bytes - fixed - n * per_req)
    extra_t = (left * t_req // max(t_req + d_req, 1)) // t_page if t_page else 0
    left_d = left - extra_t * t_page
    extra_d = left_d // d_page if d_page else 0
    t_pages = 1 + n * sb + extra_t
    d_pages = (1 + n * sb * cp + extra_d) if d_page else 0
    state = n * (target.intercept + draft.intercept)
    used = t_pages * t_page + d_pages * d_page + state
    return BudgetSplit(max_requests=n, superblocks_per_request=sb, target_pages=t_pages, draft_pages=d_pages,
                       state_bytes=state, target_bytes=t_pages * t_page, draft_bytes=d_pages * d_page,
                       request_bytes=per_req, unused_bytes=budget_bytes - used)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryPlan:
    """Everything ``plan-memory`` reports; all byte counts are per rank."""
    model: str
    draft: str | None
    mapping: Mapping
    draft_mapping: Mapping
    page_size: int
    context: int
    draft_len: int
    kv_dtype: str
    gpu_bytes: int
    weight_bytes: int
    reserve_bytes: int
    kv_budget_bytes: int
    target_cost: CacheCost
    draft_cost: CacheCost | None
    tp_eff_state: int
    split: BudgetSplit

    @property
    def group_len(self) -> int:
        return self.draft_len + 1

    @property
    def target_bytes_per_global_token(self) -> float:
        """Target KV bytes one global token costs this rank (``slope / C``)."""
        return self.target_cost.slope / self.mapping.cp

    @property
    def draft_bytes_per_global_token(self) -> float:
        """Draft KV bytes one global token costs this rank (CP-free: every rank holds it)."""
        return 0.0 if self.draft_cost is None else self.draft_cost.slope / self.mapping.cp

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("model", "draft", "page_size", "context", "draft_len", "kv_dtype",
                                           "gpu_bytes", "weight_bytes", "reserve_bytes", "kv_budget_bytes",
                                           "tp_eff_state")}
        d["mapping"] = dataclasses.asdict(self.mapping)
        d["draft_mapping"] = dataclasses.asdict(self.draft_mapping)
        d["target_cost"] = dataclasses.asdict(self.target_cost)
        d["draft_cost"] = None if self.draft_cost is None else dataclasses.asdict(self.draft_cost)
        d["split"] = dataclasses.asdict(self.split)
        d["target_bytes_per_global_token"] = self.target_bytes_per_global_token
        d["draft_bytes_per_global_token"] = self.draft_bytes_per_global_token
        d["max_requests"] = self.split.max_requests
        return d


def plan_memory(model, *, gpu_bytes: int, mapping: Mapping, context: int, draft_len: int,
                page_size: int = 64, draft="default", kv_dtype: str | None = None,
                reserve_frac: float = 0.1, weight_bytes: int | None = None) -> MemoryPlan:
    """Plan one rank's memory for ``model`` (a preset or its name).

    Args:
      gpu_bytes: device memory of one rank.
      mapping: the target's mapping (``cp > 1`` = Helix).
      context: global tokens per request (prompt + generation); each request also gets room for
        one verify group of ``draft_len + 1`` tokens.
      draft: a preset (or name), ``None`` for no draft, ``"default"`` for the model's own.
      reserve_frac: share of ``gpu_bytes`` kept for activations and workspaces.
      weight_bytes: per-rank weights (target + draft); default: preset totals / world.
    """
    m = _preset(model)
    if draft == "default":
        draft = m.draft
    d = None if draft is None else _preset(draft)
    gpu_bytes = check_int("gpu_bytes", gpu_bytes)
    context = check_int("context", context)
    draft_len = check_int("draft_len", draft_len, 0)
    page_size = check_int("page_size", page_size)
    if not (0.0 <= reserve_frac < 1.0):
        raise ValueError(f"reserve_frac must lie in [0, 1), got {reserve_frac!r}")
    if weight_bytes is None:
        weight_bytes = -(-(m.weight_bytes + (d.weight_bytes if d else 0)) // mapping.world)
    weight_bytes = check_int("weight_bytes", weight_bytes, 0)
    reserve = int(gpu_bytes * reserve_frac)
    budget = gpu_bytes - reserve - weight_bytes
    if budget <= 0:
        raise ValueError(f"no memory left for the KV cache: {gpu_bytes / GIB:.1f} GiB per rank minus "
                         f"{weight_bytes / GIB:.1f} GiB weights minus {reserve / GIB:.1f} GiB reserve; "
                         f"use more ranks (tp/cp) or a larger --gpu-mem")
    kvd = kv_dtype or m.kv_dtype
    tcost = target_cache_cost(m, mapping, kv_dtype=kvd)
    dcost = None if d is None else draft_cache_cost(d, mapping, kv_dtype=kv_dtype or d.kv_dtype)
    sb = global_to_superblocks(context + draft_len + 1, page_size=page_size, cp_size=mapping.cp)
    split = split_budget(budget, target=tcost, draft=dcost, cp=mapping.cp, page_size=page_size,
                         superblocks_per_request=sb)
    return MemoryPlan(model=m.name, draft=None if d is None else d.name, mapping=mapping,
                      draft_mapping=draft_mapping(mapping), page_size=page_size, context=context,
                      draft_len=draft_len, kv_dtype=kvd, gpu_bytes=gpu_bytes, weight_bytes=weight_bytes,
                      reserve_bytes=reserve, kv_budget_bytes=budget, target_cost=tcost, draft_cost=dcost,
                      tp_eff_state=effective_tp(mapping), split=split)
