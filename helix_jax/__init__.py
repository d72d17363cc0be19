"""helix_jax: Helix context-parallel MLA decoding with speculative verify groups, in JAX."""
from . import ledger, ops
from .cache import HelixMLACache, MLAPages
from .helix import helix_mla_attention
from .mesh import make_cp_mesh
from .ops.combine import combine

__version__ = "0.1.0"

__all__ = ["ledger", "ops", "HelixMLACache", "MLAPages", "helix_mla_attention", "combine", "make_cp_mesh"]
