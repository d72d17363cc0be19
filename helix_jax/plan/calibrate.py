"""Calibration against our own H200 benchmarks (``benchmarks/results/``).

* ``mla_decode_<date>.json`` ``{"device", "date", "ceilings": {"copy_tb_per_s", "matmul_tflop_per_s"},
  "records": [{"backend", "kv_dtype", "B", "L", "G", "H", "page_size", "ms", ...}]}``: measured ceilings
  replace the profile's; the decode's fixed cost and achieved efficiency per regime (memory- or
  compute-bound) are fitted to the fastest backend of every shape.
* ``exchange_<date>.json`` ``{"device", "date", "records": [{"cp", "T", "H", "L", "exchange_ms", "step_ms",
  "exchange_share", "a2a_gb_per_s"}]}``: the all-to-all latency and link efficiency are fitted to the
  measured all-to-all part (``exchange_parts_ms["a2a"]``, else ``exchange_ms`` less the modelled pack
  and combine); ``step_ms`` is what :func:`compare_step_measurements` predicts and checks (target 25 %).
Only canonical ``<prefix>_<date>.json`` files timed on a GPU are used while one exists.
"""
from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np

from .hardware import DEFAULT_RESULTS_DIR, HardwareProfile, load_profile
from .latency import (ACT_BYTES, KV_BYTES, STATS_BYTES, a2a_term, exchange_bytes, kv_bytes_per_value,
                      mla_decode_term)

__all__ = ["is_gpu_result", "latest_result", "read_result", "fit_attention_efficiency", "our_exchange_parts",
           "fit_exchange", "apply_measurements", "predict_helix_step", "compare_step_measurements",
           "calibration_report", "TARGET_REL_ERR"]

TARGET_REL_ERR = 0.25
_MLA_KEYS = ("backend", "kv_dtype", "B", "L", "G", "H", "ms")
_EX_KEYS = ("cp", "T", "H", "L", "exchange_ms", "step_ms")


