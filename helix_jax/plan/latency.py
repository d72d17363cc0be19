"""Per-layer roofline model of one decode step (HELIX_SEMANTICS.md §1, §6, §9.4; DESIGN.md).

Every kernel is a :class:`Term`: ``time = fixed + max(bytes / (BW * eff_mem), flops / (peak * eff_math))``;
every collective is ``latency + bytes / (link * eff_link)``. A layout puts ``N = kvp * tpa`` GPUs on
attention (KV sharded over ``kvp`` ranks by sequence, heads over ``tpa``) and the same ``N = tpf * ep``
GPUs on the FFN. ``kvp = 1`` is the conventional TP layout, which for MLA (one latent KV head)
duplicates the KV cache on every TP rank; ``kvp > 1`` is Helix, which adds one all-to-all of the
partial outputs + LSE per attention layer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .hardware import HardwareProfile
from .presets import ModelPreset

__all__ = [
    "KV_BYTES", "WEIGHT_BYTES", "ACT_BYTES", "STATS_BYTES", "Layout", "Workload", "Term", "StepResult",
    "kv_bytes_per_value", "roofline", "decode_fixed_s", "mla_decode_term", "gemm_term", "exchange_bytes", "a2a_term",
    "combine_term", "allreduce_term", "hopb_exposed", "expected_active_experts", "busiest_routed_tokens",
    "mla_layer_terms", "kda_layer_terms", "ffn_layer_terms", "memory_per_rank", "max_batch_by_memory",
    "validate_layout", "step",
]

# Bytes per stored value. nvfp4: 4-bit E2M1 plus one 1-byte E4M3 scale per 16 values (§10.3).
KV_BYTES = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5 + 1.0 / 16}
WEIGHT_BYTES = dict(KV_BYTES)
_WEIGHT_MATH = {"bf16": "bf16", "fp8": "fp8", "nvfp4": "fp4"}
ACT_BYTES = 2  # activations, partial outputs and all-reduce payloads travel in bf16
STATS_BYTES = 4  # one fp32 natural-log LSE per (token, head) (docs/architecture.md "Conventions")
MLA_FLOPS_PER_ROW_TOKEN = 2 * (576 + 512)  # QK over 576 dims, PV over 512 (DESIGN.md)


def kv_bytes_per_value(kv_format: str) -> float:
    if kv_format not in KV_BYTES:
        raise ValueError(f"kv_format must be one of {sorted(KV_BYTES)}, got {kv_format!r}")
    return KV_BYTES[kv_format]


def _weight_bytes(weight_format: str) -> float:
    if weight_format not in WEIGHT_BYTES:
        raise ValueError(f"weight_format must be one of {sorted(WEIGHT_BYTES)}, got {weight_format!r}")
    return WEIGHT_BYTES[weight_format]


@dataclass(frozen=True)
class Layout:
    """``N = kvp * tpa`` GPUs for attention, the same ``N = tpf * ep`` for the FFN.

    kvp: KV-parallel (Helix CP) ranks, 1 = conventional TP. tpa: attention tensor parallelism (heads).
    ep: expert parallelism of the MoE (the remaining ``tpf`` is expert TP).
    reprovision: Helix re-uses all N GPUs for o_proj / FFN / LM head. ``False`` models KV parallelism
    without it (Medha-style): those layers stay on the ``tpa`` ranks of each KVP group, replicated
    ``kvp`` times, and every rank all-gathers the partials of all its heads.
    """

    kvp: int
    tpa: int
    ep: int = 1
    reprovision: bool = True

    @property
    def n(self) -> int:
        return self.kvp * self.tpa

    @property
    def ffn_ranks(self) -> int:
        """Ranks that shard o_proj, the FFN and the LM head."""
        return self.n if self.reprovision else self.tpa

    @property
    def tpf(self) -> int:
        return self.ffn_ranks // self.ep

    @property
    def family(self) -> str:
        if self.kvp == 1:
            return "baseline"
        return "helix" if self.reprovision else "kvp"

    @property
    def label(self) -> str:
        ffn = f"TP{self.tpf}" + (f"xEP{self.ep}" if self.ep > 1 else "")
        if self.kvp == 1:
            return f"TP{self.tpa} | FFN {ffn}"
        if not self.reprovision:
            return f"KVP{self.kvp}xTPA{self.tpa} no-reprov | FFN {ffn}"
        return f"Helix KVP{self.kvp}xTPA{self.tpa} | FFN {ffn}"

    def to_dict(self) -> dict:
        return {"label": self.label, "family": self.family, "gpus": self.n, "kvp": self.kvp, "tpa": self.tpa,
                "tpf": self.tpf, "ep": self.ep, "reprovision": self.reprovision}


@dataclass(frozen=True)
class Workload:
    """One decode step: ``batch`` sequences of ``context`` cached tokens, each verifying ``1 + draft_len``.

    accept_len: mean tokens committed per sequence per step (bonus token included), 1 <= a <= 1 + draft_len.
    hopb: overlap the Helix all-to-all with attention batch-wise (HOP-B).
    """

    context: int
    batch: int = 1
    draft_len: int = 0
    accept_len: float | None = None
    kv_format: str = "bf16"
    weight_format: str = "bf16"
    page_size: int = 64
    hopb: bool = True

    @property
    def group(self) -> int:
        return 1 + self.draft_len

    @property
    def tokens(self) -> int:
        return self.batch * self.group

    @property
    def accepted(self) -> float:
        return 1.0 if self.accept_len is None else float(self.accept_len)

    def validate(self) -> "Workload":
        for k in ("context", "batch", "page_size"):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{k} must be a positive int, got {v!r}")
        if not isinstance(self.draft_len, int) or self.draft_len < 0:
            raise ValueError(f"draft_len must be an int >= 0, got {self.draft_len!r}")
        if self.group > self.page_size:
            raise ValueError(f"the verify group (1 + draft_len = {self.group}) must fit one page "
                             f"(page_size={self.page_size}), HELIX_SEMANTICS.md §13.8")
        if self.accept_len is not None and not (1.0 <= float(self.accept_len) <= self.group):
            raise ValueError(f"accept_len must be in [1, 1 + draft_len = {self.group}], got {self.accept_len!r}")
        kv_bytes_per_value(self.kv_format)
        _weight_bytes(self.weight_format)
        return self


@dataclass(frozen=True)
class Term:
    """One modelled kernel or collective on one rank; ``count`` = how many per step."""

    name: str
    seconds: float
    bytes: float = 0.0
    flops: float = 0.0
    bound: str = "memory"
    count: int = 1
    note: str = ""


@dataclass
class StepResult:
    layout: Layout
    workload: Workload
    terms: list = field(default_factory=list)
    memory: dict = field(default_factory=dict)

    @property
    def step_s(self) -> float:
        return sum(t.seconds * t.count for t in self.terms)

    @property
    def ttl_ms(self) -> float:
        """Token-to-token latency seen by one user: step time over tokens committed per step."""
        return 1e3 * self.step_s / self.workload.accepted

    @property
    def tokens_per_s_user(self) -> float:
        return 1e3 / self.ttl_ms

    @property
    def tokens_per_s_gpu(self) -> float:
        return self.workload.batch * self.workload.accepted / self.step_s / self.layout.n

    def breakdown_ms(self) -> dict:
        out = {}
        for t in self.terms:
            out[t.name] = out.get(t.name, 0.0) + 1e3 * t.seconds * t.count
        return out


# --------------------------------------------------------------------------------------------
# Terms
# --------------------------------------------------------------------------------------------
def roofline(*, bytes_: float, flops: float, bw: float, peak: float, eff_mem: float, eff_math: float,
             fixed: float = 0.0) -> tuple:
    """``(seconds, bound)``: fixed cost plus the slower of streaming ``bytes_`` and doing ``flops``."""
    t_mem = bytes_ / (bw * eff_mem)
    t_math = flops / (peak * eff_math)
    return fixed + max(t_mem, t_math), ("memory" if t_mem >= t_math else "compute")


def mla_decode_term(profile: HardwareProfile, *, batch: int, group: int, heads: int, tokens_per_rank: float,
                    kv_format: str, name: str = "mla_decode") -> Term:
    """Absorbed MLA decode on one rank: reads ``batch * tokens_per_rank`` cached rows of 576 values;
    ``2 * 1088`` FLOPs per (query row, cached token); query rows = ``group * heads`` per sequence.
    Q in and the latent output out (bf16) count as traffic too."""
    kvb = kv_bytes_per_value(kv_format)
    rows = batch * group * heads
    kv = batch * tokens_per_rank * 576 * kvb
    qo = rows * (576 + 512) * ACT_BYTES
    flops = rows * tokens_per_rank * MLA_FLOPS_PER_ROW_TOKEN
    peak = profile.matmul_flops_per_s(profile.attention_math.get(kv_format, "bf16"))
    s, bound = roofline(bytes_=kv + qo, flops=flops, bw=profile.hbm_bytes_per_s, peak=peak,
                        eff_mem=profile.eff("attn_memory"), eff_math=profile.eff("attn_compute"),
                        fixed=decode_fixed_s(profile))
    return Term(name, s, kv + qo, flops, bound)


def decode_fixed_s(profile: HardwareProfile) -> float:
    """Fixed seconds of one MLA decode call: a launch plus the kernel's own overhead."""
    return (profile.kernel_launch_us + profile.attn_overhead_us) * 1e-6


