"""Configuration of the DeepSeek-V3-style MLA decoder (HELIX_SEMANTICS.md §1.2)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..cache import LATENT_DIM, ROPE_DIM

__all__ = ["MLAModelConfig"]


def _pos_int(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be an int >= 1, got {v!r}")


@dataclasses.dataclass(frozen=True)
class MLAModelConfig:
    """Sizes of the decoder. Defaults are the tiny CPU model (DeepSeek-V3 shape family).

    ``kv_lora_rank`` (latent ``Dl``) and ``qk_rope_head_dim`` (``Dr``) must stay 512 and 64: they are
    the cache row layout the Helix kernels and :class:`~helix_jax.cache.HelixMLACache` use.
    ``logit_scale`` multiplies the LM-head init (sharper or flatter sampling distributions).
    Layer ``i`` writes into the residual stream with init scale ``residual_scale * residual_decay**i``:
    later layers refine rather than overwrite, as in a trained model, so a drafter made of the
    first layer(s) predicts the target's next token often but not always.
    """
    vocab_size: int = 128
    hidden_size: int = 256
    num_layers: int = 3
    num_heads: int = 8
    q_lora_rank: int = 128
    kv_lora_rank: int = LATENT_DIM
    qk_nope_head_dim: int = 32
    qk_rope_head_dim: int = ROPE_DIM
    v_head_dim: int = 32
    intermediate_size: int = 512
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    logit_scale: float = 4.0
    residual_scale: float = 1.0
    residual_decay: float = 0.5

    def __post_init__(self):
        for f in ("vocab_size", "hidden_size", "num_layers", "num_heads", "q_lora_rank",
                  "qk_nope_head_dim", "v_head_dim", "intermediate_size"):
            _pos_int(f, getattr(self, f))
        if self.kv_lora_rank != LATENT_DIM:
            raise ValueError(f"kv_lora_rank must be {LATENT_DIM} (the MLA cache latent width), got {self.kv_lora_rank}")
        if self.qk_rope_head_dim != ROPE_DIM:
            raise ValueError(f"qk_rope_head_dim must be {ROPE_DIM} (the MLA cache rope width), got {self.qk_rope_head_dim}")
        for f in ("rope_theta", "rms_eps", "logit_scale", "residual_scale", "residual_decay"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{f} must be a finite positive number, got {v!r}")

    @property
    def softmax_scale(self) -> float:
        """``1/sqrt(qk_nope + qk_rope)`` (sqrt(192) for DeepSeek-V3, not sqrt(576); no YaRN)."""
        return 1.0 / math.sqrt(self.qk_nope_head_dim + self.qk_rope_head_dim)

    def replace(self, **kw) -> "MLAModelConfig":
        return dataclasses.replace(self, **kw)
