"""Model presets for the planner: the shapes that decide decode cost, nothing else.

All sizes are element counts; byte sizes come from the weight / KV formats chosen at plan time.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["ModelPreset", "PRESETS", "get_preset", "MLA_LATENT", "MLA_ROPE"]

MLA_LATENT = 512  # latent (V) width of a cached MLA row
MLA_ROPE = 64  # roped key tail of a cached MLA row


@dataclass(frozen=True)
class ModelPreset:
    """Decode-relevant shapes of an MLA model (optionally hybrid with KDA / linear-attention layers).

    Layer kinds are given as counts: ``n_mla_layers`` MLA layers and ``n_kda_layers`` linear-attention
    layers; ``n_dense_layers`` of all layers use a dense FFN of width ``dense_inter``, the rest a MoE
    (``n_experts`` routed experts of width ``expert_inter``, ``top_k`` per token, ``n_shared`` shared).
    ``n_experts = 0`` means every FFN is dense.
    """

    name: str
    hidden: int
    n_heads: int
    n_mla_layers: int
    q_lora_rank: int  # 0: the query projection is a single [hidden, H*192] matrix
    qk_nope_dim: int = 128
    v_head_dim: int = 128
    kv_latent: int = MLA_LATENT
    kv_rope: int = MLA_ROPE
    n_kda_layers: int = 0
    kda_heads: int = 0
    kda_head_dim: int = 0
    n_dense_layers: int = 0
    dense_inter: int = 0
    n_experts: int = 0
    top_k: int = 0
    n_shared: int = 0
    expert_inter: int = 0
    vocab: int = 0
    note: str = ""
    aliases: tuple = field(default=(), compare=False)

    @property
    def n_layers(self) -> int:
        return self.n_mla_layers + self.n_kda_layers

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers if self.n_experts else 0

    @property
    def kv_row(self) -> int:
        """Cached values per token per MLA layer (576 for DeepSeek: latent 512 + rope 64)."""
        return self.kv_latent + self.kv_rope

    def validate(self) -> "ModelPreset":
        ints = {k: getattr(self, k) for k in ("hidden", "n_heads", "n_mla_layers", "kv_latent", "kv_rope")}
        for k, v in ints.items():
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"model {self.name!r}: {k} must be a positive int, got {v!r}")
        if self.n_dense_layers > self.n_layers:
            raise ValueError(f"model {self.name!r}: n_dense_layers ({self.n_dense_layers}) exceeds n_layers "
                             f"({self.n_layers})")
        if self.n_experts:
            if not (0 < self.top_k <= self.n_experts) or self.expert_inter <= 0:
                raise ValueError(f"model {self.name!r}: MoE needs 0 < top_k <= n_experts and expert_inter > 0, got "
                                 f"top_k={self.top_k}, n_experts={self.n_experts}, expert_inter={self.expert_inter}")
        elif self.n_dense_layers != self.n_layers:
            raise ValueError(f"model {self.name!r}: without experts every layer must be dense "
                             f"(n_dense_layers={self.n_dense_layers}, n_layers={self.n_layers})")
        if self.n_dense_layers and self.dense_inter <= 0:
            raise ValueError(f"model {self.name!r}: dense_inter must be > 0 when there are dense layers")
        if self.n_kda_layers and (self.kda_heads <= 0 or self.kda_head_dim <= 0):
            raise ValueError(f"model {self.name!r}: KDA layers need kda_heads and kda_head_dim > 0")
        if self.vocab < 0:
            raise ValueError(f"model {self.name!r}: vocab must be >= 0")
        return self


# DeepSeek-V3 / R1 (same architecture): 61 layers, the first 3 dense.
_DEEPSEEK = ModelPreset(
    name="deepseek-r1", hidden=7168, n_heads=128, n_mla_layers=61, q_lora_rank=1536,
    n_dense_layers=3, dense_inter=18432, n_experts=256, top_k=8, n_shared=1, expert_inter=2048,
    vocab=129280, note="DeepSeek-R1 / V3: MLA 512+64, 256 experts top-8 + 1 shared",
    aliases=("deepseek-v3", "dsv3", "dsr1"),
)

# A Kimi-style hybrid: 3 KDA (linear attention) layers per MLA layer. Illustrative shapes in the
# spirit of Kimi Linear scaled to a DeepSeek-size MoE, not a published configuration.
_KIMI_HYBRID = ModelPreset(
    name="kimi-hybrid", hidden=7168, n_heads=64, n_mla_layers=12, q_lora_rank=1536,
    n_kda_layers=36, kda_heads=64, kda_head_dim=128,
    n_dense_layers=1, dense_inter=18432, n_experts=384, top_k=8, n_shared=1, expert_inter=2048,
    vocab=163840, note="Kimi-style hybrid (illustrative): 12 MLA + 36 KDA layers, 384 experts top-8",
    aliases=("kimi",),
)

# The tiny model of the tests and demo: 2 MLA layers, 8 heads, dense FFN.
_TINY = ModelPreset(
    name="tiny", hidden=256, n_heads=8, n_mla_layers=2, q_lora_rank=0, qk_nope_dim=32, v_head_dim=32,
    n_dense_layers=2, dense_inter=512, vocab=1024, note="small test model (2 layers, 8 heads, dense FFN)",
)

PRESETS = {p.name: p.validate() for p in (_DEEPSEEK, _KIMI_HYBRID, _TINY)}


def get_preset(name: str, **overrides) -> ModelPreset:
    """A preset by name or alias, optionally with fields replaced (``get_preset('tiny', n_heads=16)``)."""
    key = name.lower()
    for p in PRESETS.values():
        if key == p.name or key in p.aliases:
            return replace(p, **overrides).validate() if overrides else p
    names = sorted(set(PRESETS) | {a for p in PRESETS.values() for a in p.aliases})
    raise ValueError(f"model must be one of {names}, got {name!r}")