def gemm_term(profile: HardwareProfile, *, params: float, tokens: int, weight_format: str, name: str,
              count: int = 1, bytes_per_param: float | None = None) -> Term:
    """``tokens x params`` matmul that streams its weights once (decode: weights dominate traffic)."""
    wb = _weight_bytes(weight_format) if bytes_per_param is None else bytes_per_param
    bytes_ = params * wb
    flops = 2.0 * tokens * params
    peak = profile.matmul_flops_per_s(_WEIGHT_MATH[weight_format])
    s, bound = roofline(bytes_=bytes_, flops=flops, bw=profile.hbm_bytes_per_s, peak=peak,
                        eff_mem=profile.eff("gemm_memory"), eff_math=profile.eff("gemm_compute"),
                        fixed=profile.kernel_launch_us * 1e-6)
    return Term(name, s, bytes_, flops, bound, count)


def exchange_bytes(*, tokens: int, heads_tp: int, cp: int, stats_bytes: int = STATS_BYTES) -> float:
    """Bytes one rank sends in the Helix all-to-all (§6.1): ``T * H_tp * (512*2 + 4) * (C-1)/C``.

    ``stats_bytes``: bytes of softmax statistics per (token, head); our packed payload pads the LSE to 16.
    """
    if cp < 1:
        raise ValueError(f"cp must be >= 1, got {cp}")
    return tokens * heads_tp * (512 * ACT_BYTES + stats_bytes) * (cp - 1) / cp


