"""helix_jax: Helix context-parallel MLA decoding with speculative verify groups, in JAX.

Heavier subpackages load on demand: ``helix_jax.spec``, ``helix_jax.models`` (Flax),
``helix_jax.memory``, ``helix_jax.checkpoint`` (Orbax), ``helix_jax.plan``.
"""
from . import ledger, ops, quant
from .cache import FP8Pages, HelixMLACache, MLAPages, NVFP4Pages
from .helix import helix_attention_local, helix_mla_attention
from .mesh import make_cp_mesh
from .ops.combine import combine

__version__ = "0.1.0"

__all__ = ["ledger", "ops", "quant", "HelixMLACache", "MLAPages", "FP8Pages", "NVFP4Pages",
           "helix_mla_attention", "helix_attention_local", "combine", "make_cp_mesh"]
