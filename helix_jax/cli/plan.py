"""``python -m helix_jax plan``: roofline planner for Helix layouts (helix_jax.plan).

Sweeps the conventional TP/EP layouts and Helix (KVP x TPA attention, TP x EP FFN) over batch sizes,
prints both Pareto frontiers and the comparison (best TTL, batch at equal latency), optionally plots
them; ``--json`` prints one JSON object (one line) instead; ``--calibrate`` compares the H200 model with
our measured Helix step.
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace

from ..plan import calibrate as cal
from ..plan.hardware import DEFAULT_RESULTS_DIR, load_profile, profile_names
from ..plan.latency import KV_BYTES, WEIGHT_BYTES, Layout, Workload, step
from ..plan.presets import PRESETS, get_preset
from ..plan.sweeps import PAPER, compare, enumerate_layouts, plot_frontier, sweep


def add_arguments(p):
    p.add_argument("--model", default="deepseek-r1", help=f"model preset ({', '.join(PRESETS)}) or alias")
    p.add_argument("--context", type=int, default=1 << 20, help="cached tokens per sequence (default 1M)")
    p.add_argument("--profile", default="gb200-nvl72",
                   help=f"hardware profile ({', '.join(profile_names())}) or a profile .json path")
    p.add_argument("--kv-format", default="fp8", choices=sorted(KV_BYTES))
    p.add_argument("--weight-format", default="nvfp4", choices=sorted(WEIGHT_BYTES))
    p.add_argument("--draft-len", type=int, default=0, help="speculative draft tokens per step (G = 1 + draft_len)")
    p.add_argument("--accept-len", type=float, default=None,
                   help="mean tokens committed per step incl. the bonus token (default 1; needs --draft-len)")
    p.add_argument("--page-size", type=int, default=64)
    p.add_argument("--no-hopb", action="store_true", help="do not overlap the all-to-all with attention (HOP-B)")
    p.add_argument("--max-gpus", type=int, default=None, help="largest N to consider (default: the whole domain)")
    p.add_argument("--plot", default=None, metavar="OUT.png", help="plot the Pareto frontiers (matplotlib)")
    p.add_argument("--top", type=int, default=12, help="frontier rows to print per family")
    p.add_argument("--results-dir", default=str(DEFAULT_RESULTS_DIR),
                   help="benchmarks/results directory the h200 profile is calibrated from")
    p.add_argument("--calibrate", action="store_true",
                   help="compare the H200 model with the measured Helix step (exchange_*.json) and exit")
    p.add_argument("--json", action="store_true", help="print only one JSON object (one line)")


def _table(points, top):
    lines = [f"  {'layout':38s} {'GPUs':>4s} {'batch':>6s} {'TTL ms':>8s} {'tok/s/user':>10s} {'tok/s/GPU':>10s} "
             f"{'GB/GPU':>7s}"]
    for q in points[:top]:
        lines.append(f"  {q['layout']['label']:38s} {q['layout']['gpus']:4d} {q['batch']:6d} {q['ttl_ms']:8.3f} "
                     f"{q['tokens_per_s_user']:10.1f} {q['tokens_per_s_gpu']:10.2f} {q['memory_gb_per_gpu']:7.1f}")
    if len(points) > top:
        lines.append(f"  ... {len(points) - top} more (--top)")
    return "\n".join(lines)


def _breakdown(m, prof, wl, point):
    lay = Layout(kvp=point["layout"]["kvp"], tpa=point["layout"]["tpa"], ep=point["layout"]["ep"],
                 reprovision=point["layout"]["reprovision"])
    r = step(m, prof, lay, replace(wl, batch=point["batch"]))
    return {k: round(v, 4) for k, v in sorted(r.breakdown_ms().items(), key=lambda kv: -kv[1])}


def _run_calibrate(args) -> int:
    rep = cal.calibration_report(args.results_dir)
    if args.json:
        print(json.dumps(rep))
        return 0
    print(f"profile {rep['profile']}: HBM {rep['hbm_tb_per_s']} TB/s, matmul {rep['matmul_tflop_per_s']} TFLOP/s")
    print("  efficiencies: " + ", ".join(f"{k}={v:.3f}" for k, v in rep["efficiency"].items()))
    for line in rep["provenance"] or ["(no measurements found: documented defaults)"]:
        print(f"  from {line}")
    c = rep["comparison"]
    if c is None:
        print(rep["status"])
        return 0
    print(f"Helix step, predicted vs measured ({c['file']}; decode calibrated from "
          f"{c['decode_calibrated_from']}, exchange from link defaults; {c['assumed_group']}):")
    for r in c["rows"]:
        ex = (f"; exchange {r['measured_exchange_ms']:.4f} vs {r['predicted_exchange_ms']:.4f} ms "
              f"({100 * r['exchange_rel_err']:+.0f} %)" if "exchange_rel_err" in r else "")
        print(f"  cp={r['cp']} T={r['T']:4d} (B={r['B']}, G={r['G']}) L={r['L']}: measured "
              f"{r['measured_ms']:.4f} ms{' (estimate)' if r['estimated'] else ''}, predicted "
              f"{r['predicted_ms']:.4f} ms ({100 * r['rel_err']:+.1f} %){ex}")
    if c["estimated_steps"]:
        print(f"  {c['estimated_steps']} of {c['steps']} step times are estimates composed by the benchmark")
    w = rep["with_exchange_fit"]
    print(f"  with the all-to-all fitted from the same file: max |error| {100 * w['max_abs_rel_err']:.1f} %")
    print(f"max |error| {100 * c['max_abs_rel_err']:.1f} % (target {100 * c['target']:.0f} %): {rep['status']}")
    return 0


def run(args) -> int:
    try:
        return _run(args)
    except ValueError as e:  # impossible layouts, nothing fits, bad profiles: say why, no traceback
        print(f"plan: error: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    if args.calibrate:
        return _run_calibrate(args)
    m = get_preset(args.model)
    prof = load_profile(args.profile, results_dir=args.results_dir)
    wl = Workload(context=args.context, draft_len=args.draft_len, accept_len=args.accept_len,
                  kv_format=args.kv_format, weight_format=args.weight_format, page_size=args.page_size,
                  hopb=not args.no_hopb).validate()
    layouts = enumerate_layouts(m, prof, max_gpus=args.max_gpus)
    points = sweep(m, prof, wl, layouts)
    res = compare(m, prof, wl, layouts=layouts, points=points)
    res["breakdown_ms"] = {f: _breakdown(m, prof, wl, res[f"best_{f}"]) for f in ("helix", "baseline")}
    res["inputs"] = {"model": m.name, "profile": prof.name, "profile_source": prof.source, "context": wl.context,
                     "kv_format": wl.kv_format, "weight_format": wl.weight_format, "draft_len": wl.draft_len,
                     "accept_len": wl.accepted, "page_size": wl.page_size, "hopb": wl.hopb,
                     "layouts": len(layouts), "points": len(points)}
    res["paper"] = PAPER
    if args.plot:
        plot_frontier(points, args.plot, title=f"{m.name}, context {wl.context}, {prof.name} ({prof.source}), "
                                               f"KV {wl.kv_format}, weights {wl.weight_format}")
        res["plot"] = args.plot
    if args.json:
        print(json.dumps(res))
        return 0
    print(f"{m.name} at context {wl.context} on {prof.name} ({prof.source}); KV {wl.kv_format}, weights "
          f"{wl.weight_format}, G={wl.group}, accepted/step={wl.accepted:g}, HOP-B {'on' if wl.hopb else 'off'}; "
          f"{len(layouts)} layouts, {len(points)} points")
    names = {"baseline": "baseline (TP attention, KV duplicated)", "kvp": "KVP without re-provisioning",
             "helix": "Helix"}
    for fam in ("baseline", "kvp", "helix"):
        if fam in res["frontier"]:
            print(f"\n{names[fam]} Pareto frontier (most interactive first):")
            print(_table(res["frontier"][fam], args.top))
    bh, bb = res["best_helix"], res["best_baseline"]
    print(f"\nbest TTL: Helix {bh['ttl_ms']:.3f} ms ({bh['layout']['label']}, batch {bh['batch']}) vs baseline "
          f"{bb['ttl_ms']:.3f} ms ({bb['layout']['label']}, batch {bb['batch']})")
    print(f"ttl_ratio (baseline / Helix): {res['ttl_ratio']:.2f}x   [paper: up to {PAPER['ttl_ratio']}x]")
    print(f"batch_ratio at equal latency: {res['batch_ratio']:.1f}x at TTL <= {res['batch_ratio_at_ttl_ms']:.3f} ms   "
          f"[paper: up to {PAPER['batch_ratio']:.0f}x]")
    if "vs_kvp" in res:
        v = res["vs_kvp"]
        print(f"vs KVP without re-provisioning (best {v['best_kvp']['ttl_ms']:.3f} ms, "
              f"{v['best_kvp']['layout']['label']}): ttl_ratio {v['ttl_ratio']:.2f}x, batch_ratio "
              f"{v['batch_ratio']:.1f}x at TTL <= {v['batch_ratio_at_ttl_ms']:.3f} ms")
    for fam in ("helix", "baseline"):
        top = list(res["breakdown_ms"][fam].items())[:5]
        print(f"  {fam} step at its best TTL, largest terms (ms): " + ", ".join(f"{k} {v:.3f}" for k, v in top))
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    import argparse

    ap = argparse.ArgumentParser()
    add_arguments(ap)
    sys.exit(run(ap.parse_args()))
