"""Layout enumeration, sweeps over layouts x batch sizes, the throughput-interactivity Pareto frontier,
and the Helix-vs-baseline comparison (best token-to-token latency; batch at equal latency)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace

from .hardware import HardwareProfile
from .latency import Layout, Workload, max_batch_by_memory, step, validate_layout
from .presets import ModelPreset

__all__ = ["FAMILIES", "Point", "enumerate_layouts", "batch_grid", "sweep", "pareto_frontier", "max_batch_within",
           "compare", "plot_frontier", "PAPER"]

# Helix paper (arXiv 2507.07120), DeepSeek-R1 at 1M context on GB200-NVL72-class hardware (simulated).
PAPER = {"ttl_ratio": 1.5, "batch_ratio": 32.0,
         "source": "Helix paper abstract: up to 1.5x lower TTL at fixed batch, up to 32x larger batch at equal latency"}


@dataclass(frozen=True)
class Point:
    layout: Layout
    batch: int
    ttl_ms: float
    tokens_per_s_user: float
    tokens_per_s_gpu: float
    memory_gb: float

    def to_dict(self) -> dict:
        return {"layout": self.layout.to_dict(), "batch": self.batch, "ttl_ms": round(self.ttl_ms, 4),
                "tokens_per_s_user": round(self.tokens_per_s_user, 2),
                "tokens_per_s_gpu": round(self.tokens_per_s_gpu, 3), "memory_gb_per_gpu": round(self.memory_gb, 2)}


def _pow2_upto(n: int) -> list:
    out, k = [], 1
    while k <= n:
        out.append(k)
        k *= 2
    return out


FAMILIES = ("baseline", "helix", "kvp")


def enumerate_layouts(m: ModelPreset, p: HardwareProfile, *, max_gpus: int | None = None,
                      families=FAMILIES, max_tpa: int | None = None) -> list:
    """Every valid layout on ``N`` = powers of two up to ``max_gpus`` (default: the whole domain).

    baseline: ``kvp = 1``, attention TP = N (KV duplicated for MLA), FFN TP x EP over N.
    helix: ``kvp >= 2``, ``kvp * tpa = N``, FFN TP x EP over the same N (EP > 1 = "Helix with EP").
    kvp: KV parallelism without re-provisioning (FFN TP x EP over the ``tpa`` ranks only).
    """
    top = p.num_gpus if max_gpus is None else max_gpus
    if not isinstance(top, int) or top < 1:
        raise ValueError(f"max_gpus must be a positive int, got {max_gpus!r}")
    if top > p.num_gpus:
        raise ValueError(f"max_gpus={top} is more ranks than the {p.num_gpus} GPUs of profile {p.name!r}")
    bad = set(families) - set(FAMILIES)
    if bad:
        raise ValueError(f"families must be among {FAMILIES}, got {sorted(bad)}")
    out = []
    for n in _pow2_upto(top):
        for kvp in _pow2_upto(n):
            tpa = n // kvp
            if max_tpa is not None and tpa > max_tpa:
                continue
            for reprov in ((True,) if kvp == 1 else (True, False)):
                fam = Layout(kvp, tpa, 1, reprov).family
                if fam not in families:
                    continue
                ranks = n if reprov else tpa
                for ep in _pow2_upto(ranks):
                    if ep > 1 and not (m.n_experts and m.n_experts % ep == 0):
                        continue
                    try:
                        out.append(validate_layout(m, p, Layout(kvp=kvp, tpa=tpa, ep=ep, reprovision=reprov)))
                    except ValueError:
                        continue  # e.g. heads not divisible: simply not a candidate
    return out


def batch_grid(max_batch: int, *, cap: int = 1 << 14) -> list:
    """1, 2, 3, 4, 6, 8, 12, ... up to ``min(max_batch, cap)``, plus that end point."""
    top = min(max_batch, cap)
    out, k = [], 1
    while k <= top:
        out.append(k)
        if k >= 2 and k * 3 // 2 <= top:
            out.append(k * 3 // 2)
        k *= 2
    if top >= 1 and top not in out:
        out.append(top)
    return sorted(set(out))


def _point(m, p, lay, wl) -> Point:
    r = step(m, p, lay, wl, check_memory=False)
    return Point(lay, wl.batch, r.ttl_ms, r.tokens_per_s_user, r.tokens_per_s_gpu, r.memory["total"])


def sweep(m: ModelPreset, p: HardwareProfile, wl: Workload, layouts=None, *, batches=None, batch_cap: int = 1 << 14,
          progress: bool | None = None) -> list:
    """All (layout, batch) points that fit in memory. ``wl.batch`` is ignored; ``batches`` (default: a
    geometric grid up to each layout's memory limit) are tried. A tqdm bar goes to stderr on long sweeps."""
    wl.validate()
    layouts = enumerate_layouts(m, p) if layouts is None else layouts
    it = layouts
    if progress or (progress is None and len(layouts) >= 64):
        from tqdm import tqdm

        it = tqdm(layouts, desc="plan sweep", unit="layout", file=sys.stderr, leave=False)
    pts = []
    for lay in it:
        bmax = max_batch_by_memory(m, p, lay, wl)
        grid = batch_grid(bmax, cap=batch_cap) if batches is None else [b for b in batches if b <= bmax]
        pts += [_point(m, p, lay, replace(wl, batch=b)) for b in grid]
    return pts


def pareto_frontier(points) -> list:
    """Points not dominated in (tokens/s/user, tokens/s/GPU), sorted by interactivity (highest first)."""
    best, out = -1.0, []
    for q in sorted(points, key=lambda q: (-q.tokens_per_s_user, -q.tokens_per_s_gpu)):
        if q.tokens_per_s_gpu > best:
            out.append(q)
            best = q.tokens_per_s_gpu
    return out


def max_batch_within(m, p, lay: Layout, wl: Workload, ttl_ms: float) -> int:
    """Largest batch that fits in memory and keeps TTL <= ``ttl_ms`` (0 if none); TTL rises with batch."""
    hi = max_batch_by_memory(m, p, lay, wl)
    ttl = lambda b: step(m, p, lay, replace(wl, batch=b), check_memory=False).ttl_ms  # noqa: E731
    if hi < 1 or ttl(1) > ttl_ms:
        return 0
    lo = 1
    while lo < hi:  # invariant: ttl(lo) <= budget
        mid = (lo + hi + 1) // 2
        if ttl(mid) <= ttl_ms:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _equal_latency(m, p, wl, budgets, lays_a, lays_b) -> list:
    """For each TTL budget, the largest batch family A and family B sustain within it."""
    rows = []
    for t in budgets:
        budget = t * (1 + 1e-9)
        per = []
        for lays in (lays_a, lays_b):
            cands = [(max_batch_within(m, p, lay, wl, budget), lay) for lay in lays]
            per.append(max(cands, key=lambda c: (c[0], -c[1].n)))
        if per[1][0] > 0:
            rows.append({"ttl_budget_ms": round(t, 4), "helix_batch": per[0][0], "helix_layout": per[0][1].label,
                         "baseline_batch": per[1][0], "baseline_layout": per[1][1].label,
                         "ratio": per[0][0] / per[1][0]})
    return rows


def compare(m: ModelPreset, p: HardwareProfile, wl: Workload, *, layouts=None, points=None, progress=None) -> dict:
    """Helix vs the best conventional layout (TP attention, KV duplicated, FFN TP x EP).

    best_*: the lowest-TTL point of each family. ttl_ratio = baseline / helix at those points.
    batch_ratio: at each latency budget on the baseline's Pareto frontier, the largest batch any Helix
    layout sustains within it over the largest any baseline layout sustains; the maximum is reported
    ("up to", as in the paper) with the budget where it occurs. When KV-parallel layouts without
    re-provisioning were swept, ``vs_kvp`` holds the same comparison against them.
    """
    layouts = enumerate_layouts(m, p) if layouts is None else layouts
    points = sweep(m, p, wl, layouts, progress=progress) if points is None else points
    fam = {f: [q for q in points if q.layout.family == f] for f in FAMILIES}
    for f in ("helix", "baseline"):
        if not fam[f]:
            raise ValueError(f"no {f} layout fits {m.name} at context {wl.context} on {p.name} "
                             f"(kv_format={wl.kv_format}, weight_format={wl.weight_format})")
    best = {f: min(qs, key=lambda q: (q.ttl_ms, -q.tokens_per_s_gpu)) for f, qs in fam.items() if qs}
    lays = {f: [lay for lay in layouts if lay.family == f] for f in FAMILIES}

    def versus(ref):
        budgets = [q.ttl_ms for q in sorted(pareto_frontier(fam[ref]), key=lambda q: q.ttl_ms)]
        rows = _equal_latency(m, p, wl, budgets, lays["helix"], lays[ref])
        top = max(rows, key=lambda r: r["ratio"])
        return {"ttl_ratio": best[ref].ttl_ms / best["helix"].ttl_ms, "batch_ratio": top["ratio"],
                "batch_ratio_at_ttl_ms": top["ttl_budget_ms"], "equal_latency": rows}

    out = {"best_helix": best["helix"].to_dict(), "best_baseline": best["baseline"].to_dict(), **versus("baseline")}
    if fam["kvp"]:
        out["vs_kvp"] = {"best_kvp": best["kvp"].to_dict(), **versus("kvp")}
    out["frontier"] = {f: [q.to_dict() for q in pareto_frontier(qs)] for f, qs in fam.items() if qs}
    return out


def plot_frontier(points, path, *, title: str = "") -> None:
    """Throughput per GPU vs interactivity, all points faint, each family's frontier as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for fam, color in (("baseline", "tab:gray"), ("kvp", "tab:orange"), ("helix", "tab:blue")):
        qs = [q for q in points if q.layout.family == fam]
        if not qs:
            continue
        ax.scatter([q.tokens_per_s_user for q in qs], [q.tokens_per_s_gpu for q in qs], s=6, alpha=0.25, color=color)
        fr = sorted(pareto_frontier(qs), key=lambda q: q.tokens_per_s_user)
        ax.plot([q.tokens_per_s_user for q in fr], [q.tokens_per_s_gpu for q in fr], "-o", ms=3, color=color,
                label=f"{fam} frontier")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("interactivity (tokens/s/user)")
    ax.set_ylabel("throughput (tokens/s/GPU)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
