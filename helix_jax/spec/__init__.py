"""Functional speculative verify with Helix CP: DSpark linear-chain drafting, acceptance, commit."""
from .acceptance import greedy_accept, rejection_accept
from .config import (MAX_DRAFT_LEN, SpecConfig, fallback_supports_verify, select_attention_backend,
                     validate_spec_config)
from .decode import SpecRun, greedy_reference, required_max_len, run_spec_decode
from .drafting import DraftCache, propose_chain
from .step import SpecParams, SpecState, compile_step, init_spec_state, make_params, spec_verify_step, step_positions

__all__ = ["SpecConfig", "SpecParams", "SpecState", "SpecRun", "MAX_DRAFT_LEN", "init_spec_state",
           "spec_verify_step", "compile_step", "step_positions", "make_params", "run_spec_decode",
           "greedy_reference", "required_max_len", "greedy_accept", "rejection_accept", "DraftCache",
           "propose_chain", "validate_spec_config", "fallback_supports_verify", "select_attention_backend"]
