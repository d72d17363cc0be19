"""Flax NNX models: a DeepSeek-V3-style MLA decoder and a drafter derived from it."""
from .config import MLAModelConfig
from .deepseek import MLADecoder, MLAAttention, RMSNorm, apply_rope, derive_drafter, init_model

__all__ = ["MLAModelConfig", "MLADecoder", "MLAAttention", "RMSNorm", "apply_rope", "derive_drafter", "init_model"]