def _usable(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def is_gpu_result(data: dict) -> bool:
    """False for results timed on a CPU (a CI run of the benchmark): never calibrate from those."""
    dev = str(data.get("device", "")).lower()
    return not (dev.startswith("cpu") or " cpu device" in dev or str(data.get("timing", "")).startswith("wall"))


def latest_result(results_dir, prefix: str) -> Path | None:
    """The GPU-timed results file to calibrate from, or None.

    The canonical ``<prefix>_<YYYY-MM-DD>.json`` files come first, newest date first; variant files
    (``<prefix>_<label>_<date>.json``, e.g. side experiments) only when no canonical one is GPU-timed.
    """
    d = Path(results_dir)
    if not d.is_dir():
        return None
    files = list(d.glob(f"{prefix}_*.json"))
    canon = re.compile(rf"^{re.escape(prefix)}_(\d{{4}}-\d{{2}}-\d{{2}})\.json$")
    ordered = sorted((f for f in files if canon.match(f.name)), key=lambda f: f.name, reverse=True)
    ordered += sorted((f for f in files if not canon.match(f.name)), key=lambda f: f.name, reverse=True)
    for f in ordered:
        try:
            data = json.loads(f.read_text())
        except json.JSONDecodeError:
            return f  # read_result reports it
        if isinstance(data, dict) and is_gpu_result(data):
            return f
    return None


def read_result(path, *, record_keys) -> dict:
    """Load a results JSON and check every record has ``record_keys`` (clear ValueError otherwise)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path.name} is not valid JSON: {e}") from None
    recs = data.get("records") if isinstance(data, dict) else None
    if not isinstance(recs, list) or not recs:
        raise ValueError(f"{path.name} must be an object with a non-empty 'records' list")
    for i, r in enumerate(recs):
        missing = [k for k in record_keys if k not in r]
        if missing:
            raise ValueError(f"{path.name}: record {i} is missing {missing}")
        for k in ("ms", "step_ms", "exchange_ms"):  # None = not measured; a number must be a real time
            v = r.get(k)
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{path.name}: record {i} has {k}={v!r}, expected a time in ms")
    return data


def _roof_parts(profile: HardwareProfile, r: dict) -> tuple:
    """Ideal (efficiency 1, no launch cost) memory and math seconds of one mla_decode record."""
    t = mla_decode_term(profile, batch=int(r["B"]), group=int(r["G"]), heads=int(r["H"]), tokens_per_rank=float(r["L"]),
                        kv_format=r["kv_dtype"])
    t_mem = t.bytes / profile.hbm_bytes_per_s
    t_math = t.flops / profile.matmul_flops_per_s(profile.attention_math.get(r["kv_dtype"], "bf16"))
    return t_mem, t_math


def fit_attention_efficiency(profile: HardwareProfile, records) -> dict:
    """Fit ``ms = t0 + t_mem / eff_mem`` (memory-bound shapes) or ``t0 + t_math / eff_math`` (compute-bound)
    to the fastest backend of every shape, by least squares on the relative error.

    ``t_mem``/``t_math`` are the ideal times at the profile's ceilings; ``t0`` is the decode call's fixed
    cost (its launch plus ``attn_overhead_us``). A regime without samples keeps the profile's efficiency.
    Returns ``{"attn_memory", "attn_compute", "attn_overhead_us", "samples", "backends",
    "median_abs_rel_err", "max_abs_rel_err"}`` (the errors of the fit itself over the records).
    """
    best = {}
    for r in records:
        if r["kv_dtype"] not in KV_BYTES or not r["ms"]:
            continue
        key = (r["kv_dtype"], r["B"], r["L"], r["G"], r["H"], r.get("page_size"))
        if key not in best or r["ms"] < best[key]["ms"]:
            best[key] = r
    if not best:
        raise ValueError("no mla_decode record has a kv_dtype the planner knows "
                         f"({sorted(KV_BYTES)})")
    rows, ms, backends = [], [], {}
    for r in best.values():
        t_mem, t_math = _roof_parts(profile, r)
        rows.append((1.0, t_mem, 0.0) if t_mem >= t_math else (1.0, 0.0, t_math))
        ms.append(r["ms"] * 1e-3)
        backends[r["backend"]] = backends.get(r["backend"], 0) + 1
    X = np.asarray(rows) / np.asarray(ms)[:, None]  # each row divided by its time: relative residuals
    cols = [0] + [c for c in (1, 2) if X[:, c].any()]
    if len(ms) <= len(cols):  # too few shapes to separate a fixed cost from the slopes
        cols = cols[1:]
    coef = dict(zip(cols, np.linalg.lstsq(X[:, cols], np.ones(len(ms)), rcond=None)[0]))
    coef.setdefault(0, 0.0)
    if coef[0] < 0:  # no meaningful fixed cost: refit through the origin
        cols = cols[1:]
        coef = {0: 0.0, **dict(zip(cols, np.linalg.lstsq(X[:, cols], np.ones(len(ms)), rcond=None)[0]))}
    out = {"attn_memory": profile.eff("attn_memory"), "attn_compute": profile.eff("attn_compute")}
    for c, key in ((1, "attn_memory"), (2, "attn_compute")):
        if c in coef:
            out[key] = 1.0 if coef[c] <= 1.0 else 1.0 / coef[c]  # never above the measured ceiling
    t0 = coef[0]
    pred = [t0 + rw[1] / out["attn_memory"] + rw[2] / out["attn_compute"] for rw in rows]
    errs = [abs(p / m - 1.0) for p, m in zip(pred, ms)]
    out.update(attn_overhead_us=max(0.0, t0 * 1e6 - profile.kernel_launch_us),
               samples={"attn_memory": sum(1 for rw in rows if rw[1]), "attn_compute": sum(1 for rw in rows if rw[2])},
               backends=backends, median_abs_rel_err=statistics.median(errs), max_abs_rel_err=max(errs))
    return out


# Our packed exchange (helix_jax.ops.exchange): sanitize+pack writes one payload of 512 bf16 + an LSE
# padded to 16 B per (token, head); the all-to-all moves it (cp > 1 only); combine reads it back.
PAYLOAD_STATS_BYTES = 16


def our_exchange_parts(profile: HardwareProfile, *, T: int, H: int, cp: int) -> dict:
    """Seconds of sanitize+pack and combine, and the all-to-all bytes, of our exchange on one rank.

    pack reads ``[T, H, 512]`` bf16 + ``[T, H]`` fp32 and writes the payload; combine reads the payload
    (``C`` partials of ``H/C`` heads) and writes ``[T, H/C, 512]`` bf16 + ``[T, H/C]`` fp32. Both run at
    every cp, including 1 (where the all-to-all is skipped).
    """
    fixed = profile.kernel_launch_us * 1e-6
    bw = profile.hbm_bytes_per_s * profile.eff("elementwise")
    row, payload_row = 512 * ACT_BYTES + STATS_BYTES, 512 * ACT_BYTES + PAYLOAD_STATS_BYTES
    pack = T * H * (row + payload_row)
    comb = T * H * payload_row + T * (H // cp) * row
    return {"pack": fixed + pack / bw, "combine": fixed + comb / bw,
            "a2a_bytes": exchange_bytes(tokens=T, heads_tp=H, cp=cp, stats_bytes=PAYLOAD_STATS_BYTES)}


def fit_exchange(profile: HardwareProfile, records) -> dict | None:
    """Least-squares ``a2a = latency + bytes / bw`` over the cp > 1 records; ``a2a`` is the record's
    measured all-to-all part (``exchange_parts_ms["a2a"]``) or else ``exchange_ms`` minus the modelled
    pack and combine.

    Returns ``{"a2a_latency_us", "link_gb_per_s", "link"}`` (link = efficiency against
    ``link_gb_per_s``) or None without cp > 1 records.
    """
    pts = []
    for r in records:
        cp, T, H = int(r["cp"]), int(r["T"]), int(r["H"])
        if cp < 2 or r.get("exchange_ms") is None:
            continue
        ex = our_exchange_parts(profile, T=T, H=H, cp=cp)
        a2a_ms = (r.get("exchange_parts_ms") or {}).get("a2a")
        y = a2a_ms * 1e-3 if a2a_ms else max(0.0, r["exchange_ms"] * 1e-3 - ex["pack"] - ex["combine"])
        pts.append((ex["a2a_bytes"], y, r))
    if not pts:
        return None
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    if len(set(xs)) >= 2:
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        lat = my - slope * mx
    else:
        slope, lat = 0.0, 0.0
    if slope <= 0 or lat < 0:
        # Noise or one size only: take the measured bandwidth and put the rest into the latency.
        bws = [p[2]["a2a_gb_per_s"] * 1e9 for p in pts if p[2].get("a2a_gb_per_s")]
        bw = statistics.median(bws) if bws else profile.link_bytes_per_s * profile.eff("link")
        slope = 1.0 / bw
        lat = max(0.0, statistics.median(y - x * slope for x, y in zip(xs, ys)))
    bw = 1.0 / slope
    link = max(profile.link_bytes_per_s, bw)
    return {"a2a_latency_us": lat * 1e6, "link_gb_per_s": link / 1e9, "link": bw / link}


def apply_measurements(profile: HardwareProfile, results_dir=DEFAULT_RESULTS_DIR, *,
                       use_exchange: bool = True, mla_file=None) -> HardwareProfile:
    """The profile with ceilings and efficiencies from the newest results files (unchanged if none).

    ``use_exchange=False`` keeps the profile's link numbers (an out-of-sample check of the exchange);
    ``mla_file`` picks a specific decode results file instead of the newest canonical one."""
    prov = list(profile.provenance)
    mla = Path(mla_file) if mla_file is not None else latest_result(results_dir, "mla_decode")
    if mla is not None:
        data = read_result(mla, record_keys=_MLA_KEYS)
        ceil = data.get("ceilings") or {}
        upd = {}
        if _usable(ceil.get("copy_tb_per_s")):  # a run with --no-ceilings writes NaN: keep ours then
            upd["hbm_tb_per_s"] = float(ceil["copy_tb_per_s"])
        if _usable(ceil.get("matmul_tflop_per_s")):
            upd["matmul_tflop_per_s"] = {**profile.matmul_tflop_per_s, "bf16": float(ceil["matmul_tflop_per_s"])}
        profile = replace(profile, **upd).validate()
        fit = fit_attention_efficiency(profile, data["records"])
        profile = replace(profile, attn_overhead_us=fit["attn_overhead_us"]).with_efficiency(
            attn_memory=fit["attn_memory"], attn_compute=fit["attn_compute"])
        prov.append(f"{mla.name}: ceilings; decode fit over {sum(fit['samples'].values())} shapes "
                    f"({', '.join(f'{k} {v}' for k, v in fit['backends'].items())}): memory-bound "
                    f"{fit['attn_memory']:.3f} ({fit['samples']['attn_memory']} shapes), compute-bound "
                    f"{fit['attn_compute']:.3f} ({fit['samples']['attn_compute']}), fixed "
                    f"{fit['attn_overhead_us']:.1f} us + launch; fit error median "
                    f"{100 * fit['median_abs_rel_err']:.1f} %, max {100 * fit['max_abs_rel_err']:.1f} %")
    ex = latest_result(results_dir, "exchange") if use_exchange else None
    if ex is not None:
        fit = fit_exchange(profile, read_result(ex, record_keys=_EX_KEYS)["records"])
        if fit is not None:
            profile = replace(profile, a2a_latency_us=fit["a2a_latency_us"], link_gb_per_s=fit["link_gb_per_s"])
            profile = profile.with_efficiency(link=fit["link"])
            prov.append(f"{ex.name}: all-to-all latency {fit['a2a_latency_us']:.1f} us, "
                        f"{fit['link'] * fit['link_gb_per_s']:.0f} GB/s achieved")
    return replace(profile, provenance=tuple(prov)).validate()


def predict_helix_step(profile: HardwareProfile, *, cp: int, T: int, H: int, L: int, B: int | None = None,
                       G: int | None = None, kv_format: str = "bf16", include_append: bool = False) -> dict:
    """Seconds of one per-rank Helix attention step as ``benchmarks/exchange.py`` times it.

    ``T = B * G`` query tokens, ``H`` heads (all on this rank: tpa = 1), ``L`` global cached tokens per
    sequence, ``L / cp`` on this rank. Parts: ledger metadata (one small kernel), bounded decode,
    sanitize+pack, all-to-all (cp > 1), LSE combine; no HOP-B (our step does not overlap). The benchmark
    leaves the KV append out (``include_append`` adds it). Without ``B``/``G``: G = 1, B = T.
    """
    G = 1 if G is None else int(G)
    B = T // G if B is None else int(B)
    for k, v in (("cp", cp), ("T", T), ("H", H), ("L", L), ("B", B), ("G", G)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{k} must be a positive int, got {v!r}")
    if B * G != T:
        raise ValueError(f"T must equal B * G, got T={T}, B={B}, G={G}")
    if H % cp:
        raise ValueError(f"H={H} must be divisible by cp={cp} (heads are split over the all-to-all)")
    fixed = profile.kernel_launch_us * 1e-6
    ex = our_exchange_parts(profile, T=T, H=H, cp=cp)
    parts = {
        "metadata": fixed,
        "mla_decode": mla_decode_term(profile, batch=B, group=G, heads=H, tokens_per_rank=L / cp,
                                      kv_format=kv_format).seconds,
        "helix_pack": ex["pack"],
        "helix_a2a": a2a_term(profile, ex["a2a_bytes"]).seconds,
        "helix_combine": ex["combine"],
    }
    if include_append:
        append_bytes = 2.0 * T * 576 * kv_bytes_per_value(kv_format)
        parts["kv_append"] = fixed + append_bytes / (profile.hbm_bytes_per_s * profile.eff("elementwise"))
    parts["step"] = sum(parts.values())
    parts["exchange"] = parts["helix_pack"] + parts["helix_a2a"] + parts["helix_combine"]
    return parts


def compare_step_measurements(profile: HardwareProfile, records, *, target: float = TARGET_REL_ERR) -> dict:
    """Predicted vs measured ``step_ms`` (and ``exchange_ms`` at cp > 1) for every record with a step time.

    Relative error = predicted / measured - 1. Records flagged ``step_ms_estimated`` (a step composed from
    separately measured parts) are compared too and counted apart.
    """
    rows = []
    for r in records:
        if r.get("step_ms") is None:
            continue
        pred = predict_helix_step(profile, cp=int(r["cp"]), T=int(r["T"]), H=int(r["H"]), L=int(r["L"]),
                                  B=r.get("B"), G=r.get("G"), kv_format=r.get("kv_dtype", "bf16"))
        meas = float(r["step_ms"])
        row = {"cp": int(r["cp"]), "T": int(r["T"]), "B": r.get("B"), "G": r.get("G"), "H": int(r["H"]),
               "L": int(r["L"]), "measured_ms": meas, "predicted_ms": 1e3 * pred["step"],
               "predicted_decode_ms": 1e3 * pred["mla_decode"], "rel_err": 1e3 * pred["step"] / meas - 1.0,
               "estimated": bool(r.get("step_ms_estimated", False))}
        if int(r["cp"]) > 1 and r.get("exchange_ms"):
            row.update(measured_exchange_ms=r["exchange_ms"], predicted_exchange_ms=1e3 * pred["exchange"],
                       exchange_rel_err=1e3 * pred["exchange"] / r["exchange_ms"] - 1.0)
        rows.append(row)
    if not rows:
        raise ValueError("no record has a measured step_ms to compare with")
    errs = [abs(x["rel_err"]) for x in rows]
    return {"rows": rows, "max_abs_rel_err": max(errs), "median_abs_rel_err": statistics.median(errs),
            "within_target": all(e <= target for e in errs), "target": target,
            "estimated_steps": sum(x["estimated"] for x in rows), "steps": len(rows),
            "assumed_group": "B and G from the records (absent: G = 1, B = T)"}


def calibration_report(results_dir=DEFAULT_RESULTS_DIR, *, profile="h200") -> dict:
    """What ``plan --calibrate`` prints: the calibrated profile and the step comparison (if measured).

    The comparison uses the profile calibrated from ``mla_decode`` only, so the exchange part is
    predicted from the documented link defaults (out of sample); ``with_exchange_fit`` repeats it with
    the all-to-all fitted from the same exchange file (in sample, for reference).
    """
    prof = load_profile(profile, results_dir=results_dir)
    ex = latest_result(results_dir, "exchange") if results_dir is not None else None
    out = {"profile": prof.name, "provenance": list(prof.provenance),
           "efficiency": dict(prof.efficiency), "hbm_tb_per_s": prof.hbm_tb_per_s,
           "matmul_tflop_per_s": dict(prof.matmul_tflop_per_s), "a2a_latency_us": prof.a2a_latency_us,
           "link_gb_per_s": prof.link_gb_per_s, "attn_overhead_us": prof.attn_overhead_us}
    if ex is None:
        out["comparison"] = None
        out["status"] = f"no GPU-timed exchange_*.json in {results_dir}: nothing measured to compare with yet"
        return out
    data = read_result(ex, record_keys=_EX_KEYS)
    recs = data["records"]
    base = load_profile(profile, results_dir=None)
    # A step composed from a named decode run is compared with the model calibrated on that same run.
    src = (data.get("sources") or {}).get("decode")
    src_file = Path(results_dir) / src if src and (Path(results_dir) / src).is_file() else None
    decode_only = (apply_measurements(base, results_dir, use_exchange=False, mla_file=src_file)
                   if base.calibrate_from_results else base)
    out["comparison"] = compare_step_measurements(decode_only, recs)
    out["comparison"]["file"] = ex.name
    out["comparison"]["decode_calibrated_from"] = (src_file or latest_result(results_dir, "mla_decode") or
                                                   Path("(defaults)")).name
    out["comparison"]["profile"] = "decode calibrated from mla_decode; exchange from the profile's link defaults"
    out["comparison"]["provenance"] = list(decode_only.provenance)
    fitted = compare_step_measurements(apply_measurements(base, results_dir, mla_file=src_file)
                                       if base.calibrate_from_results else prof, recs)
    out["with_exchange_fit"] = {k: fitted[k] for k in ("max_abs_rel_err", "median_abs_rel_err", "within_target")}
    out["status"] = "within target" if out["comparison"]["within_target"] else "outside target"
    return out
