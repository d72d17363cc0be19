"""Memory management under Helix (issue 7; HELIX_SEMANTICS.md §2, §4, §9.2–§9.4, R15–R17).

* :mod:`.pool` — :class:`HelixPagePool`, whole super-block allocation per CP rank.
* :mod:`.tables` — page tables for :class:`helix_jax.HelixMLACache`, prompt hand-off.
* :mod:`.schedule` — continuous batching (:func:`schedule_requests`).
* :mod:`.serving` — continuous-batching speculative decoding (:func:`serve_requests`).
* :mod:`.quota` — byte/token/page/super-block conversions (§9.3).
* :mod:`.cost`, :mod:`.plan`, :mod:`.presets` — cost model, draft mapping, budget split.
* :mod:`.state` — recurrent-state sizing for hybrid models (§9.4).
"""
from .cost import CacheCost, Mapping, draft_mapping, helix_draft_cost, mla_bytes_per_token, require_cp_free
from .plan import BudgetSplit, MemoryPlan, draft_cache_cost, plan_memory, split_budget, target_cache_cost
from .pool import HelixPagePool, OutOfPagesError
from .presets import PRESETS, ModelPreset, get_preset
from .quota import (global_to_physical_tokens, global_to_superblocks, local_bytes_to_global_tokens,
                    pages_from_bytes, physical_to_global_tokens, physical_tokens_from_bytes,
                    usable_physical_tokens)
from .schedule import ContinuousBatcher, Request, ScheduleReport, StepPlan, schedule_requests, staggered_requests
from .serving import ServeResult, serve_requests
from .state import RecurrentSpec, StatePool, effective_tp, state_bytes_per_request, state_shapes
from .tables import (device_page_table, make_cache, prompt_rows, refresh_cache, refresh_caches, write_prompt,
                     write_prompts)


def draft_page_pool(*, mapping: Mapping, num_pages: int, page_size: int, seed=None) -> HelixPagePool:
    """The draft model's KV pool: CP-free, so a Helix mapping is rejected (R15)."""
    require_cp_free(mapping, what="the draft KV pool")
    return HelixPagePool(num_pages=num_pages, page_size=page_size, cp_size=1, seed=seed)


__all__ = [
    "HelixPagePool", "OutOfPagesError", "draft_page_pool",
    "device_page_table", "make_cache", "refresh_cache", "refresh_caches", "write_prompt", "write_prompts",
    "prompt_rows",
    "Request", "StepPlan", "ContinuousBatcher", "ScheduleReport", "schedule_requests", "staggered_requests",
    "ServeResult", "serve_requests",
    "physical_tokens_from_bytes", "usable_physical_tokens", "physical_to_global_tokens",
    "local_bytes_to_global_tokens", "global_to_superblocks", "global_to_physical_tokens", "pages_from_bytes",
    "Mapping", "draft_mapping", "require_cp_free", "CacheCost", "helix_draft_cost", "mla_bytes_per_token",
    "target_cache_cost", "draft_cache_cost", "BudgetSplit", "split_budget", "MemoryPlan", "plan_memory",
    "ModelPreset", "PRESETS", "get_preset",
    "RecurrentSpec", "effective_tp", "state_shapes", "state_bytes_per_request", "StatePool",
]