def a2a_term(profile: HardwareProfile, bytes_out: float, *, name: str = "helix_a2a") -> Term:
    if bytes_out <= 0:
        return Term(name, 0.0, 0.0, 0.0, "link")
    s = profile.a2a_latency_us * 1e-6 + bytes_out / (profile.link_bytes_per_s * profile.eff("link"))
    return Term(name, s, bytes_out, 0.0, "link")


def combine_term(profile: HardwareProfile, *, tokens: int, heads_tp: int, cp: int, name: str = "helix_combine") -> Term:
    """LSE combine after the all-to-all: reads ``C`` partials of ``H_tp / C`` heads, writes one (bf16)."""
    if cp == 1:
        return Term(name, 0.0)
    bytes_ = tokens * heads_tp * (512 * ACT_BYTES + STATS_BYTES) + tokens * (heads_tp // cp) * 512 * ACT_BYTES
    s = profile.kernel_launch_us * 1e-6 + bytes_ / (profile.hbm_bytes_per_s * profile.eff("elementwise"))
    return Term(name, s, bytes_, 0.0, "memory")


def allreduce_term(profile: HardwareProfile, bytes_: float, n: int, *, name: str, count: int = 1) -> Term:
    """Ring all-reduce of ``bytes_`` over ``n`` ranks: ``latency + 2 (n-1)/n * bytes / link``."""
    if n == 1 or bytes_ <= 0:
        return Term(name, 0.0, 0.0, 0.0, "link", count)
    moved = 2.0 * (n - 1) / n * bytes_
    s = profile.allreduce_latency_us * 1e-6 + moved / (profile.link_bytes_per_s * profile.eff("link"))
    return Term(name, s, moved, 0.0, "link", count)


def hopb_exposed(*, attn_s: float, fixed_s: float, a2a_bytes: float, profile: HardwareProfile, batch: int,
                 enabled: bool) -> tuple:
    """``(seconds, chunks)`` for attention + all-to-all, split into ``k`` batch chunks (HOP-B).

    Chunk i's all-to-all overlaps chunk i+1's attention: ``a_k + x_k + (k-1) max(a_k, x_k)`` with
    ``a_k = (attn - fixed)/k + fixed`` and ``x_k = latency + bytes/(k * link)``; every chunk pays the
    fixed costs again, so the best ``k`` (powers of two up to ``batch``) is taken. ``k = 1`` is no overlap.
    """
    def total(k):
        a = (attn_s - fixed_s) / k + fixed_s
        x = a2a_term(profile, a2a_bytes / k).seconds
        return a + x + (k - 1) * max(a, x)

    best = (total(1), 1)
    if enabled and a2a_bytes > 0:
        k = 2
        while k <= batch:
            best = min(best, (total(k), k))
            k *= 2
    return best


def expected_active_experts(*, local_experts: int, n_experts: int, top_k: int, tokens: int, ep: int = 1) -> float:
    """Experts the busiest of ``ep`` ranks must stream, each holding ``local_experts`` of ``n_experts``,
    for ``tokens`` uniform top-k routings.

    One rank (``ep = 1``): the mean, ``local * p`` with ``p = 1 - (1 - k/E)^T``. Across ``ep`` ranks the
    step waits for the busiest: mean plus the Gaussian estimate of the maximum of ``ep`` draws,
    ``sqrt(2 var ln ep)`` with the binomial variance ``local p (1-p)``, capped at ``local``.
    """
    p = 1.0 - (1.0 - top_k / n_experts) ** tokens
    mean = local_experts * p
    if ep == 1:
        return mean
    return min(float(local_experts), mean + math.sqrt(2.0 * local_experts * p * (1.0 - p) * math.log(ep)))


def busiest_routed_tokens(*, tokens: int, top_k: int, ep: int, local_experts: int) -> float:
    """Token-expert pairs on the busiest EP rank: mean ``T k / ep`` plus ``sqrt(2 mean ln ep)``, capped."""
    mean = tokens * top_k / ep
    if ep == 1:
        return mean
    return min(mean + math.sqrt(2.0 * mean * math.log(ep)), float(tokens * min(top_k, local_experts)))


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------
def _mla_param_groups(m: ModelPreset) -> dict:
    """MLA weights (absorbed decode) by how they shard: replicated, by attention TP, by all N ranks."""
    qk = m.qk_nope_dim + m.kv_rope
    if m.q_lora_rank:
        replicated = m.hidden * m.q_lora_rank + m.hidden * m.kv_row
        by_tpa = m.q_lora_rank * m.n_heads * qk + m.n_heads * m.qk_nope_dim * m.kv_latent  # q_b, W_UK
    else:
        replicated = m.hidden * m.kv_row
        by_tpa = m.hidden * m.n_heads * qk + m.n_heads * m.qk_nope_dim * m.kv_latent
    by_n = m.n_heads * m.kv_latent * m.v_head_dim + m.n_heads * m.v_head_dim * m.hidden  # W_UV, o_proj
    return {"replicated": replicated, "by_tpa": by_tpa, "by_n": by_n}


def _rank_tokens(context: int, group: int, page_size: int, kvp: int) -> int:
    """Cache rows a rank holds per sequence: whole super-blocks of ``page_size * kvp`` tokens (§9.3)."""
    return math.ceil((context + group) / (page_size * kvp)) * page_size


def mla_layer_terms(m: ModelPreset, p: HardwareProfile, lay: Layout, wl: Workload) -> list:
    g = _mla_param_groups(m)
    T, heads_tp = wl.tokens, m.n_heads // lay.tpa
    fixed = p.kernel_launch_us * 1e-6
    terms = [
        gemm_term(p, params=g["replicated"], tokens=T, weight_format=wl.weight_format, name="attn_proj_replicated"),
        gemm_term(p, params=g["by_tpa"] / lay.tpa, tokens=T, weight_format=wl.weight_format, name="attn_proj_q"),
    ]
    append_bytes = 2.0 * wl.tokens * m.kv_row * kv_bytes_per_value(wl.kv_format)
    terms.append(Term("kv_append", fixed + append_bytes / (p.hbm_bytes_per_s * p.eff("elementwise")), append_bytes))
    # Tokens actually read: the rank's share of the context, duplicated on every TP rank (one KV head).
    dec = mla_decode_term(p, batch=wl.batch, group=wl.group, heads=heads_tp, tokens_per_rank=wl.context / lay.kvp,
                          kv_format=wl.kv_format)
    if lay.kvp == 1:
        terms.append(dec)
    else:
        if lay.reprovision:  # Helix: each rank receives its head group from every rank
            a2a_bytes, name = exchange_bytes(tokens=T, heads_tp=heads_tp, cp=lay.kvp), "helix_a2a"
            comb = combine_term(p, tokens=T, heads_tp=heads_tp, cp=lay.kvp)
        else:  # no re-provisioning: every rank all-gathers all partials of all its heads, combines them all
            a2a_bytes = exchange_bytes(tokens=T, heads_tp=heads_tp, cp=lay.kvp) * lay.kvp
            name = "kvp_allgather"
            cb = T * heads_tp * (512 * ACT_BYTES + STATS_BYTES) * lay.kvp + T * heads_tp * 512 * ACT_BYTES
            comb = Term("kvp_combine", fixed + cb / (p.hbm_bytes_per_s * p.eff("elementwise")), cb)
        s, k = hopb_exposed(attn_s=dec.seconds, fixed_s=decode_fixed_s(p), a2a_bytes=a2a_bytes, profile=p,
                            batch=wl.batch, enabled=wl.hopb)
        x = a2a_term(p, a2a_bytes).seconds
        terms += [dec, Term(name, s - dec.seconds, a2a_bytes, 0.0, "link",
                            note=f"exposed part of {1e6 * x:.1f} us; HOP-B chunks={k}"), comb]
    terms.append(gemm_term(p, params=g["by_n"] / lay.ffn_ranks, tokens=T, weight_format=wl.weight_format,
                           name="attn_out_proj"))
    terms.append(allreduce_term(p, T * m.hidden * ACT_BYTES, lay.ffn_ranks, name="attn_allreduce"))
    return terms


def kda_layer_terms(m: ModelPreset, p: HardwareProfile, lay: Layout, wl: Workload) -> list:
    """A KDA / linear-attention layer: heads over all N ranks (tp_eff = tp * cp, §9.4), fp32 state."""
    T, width = wl.tokens, m.kda_heads * m.kda_head_dim
    params = 5 * m.hidden * width  # q, k, v, gate in; output projection back
    state = wl.batch * (m.kda_heads / lay.ffn_ranks) * m.kda_head_dim ** 2 * 4
    flops = 6.0 * T * (m.kda_heads / lay.ffn_ranks) * m.kda_head_dim ** 2
    s, bound = roofline(bytes_=2 * state, flops=flops, bw=p.hbm_bytes_per_s, peak=p.matmul_flops_per_s("bf16"),
                        eff_mem=p.eff("elementwise"), eff_math=p.eff("attn_compute"), fixed=p.kernel_launch_us * 1e-6)
    return [gemm_term(p, params=params / lay.ffn_ranks, tokens=T, weight_format=wl.weight_format, name="kda_proj"),
            Term("kda_recurrence", s, 2 * state, flops, bound),
            allreduce_term(p, T * m.hidden * ACT_BYTES, lay.ffn_ranks, name="kda_allreduce")]


def ffn_layer_terms(m: ModelPreset, p: HardwareProfile, lay: Layout, wl: Workload, *, dense: bool) -> list:
    """Dense FFN TP over N, or MoE with ``N = tpf x ep``: every rank holds all tokens (replicated hidden
    state), computes its experts' share, and one all-reduce sums the outputs."""
    T = wl.tokens
    if dense:
        terms = [gemm_term(p, params=3 * m.hidden * m.dense_inter / lay.ffn_ranks, tokens=T,
                           weight_format=wl.weight_format, name="ffn_dense")]
    else:
        expert = 3 * m.hidden * m.expert_inter
        local = m.n_experts // lay.ep
        active = expected_active_experts(local_experts=local, n_experts=m.n_experts, top_k=m.top_k, tokens=T,
                                         ep=lay.ep)
        routed = busiest_routed_tokens(tokens=T, top_k=m.top_k, ep=lay.ep, local_experts=local)
        wb = _weight_bytes(wl.weight_format)
        bytes_ = active * expert / lay.tpf * wb
        flops = 2.0 * routed * expert / lay.tpf
        s, bound = roofline(bytes_=bytes_, flops=flops, bw=p.hbm_bytes_per_s,
                            peak=p.matmul_flops_per_s(_WEIGHT_MATH[wl.weight_format]), eff_mem=p.eff("gemm_memory"),
                            eff_math=p.eff("gemm_compute"), fixed=p.kernel_launch_us * 1e-6)
        terms = [gemm_term(p, params=m.hidden * m.n_experts, tokens=T, weight_format="bf16", name="moe_router"),
                 Term("moe_experts", s, bytes_, flops, bound)]
        if m.n_shared:
            terms.append(gemm_term(p, params=m.n_shared * expert / lay.ffn_ranks, tokens=T,
                                   weight_format=wl.weight_format, name="moe_shared"))
    terms.append(allreduce_term(p, T * m.hidden * ACT_BYTES, lay.ffn_ranks, name="ffn_allreduce"))
    return terms


# --------------------------------------------------------------------------------------------
# Validation, memory, the whole step
# --------------------------------------------------------------------------------------------
def validate_layout(m: ModelPreset, p: HardwareProfile, lay: Layout) -> Layout:
    for k in ("kvp", "tpa", "ep"):
        v = getattr(lay, k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"layout {k} must be a positive int, got {v!r}")
    if not isinstance(lay.reprovision, bool):
        raise ValueError(f"layout reprovision must be a bool, got {lay.reprovision!r}")
    if lay.n > p.num_gpus:
        raise ValueError(f"layout {lay.label} needs {lay.n} GPUs (kvp*tpa), more ranks than the "
                         f"{p.num_gpus} GPUs of profile {p.name!r}")
    if m.n_heads % lay.tpa:
        raise ValueError(f"layout {lay.label}: attention TP {lay.tpa} must divide the {m.n_heads} heads")
    if (m.n_heads // lay.tpa) % lay.kvp:
        raise ValueError(f"layout {lay.label}: heads per TP rank ({m.n_heads // lay.tpa}) must be divisible by "
                         f"kvp={lay.kvp} for the Helix all-to-all over heads (H_tp % C == 0)")
    if m.n_kda_layers and m.kda_heads % lay.ffn_ranks:
        raise ValueError(f"layout {lay.label}: the {m.kda_heads} KDA heads must divide over {lay.ffn_ranks} ranks")
    if lay.ffn_ranks % lay.ep:
        raise ValueError(f"layout {lay.label}: ep={lay.ep} must divide the {lay.ffn_ranks} FFN ranks")
    if lay.ep > 1 and (not m.n_experts or m.n_experts % lay.ep):
        raise ValueError(f"layout {lay.label}: ep={lay.ep} must divide the number of experts ({m.n_experts})")
    return lay


def memory_per_rank(m: ModelPreset, lay: Layout, wl: Workload) -> dict:
    """Bytes one rank stores: its weights, its KV pages (whole super-blocks), recurrent states."""
    wb = _weight_bytes(wl.weight_format)
    g = _mla_param_groups(m)
    f = lay.ffn_ranks
    attn = g["replicated"] + g["by_tpa"] / lay.tpa + g["by_n"] / f
    params = m.n_mla_layers * attn + m.n_kda_layers * 5 * m.hidden * m.kda_heads * m.kda_head_dim / f
    params += m.n_dense_layers * 3 * m.hidden * m.dense_inter / f
    if m.n_experts:
        expert = 3 * m.hidden * m.expert_inter
        params += m.n_moe_layers * (m.n_experts * expert / f + m.n_shared * expert / f)
    params += 2 * m.vocab * m.hidden / f  # embedding + LM head
    weights = params * wb + m.n_moe_layers * m.hidden * m.n_experts * 2  # router in bf16
    per_seq_kv = m.n_mla_layers * _rank_tokens(wl.context, wl.group, wl.page_size, lay.kvp) * m.kv_row \
        * kv_bytes_per_value(wl.kv_format)
    per_seq_state = m.n_kda_layers * (m.kda_heads / f) * m.kda_head_dim ** 2 * 4
    return {"weights": weights, "kv_per_seq": per_seq_kv, "state_per_seq": per_seq_state,
            "total": weights + wl.batch * (per_seq_kv + per_seq_state)}


def max_batch_by_memory(m: ModelPreset, p: HardwareProfile, lay: Layout, wl: Workload) -> int:
    mem = memory_per_rank(m, lay, wl)
    free = p.usable_bytes - mem["weights"]
    per_seq = mem["kv_per_seq"] + mem["state_per_seq"]
    return max(0, int(free // per_seq)) if free > 0 else 0


def step(m: ModelPreset, p: HardwareProfile, lay: Layout, wl: Workload, *, check_memory: bool = True) -> StepResult:
    """Model one decode step on one rank of ``lay``. Raises ``ValueError`` for impossible layouts and, with
    ``check_memory``, when the weights plus ``batch`` sequences of KV do not fit the GPU memory."""
    validate_layout(m, p, lay)
    wl.validate()
    mem = memory_per_rank(m, lay, wl)
    if check_memory and mem["total"] > p.usable_bytes:
        raise ValueError(
            f"{lay.label}: weights ({mem['weights'] / 1e9:.1f} GB) + KV for batch {wl.batch} at context "
            f"{wl.context} ({wl.batch * mem['kv_per_seq'] / 1e9:.1f} GB) do not fit the "
            f"{p.usable_bytes / 1e9:.1f} GB usable on a {p.name} GPU (KV not fitting in memory)")
    res = StepResult(lay, wl, memory={k: v / 1e9 for k, v in mem.items()})
    layers = []
    layers += [(t, m.n_mla_layers) for t in mla_layer_terms(m, p, lay, wl)]
    if m.n_kda_layers:
        layers += [(t, m.n_kda_layers) for t in kda_layer_terms(m, p, lay, wl)]
    if m.n_dense_layers:
        layers += [(t, m.n_dense_layers) for t in ffn_layer_terms(m, p, lay, wl, dense=True)]
    if m.n_moe_layers:
        layers += [(t, m.n_moe_layers) for t in ffn_layer_terms(m, p, lay, wl, dense=False)]
    res.terms = [Term(t.name, t.seconds, t.bytes, t.flops, t.bound, t.count * n, t.note) for t, n in layers]
    if m.vocab:
        res.terms.append(gemm_term(p, params=m.vocab * m.hidden / lay.ffn_ranks, tokens=wl.tokens,
                                   weight_format=wl.weight_format, name="lm_head"))
    return res
