"""Model presets for memory planning: plain data, nothing computed at import.

Byte counts of weights are approximate (parameter count x bytes per parameter of the usual
checkpoint format); ``plan-memory --weight-gib`` overrides them. KV bytes per token follow MLA:
``(kv_lora_rank + rope_dim) * itemsize(kv_dtype) * mla_layers``.
"""
from __future__ import annotations

import dataclasses

from .cost import mla_bytes_per_token
from .state import RecurrentSpec, itemsize

__all__ = ["ModelPreset", "PRESETS", "get_preset"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelPreset:
    """What the memory planner needs to know about one model."""
    name: str
    mla_layers: int
    weight_bytes: int                    # whole model, all ranks together
    kv_dtype: str = "bfloat16"
    kv_lora_rank: int = 512
    rope_dim: int = 64
    recurrent: RecurrentSpec | None = None
    draft: str | None = None             # preset name of the default draft model
    note: str = ""

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> int:
        """MLA cache bytes of one token on one rank (all MLA layers)."""
        return mla_bytes_per_token(num_layers=self.mla_layers, dtype_bytes=itemsize(kv_dtype or self.kv_dtype),
                                   kv_lora_rank=self.kv_lora_rank, rope_dim=self.rope_dim)


PRESETS: dict[str, ModelPreset] = {p.name: p for p in (
    ModelPreset(name="deepseek-v3", mla_layers=61, weight_bytes=671 * 10**9, draft="deepseek-v3-mtp",
                note="DeepSeek-V3: 61 MLA layers, 671B params in FP8 (~1 B/param)"),
    ModelPreset(name="deepseek-r1", mla_layers=61, weight_bytes=671 * 10**9, draft="deepseek-v3-mtp",
                note="DeepSeek-R1: same architecture as V3"),
    ModelPreset(name="deepseek-v3-mtp", mla_layers=1, weight_bytes=14 * 10**9,
                note="DeepSeek-V3 MTP module used as the draft: 1 MLA layer, ~14B params FP8"),
    ModelPreset(name="kimi-linear-style", mla_layers=7, weight_bytes=96 * 10**9,
                recurrent=RecurrentSpec(num_layers=20, num_heads=32, head_dim=128, n_groups=32,
                                        state_size=128, conv_kernel=4, dtype="bfloat16",
                                        ssm_dtype="float32"),
                note="Kimi-Linear-style hybrid (illustrative): 27 layers = 7 MLA + 20 KDA "
                     "(32 heads x 128, conv 4), ~48B params BF16"),
    # helix_jax.models.MLAModelConfig() and the SpecConfig default drafter (tests check they agree)
    ModelPreset(name="tiny", mla_layers=3, weight_bytes=3_067_520 * 4, kv_dtype="float32", draft="tiny-draft",
                note="the tiny CPU test model (helix_jax.models defaults): 3 MLA layers, float32"),
    ModelPreset(name="tiny-hybrid", mla_layers=2, weight_bytes=4 * 10**6, kv_dtype="float32",
                recurrent=RecurrentSpec(num_layers=2, num_heads=8, head_dim=16, n_groups=2,
                                        state_size=16, conv_kernel=4, dtype="float32"),
                draft="tiny-draft",
                note="a tiny hybrid test model: 2 MLA + 2 Mamba-style layers"),
    ModelPreset(name="tiny-draft", mla_layers=1, weight_bytes=1_066_368 * 4, kv_dtype="float32",
                note="the tiny model's 1-layer drafter (SpecConfig default), float32"),
)}


def get_preset(name: str) -> ModelPreset:
    """The preset called ``name`` (``ValueError`` listing the known names otherwise)."""
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}") from None
