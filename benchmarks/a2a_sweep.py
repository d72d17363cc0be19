"""Helix exchange all-to-all under NCCL / XLA settings, one fresh process per setting (issue #5).

NCCL reads its environment once, at communicator creation, so every variant runs in its own
subprocess (``--worker``). Each worker measures, at T query tokens, H heads, cp ranks:

  * ``exchange``: the exchange program of ``benchmarks/exchange.py`` (``exchange_fn``: ``chain``
    chained sanitize+pack -> all-to-all -> combine, ffi backend on GPU), its CUPTI kernel time split
    by kernel class (``exchange._classify``); the all-to-all part is what the variant is judged on;
  * ``a2a_plain``: ``lax.all_to_all`` of a contiguous per-rank ``[cp, n]`` bf16 array of the same
    bytes as the exchange payload (no pack/combine, no layout);
  * ``ppermute``: ``lax.ppermute`` to the next rank of the bytes one rank sends in the all-to-all;
  * ``device_put`` (first variant only): ``jax.device_put`` of those bytes from GPU 0 to GPU 1, one
    way and both ways at once, wall clock (a copy-engine transfer: CUPTI sees no kernel).

Bandwidth = bytes leaving a rank / time; link fraction against 478 GB/s each way (18 NVLinks,
``exchange.NVLINK_GB_S``). NCCL_NVLS_ENABLE=0 is forced in every worker (no NVLink multicast).
The parent never initialises a JAX backend (it would hold the GPUs). Writes
``<out>/a2a_sweep_<date>.{json,md}`` (``_dryrun`` added on CPU).

    python benchmarks/a2a_sweep.py [--variants baseline,p2p_nch64,...] [--budget-s 330]
    python benchmarks/a2a_sweep.py --dry-run      # CPU, 2 virtual devices: mechanics only
    python benchmarks/a2a_sweep.py --list
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULT_TAG = "A2A_SWEEP_RESULT "
NVLINK_GB_S = 478.0            # = benchmarks.exchange.NVLINK_GB_S (not imported: that imports jax)
D = 512
TOKENS = (1, 8, 64, 512)       # benchmarks.exchange.GROUP_FOR_T

# (name, NCCL/other env, extra XLA flags, why). Order = priority: the budget cuts from the end.
# Every knob below exists in NCCL 2.2x-2.30 (src/init.cc, src/graph/paths.cc, src/transport/p2p.cc)
# or in jaxlib 0.11.2's DebugOptions (checked: an unknown XLA flag aborts the worker).
VARIANTS = [
    ("baseline", {}, [], "defaults (NCCL_NVLS_ENABLE=0 only)"),
    ("p2p_nch64", {"NCCL_MIN_P2P_NCHANNELS": "64"}, [], "p2p channels = 64 (MAXCHANNELS): 32 per peer"),
    ("p2p_nch32", {"NCCL_MIN_P2P_NCHANNELS": "32"}, [],
     "p2p channels >= 32: one send per peer is striped over p2pnChannels/nRanks channels"),
    ("chunk1m_buf8m", {"NCCL_P2P_NVL_CHUNKSIZE": "1048576", "NCCL_BUFFSIZE": "8388608"}, [],
     "1 MiB p2p steps (the chunk is capped at BUFFSIZE/8, hence 8 MiB buffers)"),
    ("p2p_nch64_chunk1m", {"NCCL_MIN_P2P_NCHANNELS": "64", "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
                           "NCCL_BUFFSIZE": "8388608"}, [], "both"),
    ("nch32", {"NCCL_MIN_NCHANNELS": "32", "NCCL_MAX_NCHANNELS": "32"}, [],
     "32 ring channels (p2p channels follow nChannels)"),
    ("p2p_read", {"NCCL_P2P_READ_ENABLE": "1"}, [], "P2P read (NCCL default: read only on sm_80 NVLink)"),
    ("xla_user_buffers", {}, ["--xla_gpu_enable_nccl_user_buffers=true"],
     "XLA allocates collective buffers with ncclMemAlloc and registers them (zero-copy p2p)"),
    ("p2p_ce", {"NCCL_P2P_USE_CUDA_MEMCPY": "1"}, [], "p2p through copy engines (proxy thread)"),
    ("chunk2m_buf16m", {"NCCL_P2P_NVL_CHUNKSIZE": "2097152", "NCCL_BUFFSIZE": "16777216"}, [],
     "2 MiB p2p steps"),
    ("xla_memcpy_p2p", {}, ["--xla_gpu_use_memcpy_local_p2p=true"],
     "XLA memcpy for local all-to-all (CUPTI sees no kernel: a2a from wall - other kernels)"),
    ("buf16m", {"NCCL_BUFFSIZE": "16777216"}, [], "bigger FIFO, same 512 KiB chunk"),
    ("nch16", {"NCCL_MIN_NCHANNELS": "16", "NCCL_MAX_NCHANNELS": "16"}, [], "16 ring channels"),
    ("proto_simple", {"NCCL_PROTO": "Simple"}, [], "control: p2p above 16 KiB/channel is Simple anyway"),
    ("net_peer32", {"NCCL_NCHANNELS_PER_NET_PEER": "32"}, [], "control: applies to network peers only"),
]
_NCCL_PATTERNS = {
    "version": re.compile(r"NCCL version (\S+)"),
    "channels": re.compile(r"(\d+ coll channels, \d+ collnet channels, \d+ nvls channels, "
                           r"\d+ p2p channels, \d+ p2p channels per peer)"),
    "p2p_chunksize": re.compile(r"P2P Chunksize set to (\d+)"),
    "transports": re.compile(r"via (P2P/\S+|SHM/\S+|NET/\S+)"),
    "env_seen": re.compile(r"(NCCL_\w+) set by environment to ([^\s]+?)\.?$", re.M),
}


# ------------------------------------------------------------------------------------------ parent
def payload_bytes(tokens: int, heads: int, itemsize: int = 2) -> int:
    """Bytes of one rank's exchange payload ``[cp, T, H/cp, D + 16/itemsize]`` (bf16: LSE padded to 16 B)."""
    return tokens * heads * (D + 16 // itemsize) * itemsize


def parse_extra(spec: str):
    """``NAME:KEY=VAL;KEY=VAL`` -> a variant; keys starting with ``--xla`` are XLA flags."""
    if ":" not in spec:
        raise ValueError(f"--extra must look like NAME:KEY=VAL;KEY=VAL, got {spec!r}")
    name, rest = spec.split(":", 1)
    env, flags = {}, []
    for item in filter(None, rest.split(";")):
        if item.startswith("--xla"):
            flags.append(item)
        elif "=" in item:
            k, v = item.split("=", 1)
            env[k.strip()] = v.strip()
        else:
            raise ValueError(f"--extra item must be KEY=VAL or an --xla flag, got {item!r}")
    return name.strip(), env, flags, "user-defined (--extra)"


def select_variants(names: str | None, extras=()):
    table = {v[0]: v for v in VARIANTS}
    if names is None:
        chosen = list(VARIANTS)
    elif names == "none":
        chosen = []
    else:
        chosen = []
        for n in filter(None, names.split(",")):
            if n not in table:
                raise ValueError(f"--variants: unknown variant {n!r}; known: {', '.join(table)}")
            chosen.append(table[n])
    chosen += [parse_extra(e) for e in extras]
    seen = set()
    for v in chosen:
        if v[1].get("NCCL_NVLS_ENABLE", "0") != "0":
            raise ValueError(f"variant {v[0]!r}: NCCL_NVLS_ENABLE must stay 0 (no NVLink multicast)")
        if v[0] in seen:
            raise ValueError(f"variant {v[0]!r} given twice")
        seen.add(v[0])
    return chosen


def worker_env(base: dict, env: dict, flags, *, dry_run: bool, cp: int, cache_dir: str | None = None) -> dict:
    """The subprocess environment: base + variant env, XLA flags appended, NVLS forced off."""
    e = dict(base)
    if cache_dir:   # env-only variants reuse the executables (the XLA flags are part of the cache key)
        e.update({"JAX_COMPILATION_CACHE_DIR": cache_dir, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                  "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})
    xla = e.get("XLA_FLAGS", "")
    if dry_run:
        xla = " ".join(f for f in xla.split() if not f.startswith("--xla_force_host_platform_device_count"))
        xla += f" --xla_force_host_platform_device_count={cp}"
        e["JAX_PLATFORMS"] = "cpu"
    e["XLA_FLAGS"] = " ".join([xla.strip(), *flags]).strip()
    e.update(env)
    e["NCCL_NVLS_ENABLE"] = "0"
    e.setdefault("NCCL_DEBUG", "INFO")           # channel counts, chunk size, transport in the record
    e.setdefault("NCCL_DEBUG_SUBSYS", "INIT,ENV")   # ENV: "NCCL_X set by environment to v" = NCCL read it
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), e.get("PYTHONPATH", "")]))
    return e


def nccl_info(text: str) -> dict:
    """Distinct NCCL INIT facts found in a worker's output."""
    out = {}
    for key, pat in _NCCL_PATTERNS.items():
        vals = []
        for m in pat.finditer(text):
            v = "=".join(m.groups())
            if v not in vals:
                vals.append(v)
        out[key] = vals
    return out


def run_variant(variant, spec: dict, *, dry_run: bool, timeout_s: float, cache_dir: str | None = None) -> dict:
    name, env, flags, note = variant
    rec = {"name": name, "env": env, "xla_flags": flags, "note": note, "status": "failed"}
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", json.dumps(spec)]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=worker_env(os.environ, env, flags, dry_run=dry_run, cp=spec["cp"],
                                          cache_dir=cache_dir),
                           cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
        text, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        text += (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc = None
        rec["status"] = "timeout"
    rec["seconds"] = time.perf_counter() - t0
    rec["nccl"] = nccl_info(text)
    line = next((ln for ln in reversed(text.splitlines()) if ln.startswith(RESULT_TAG)), None)
    if line is None:
        rec["error"] = f"rc={rc}; no result line; output tail:\n" + "\n".join(
            ln for ln in text.splitlines()[-40:] if "NCCL INFO" not in ln)[-3000:]
        return rec
    rec.update(json.loads(line[len(RESULT_TAG):]))
    rec["status"] = "ok" if rec.get("a2a_ms") is not None else "no_a2a_time"
    return rec


def run_torch_ref(nbytes: int, *, timeout_s: float) -> dict:
    """``torch_peer_copy`` in its own process (torch and JAX each load CUDA/NCCL libraries)."""
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--torch-ref", str(nbytes)]
    try:
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout_s:.0f} s"}
    line = next((ln for ln in reversed(p.stdout.splitlines()) if ln.startswith(RESULT_TAG)), None)
    if line is None:
        return {"error": f"rc={p.returncode}: " + (p.stdout + p.stderr).strip()[-400:]}
    return json.loads(line[len(RESULT_TAG):])


def summarize(records):
    """Adds ``vs_baseline`` / ``same_output_as_baseline`` and returns the best variant's summary."""
    base = next((r for r in records if r["name"] == "baseline" and r.get("a2a_ms")), None)
    for r in records:
        if base and r.get("a2a_ms"):
            r["speedup_vs_baseline"] = base["a2a_ms"] / r["a2a_ms"]
        if base and r.get("out_sha1"):
            r["same_output_as_baseline"] = r["out_sha1"] == base["out_sha1"]
    ok = [r for r in records if r.get("a2a_ms") and not r.get("repeat_of")]
    if not ok:
        return None
    b = min(ok, key=lambda r: r["a2a_ms"])
    rep = {r["repeat_of"]: r.get("a2a_ms") for r in records if r.get("repeat_of")}
    return {"name": b["name"], "env": b["env"], "xla_flags": b["xla_flags"], "a2a_ms": b["a2a_ms"],
            "a2a_gb_per_s": b["a2a_gb_per_s"], "link_fraction": b["link_fraction"],
            "speedup_vs_baseline": b.get("speedup_vs_baseline"), "meets_70pct": (b["link_fraction"] or 0) >= 0.70,
            "repeat_a2a_ms": rep.get(b["name"]), "baseline_repeat_a2a_ms": rep.get("baseline")}


def _f(x, fmt="{:.4f}"):
    return "–" if x is None else fmt.format(x)


def one_line(i, n, r) -> str:
    refs = r.get("refs", {})
    ref = "  ".join(f"{k} {_f(v.get('gb_per_s'), '{:.0f}')} GB/s" for k, v in refs.items())
    ch = r.get("nccl", {}).get("channels") or ["?"]
    s = (f"[{i}/{n}] {r['name']:<18} {r['status']:<8} a2a {_f(r.get('a2a_ms'))} ms "
         f"{_f(r.get('a2a_gb_per_s'), '{:.0f}')} GB/s ({_f(r.get('link_fraction'), '{:.0%}')} of link; "
         f"{r.get('a2a_source', '-')})  exchange {_f(r.get('exchange_kernel_ms'))} ms  | {ref} | "
         f"nccl: {ch[0].split(', ', 3)[-1] if ch[0] != '?' else '?'}"
         f"{' ' + ' '.join(r['nccl']['env_seen']) if r.get('nccl', {}).get('env_seen') else ''} | "
         f"{r.get('seconds', 0):.1f} s")
    if r.get("error"):
        s += "\n    " + r["error"].strip().splitlines()[-1][:300]
    return s


def markdown(doc) -> str:
    lines = [f"# Exchange all-to-all sweep ({doc['device']}, {doc['date']})", "",
             f"cp={doc['cp']}, T={doc['T']}, H={doc['H']}: payload {doc['payload_bytes_per_rank']} B per rank, "
             f"{doc['sent_bytes_per_rank']} B leave each rank; exchange backend `{doc['exchange_variant']}`, "
             f"{doc['chain']} exchanges chained per program; times: {doc['timing']}; link "
             f"{doc['nvlink_gb_per_s_each_way']:.0f} GB/s each way. NCCL_NVLS_ENABLE=0 in every run.", "",
             "| variant | env / XLA flags | status | a2a ms | GB/s | link | vs baseline | exchange ms "
             "| plain a2a GB/s | ppermute GB/s | NCCL p2p channels (per peer) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["variants"]:
        knobs = " ".join([f"{k}={v}" for k, v in r["env"].items()] + r["xla_flags"]) or "–"
        refs = r.get("refs", {})
        ch = (r.get("nccl") or {}).get("channels") or []
        pch = "; ".join(re.sub(r".*nvls channels, ", "", c) for c in ch) or "–"
        lines.append(f"| {r['name']} | `{knobs}` | {r['status']} | {_f(r.get('a2a_ms'))} | "
                     f"{_f(r.get('a2a_gb_per_s'), '{:.0f}')} | {_f(r.get('link_fraction'), '{:.0%}')} | "
                     f"{_f(r.get('speedup_vs_baseline'), '{:.2f}x')} | {_f(r.get('exchange_kernel_ms'))} | "
                     f"{_f(refs.get('a2a_plain', {}).get('gb_per_s'), '{:.0f}')} | "
                     f"{_f(refs.get('ppermute', {}).get('gb_per_s'), '{:.0f}')} | {pch} |")
    dp = next((r["refs"] for r in doc["variants"] if "device_put_1way" in r.get("refs", {})), None)
    if dp:
        cps = [f"{k} {_f(v.get('gb_per_s'), '{:.0f}')}" + (" (wrong data!)" if v.get("correct") is False else "")
               + (f" ({v['error']})" if v.get("error") else "")
               for k, v in {**dp, **(doc.get("torch_peer_copy") or {})}.items()
               if k.startswith(("device_put", "torch_peer")) and isinstance(v, dict)]
        lines += ["", "Copy references (first variant; wall clock, device 0 -> device 1, GB/s per direction): "
                  + ", ".join(cps)]
    pp = [(r["name"], r["refs"]["exchange_ppermute"]) for r in doc["variants"]
          if "exchange_ppermute" in r.get("refs", {})]
    if pp:
        lines += ["", "Exchange with the all-to-all as ppermutes of the peers' chunks (own chunk not copied by "
                  "NCCL; same output bits as the exchange?): "
                  + "; ".join(f"{n}: a2a {_f(v['ms'])} ms ({_f(v['link_fraction'], '{:.0%}')}), all kernels "
                              f"{_f(v.get('kernel_ms'))} ms, same={v['correct']}" for n, v in pp)]
    nv = sorted({v for r in doc["variants"] for v in (r.get("nccl") or {}).get("version", [])})
    if nv:
        lines += ["", f"NCCL {', '.join(nv)}."]
    if doc.get("best"):
        b = doc["best"]
        lines += ["", f"Best: `{b['name']}` {_f(b['a2a_ms'])} ms = {_f(b['a2a_gb_per_s'], '{:.0f}')} GB/s "
                  f"({_f(b['link_fraction'], '{:.0%}')} of link, {_f(b['speedup_vs_baseline'], '{:.2f}x')} "
                  f"baseline); target 70 % {'met' if b['meets_70pct'] else 'not met'}"
                  + (f"; repeated in fresh processes: {_f(b.get('repeat_a2a_ms'))} ms vs baseline "
                     f"{_f(b.get('baseline_repeat_a2a_ms'))} ms" if b.get("repeat_a2a_ms") else "") + "."]
    lines += ["", "a2a ms: median over reps of the per-device CUPTI time of the all-to-all kernels per exchange "
              "(includes waiting for the peer); `wall-minus-kernels` where the transfer is not a kernel."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=None, help="comma list of variant names (default: all, in priority order)")
    ap.add_argument("--extra", action="append", default=[],
                    help="add a variant NAME:KEY=VAL;KEY=VAL;--xla_flag=v (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the variants and exit")
    ap.add_argument("--cp", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=None, help=f"T in {TOKENS} (default 512; dry run 8)")
    ap.add_argument("--heads", type=int, default=None, help="H (default 128; dry run 16)")
    ap.add_argument("--chain", type=int, default=None, help="exchanges chained per program (default 16; dry run 2)")
    ap.add_argument("--reps", type=int, default=None, help="timed calls per measurement (default 7; dry run 2)")
    ap.add_argument("--wall-n", type=int, default=None, help="wall-clock calls (default 10; dry run 2)")
    ap.add_argument("--refs", choices=("all", "first", "none"), default="all",
                    help="plain all-to-all / ppermute references in every variant, the first only, or none")
    ap.add_argument("--budget-s", type=float, default=300.0,
                    help="skip variants that would start past this many seconds (estimate: slowest after the first)")
    ap.add_argument("--variant-timeout-s", type=float, default=90.0)
    ap.add_argument("--no-repeat", action="store_true",
                    help="do not re-run the baseline and the fastest variant at the end")
    ap.add_argument("--no-compile-cache", action="store_true",
                    help="compile every program in every worker (default: a sweep-private JAX compilation cache)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, cp virtual devices: mechanics only")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"))
    ap.add_argument("--torch-timeout-s", type=float, default=45.0,
                    help="the torch peer-copy reference (own process, after the variants; GPU only)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--torch-ref", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        return worker(json.loads(a.worker))
    if a.torch_ref is not None:
        print(RESULT_TAG + json.dumps(torch_peer_copy(a.torch_ref, k=20)), flush=True)
        return 0
    variants = select_variants(a.variants, a.extra)
    if a.list:
        for name, env, flags, note in variants:
            print(f"{name:<20} {' '.join([f'{k}={v}' for k, v in env.items()] + flags) or '-':<70} {note}")
        return 0
    dry = a.dry_run
    spec = {"cp": a.cp, "tokens": a.tokens or (8 if dry else 512), "heads": a.heads or (16 if dry else 128),
            "chain": a.chain or (2 if dry else 16), "reps": a.reps or (2 if dry else 7),
            "wall_n": a.wall_n or (2 if dry else 10)}
    if spec["tokens"] not in TOKENS:
        raise ValueError(f"--tokens must be one of {TOKENS}, got {spec['tokens']}")
    if a.cp < 2 or spec["heads"] % a.cp:
        raise ValueError(f"--cp must be >= 2 and divide --heads, got cp={a.cp}, heads={spec['heads']}")
    t_start = time.perf_counter()
    records, slowest = [], 0.0
    cache_dir = None if a.no_compile_cache else tempfile.mkdtemp(prefix="a2a_sweep_jcc_")
    print(f"a2a sweep: {len(variants)} variants, cp={a.cp}, T={spec['tokens']}, H={spec['heads']}, "
          f"payload {payload_bytes(spec['tokens'], spec['heads'])} B/rank, budget {a.budget_s:.0f} s"
          f"{' (dry run, CPU)' if dry else ''}", flush=True)
    for i, v in enumerate(variants, 1):
        elapsed = time.perf_counter() - t_start
        if elapsed + slowest > a.budget_s:
            r = {"name": v[0], "env": v[1], "xla_flags": v[2], "note": v[3], "status": "skipped",
                 "error": f"budget: {elapsed:.0f} s used, next estimated {slowest:.0f} s"}
        else:
            s = dict(spec, refs=a.refs == "all" or (a.refs == "first" and i == 1), device_put=i == 1)
            r = run_variant(v, s, dry_run=dry, timeout_s=min(a.variant_timeout_s, max(a.budget_s - elapsed, 10)),
                            cache_dir=cache_dir)
            # the first worker is cold (empty compile cache, copy references): estimate from the others
            slowest = r["seconds"] if i == 1 else max(r["seconds"], 0.0 if i == 2 else slowest)
        records.append(r)
        print(one_line(i, len(variants), r), flush=True)
    # Repeat the baseline and the fastest variant in fresh processes if time allows: one sweep point
    # is one process's median, and process-to-process spread must not pick the winner.
    lead = summarize(records)
    if lead and not a.no_repeat and lead["name"] != "baseline":
        again = [v for v in variants if v[0] in ("baseline", lead["name"])]
        for v in again:
            elapsed = time.perf_counter() - t_start
            if elapsed + slowest > a.budget_s:
                print(f"repeat of {v[0]} skipped (budget)", flush=True)
                continue
            r = run_variant(v, dict(spec, refs=False, device_put=False), dry_run=dry, cache_dir=cache_dir,
                            timeout_s=min(a.variant_timeout_s, max(a.budget_s - elapsed, 10)))
            r["name"], r["repeat_of"] = v[0] + "_repeat", v[0]
            records.append(r)
            print(one_line(len(records), len(records), r), flush=True)
    if cache_dir:
        shutil.rmtree(cache_dir, ignore_errors=True)
    sent = payload_bytes(spec["tokens"], spec["heads"]) * (a.cp - 1) // a.cp
    torch_ref = {"skipped": "dry run (CPU)"} if dry else run_torch_ref(sent, timeout_s=a.torch_timeout_s)
    tl = ", ".join(f"{k} {v['gb_per_s']:.0f} GB/s ({v['link_fraction']:.0%})" for k, v in torch_ref.items()
                   if isinstance(v, dict))
    print(f"torch peer copy (copy engines, own process): {tl or torch_ref}", flush=True)
    best = summarize(records)
    first = next((r for r in records if r.get("device")), {})
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    doc = {"device": first.get("device", "unknown (no variant ran)"), "date": date, "dry_run": dry,
           "cp": a.cp, "T": spec["tokens"], "H": spec["heads"], "chain": spec["chain"], "reps": spec["reps"],
           "payload_bytes_per_rank": payload_bytes(spec["tokens"], spec["heads"]),
           "sent_bytes_per_rank": sent,
           "exchange_variant": first.get("exchange_variant"), "timing": first.get("timing", "–"),
           "nvlink_gb_per_s_each_way": NVLINK_GB_S, "seconds": time.perf_counter() - t_start,
           "best": best, "torch_peer_copy": torch_ref, "variants": records}
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"a2a_sweep_{date}{'_dryrun' if dry else ''}"
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / f"{stem}.md").write_text(markdown(doc))
    if best:
        print(f"best: {best['name']} {best['a2a_ms']:.4f} ms = {best['a2a_gb_per_s']:.0f} GB/s "
              f"({best['link_fraction']:.0%} of link)", flush=True)
    print(f"wrote {out}/{stem}.json and .md ({doc['seconds']:.0f} s)", flush=True)
    return 0


# ------------------------------------------------------------------------------------------ worker
def worker(spec: dict) -> int:
    """Runs in the fresh subprocess: measures one setting, prints one ``RESULT_TAG`` JSON line."""
    t_phase = time.perf_counter()
    phase_s = {}

    def phase(name):
        nonlocal t_phase
        now = time.perf_counter()
        phase_s[name] = round(now - t_phase, 2)
        t_phase = now

    sys.path.insert(0, str(REPO))
    import hashlib

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    from benchmarks import common
    from benchmarks import exchange as xb
    from helix_jax.mesh import make_cp_mesh
    from helix_jax.ops import exchange as ex

    gpu = jax.default_backend() == "gpu"
    cp, t, h, chain = spec["cp"], spec["tokens"], spec["heads"], spec["chain"]
    mesh = make_cp_mesh(cp)
    dtype = jnp.bfloat16
    payload = payload_bytes(t, h)
    sent = payload * (cp - 1) // cp

    def timed(f, *args, per):
        """Per-device ms per ``per``: CUPTI medians by kernel class (GPU) and wall clock."""
        out = {"wall_ms": xb.wall_time(f, *args, n=spec["wall_n"], per=per)}
        if gpu:
            out["kernel_ms"], out["parts_ms"] = xb.kernel_time(f, *args, devices=cp, reps=spec["reps"], per=per,
                                                              per_class=True)
        return out

    def a2a_ms_of(tm):
        """(ms, source): the a2a kernels' CUPTI time; else wall minus the other kernels; CPU: wall."""
        if not gpu:
            return tm["wall_ms"], "cpu-wall-whole-program"
        a2a = tm["parts_ms"].get("a2a")
        if a2a:
            return a2a, "cupti"
        rest = sum(v for k, v in tm["parts_ms"].items() if k != "a2a")
        return max(tm["wall_ms"] - rest, 1e-9), "wall-minus-kernels"

    def bw(nbytes, ms):
        return {"gb_per_s": nbytes / (ms * 1e-3) / 1e9, "link_fraction": nbytes / (ms * 1e-3) / 1e9 / NVLINK_GB_S}

    jax.devices()
    phase("import_and_init")
    rec = {"device": common.device_line(), "backend": jax.default_backend(),
           "timing": "CUPTI kernel ms per device, median of reps" if gpu else "wall ms (CPU dry run)",
           "xla_flags_seen": os.environ.get("XLA_FLAGS", ""), "payload_bytes_per_rank": payload,
           "sent_bytes_per_rank": sent}

    # --- the exchange itself (benchmarks/exchange.py's program and inputs)
    variant = "ffi" if ex.api._backend_module("ffi").availability(jax.default_backend())[0] else "packed"
    rec["exchange_variant"] = variant
    b, g = xb.GROUP_FOR_T[t]
    o = xb._sharded(mesh, (cp, b, g, h, D), dtype, 11, P("cp"))
    lse = xb._sharded(mesh, (cp, b, g, h), jnp.float32, 12, P("cp"))
    mask = jax.device_put(np.zeros((cp, b, g), bool), NamedSharding(mesh, P("cp"))).at[:, 0, 0].set(True)
    f = xb.exchange_fn(mesh, variant, chain)
    res = f(o, lse, mask)
    last_o, last_l = (np.asarray(x) for x in res[-1])
    rec["out_sha1"] = hashlib.sha1(last_o.view(np.uint16).tobytes() + last_l.tobytes()).hexdigest()
    rec["finite"] = bool(np.isfinite(last_o.astype(np.float32)).all())
    del res
    tm = timed(f, o, lse, mask, per=chain)
    ms, src = a2a_ms_of(tm)
    rec.update({"a2a_ms": ms, "a2a_source": src, **{("a2a_" + k): v for k, v in bw(sent, ms).items()},
                "exchange_kernel_ms": tm.get("kernel_ms"), "exchange_wall_ms": tm["wall_ms"],
                "parts_ms": tm.get("parts_ms", {})})
    rec["link_fraction"] = rec.pop("a2a_link_fraction")
    refs = {}
    phase("exchange")

    def guarded(name, fn):
        """A failing reference is recorded; it must not lose the variant's exchange numbers."""
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            refs[name + "_error"] = {"error": f"{type(e).__name__}: {e}"[:500]}
            print(f"reference {name} failed: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr, flush=True)

    def chained(collective, shape):
        """``chain`` collectives in one program, each input a one-element update of the last one
        (XLA cannot merge or skip them; the update is an in-place 1-element kernel)."""
        def body(x):
            outs = []
            for _ in range(chain):
                y = collective(x)
                outs.append(y)
                x = x.at[(0,) * x.ndim].add(xb._dep(y, x))
            return outs
        spec_ = P("cp")
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec_, out_specs=[spec_] * chain, check_vma=False)), \
            xb._sharded(mesh, shape, dtype, 21, spec_)

    def _plain_and_ppermute():
        n = payload // (cp * 2)                                      # per-rank [cp, n] bf16 = payload bytes
        fa, xa = chained(lambda x: jax.lax.all_to_all(x, "cp", 0, 0, tiled=True), (cp * cp, n))
        ya = fa(xa)[0]
        got, want = np.asarray(ya[:, :64]), np.asarray(xa[:, :64])   # rank r row j = rank j's row r
        ok = all(np.array_equal(got[r * cp + j], want[j * cp + r]) for r in range(cp) for j in range(cp))
        tm = timed(fa, xa, per=chain)
        ms, src = a2a_ms_of(tm)
        refs["a2a_plain"] = {"ms": ms, "source": src, "bytes": n * 2 * (cp - 1), "correct": ok,
                             **bw(n * 2 * (cp - 1), ms)}
        m = sent // 2                                               # per-rank [m] bf16 = bytes sent
        perm = [(i, (i + 1) % cp) for i in range(cp)]
        fp, xp = chained(lambda x: jax.lax.ppermute(x, "cp", perm), (cp * m,))
        yp = fp(xp)[0]
        got, want = np.asarray(yp.reshape(cp, m)[:, :64]), np.asarray(xp.reshape(cp, m)[:, :64])
        ok = all(np.array_equal(got[(i + 1) % cp], want[i]) for i in range(cp))
        tm = timed(fp, xp, per=chain)
        ms, src = a2a_ms_of(tm)
        refs["ppermute"] = {"ms": ms, "source": src, "bytes": m * 2, "correct": ok, **bw(m * 2, ms)}
        del ya, yp

    if spec.get("refs"):
        guarded("plain_and_ppermute", _plain_and_ppermute)

    phase("a2a_plain_and_ppermute")

    def _exchange_ppermute():
        # The same exchange with the all-to-all written as cp-1 ppermutes of the peers' chunks (the own
        # chunk never moves): shows what the self-copy inside NCCL's all-to-all kernel costs.
        impl = "ffi" if variant == "ffi" else "reference"
        hc = h // cp

        def one(o_, l_, m_):
            pl = ex.sanitize_pack(o_.reshape(b * g, h, D), l_.reshape(b * g, h), m_.reshape(b * g),
                                  cp_size=cp, implementation=impl)
            r = jax.lax.axis_index("cp")
            got = [jax.lax.dynamic_index_in_dim(pl, r, 0, keepdims=False)]    # got[k]: from rank r-k
            for k in range(1, cp):
                chunk = jax.lax.dynamic_index_in_dim(pl, (r + k) % cp, 0, keepdims=False)
                got.append(jax.lax.ppermute(chunk, "cp", [(i, (i + k) % cp) for i in range(cp)]))
            recv = jnp.take(jnp.stack(got), (r - jnp.arange(cp)) % cp, axis=0)   # [cp(src), T, Hc, W]
            out, lo = ex.combine_payload(recv, dtype=o_.dtype, implementation=impl)
            return out.reshape(b, g, hc, D), lo.reshape(b, g, hc)

        def body(o_, l_, m_):
            o_, l_, m_ = o_[0], l_[0], m_[0]
            outs = []
            for _ in range(chain):
                out, lo = one(o_, l_, m_)
                outs.append((out, lo))
                l_ = l_ + xb._dep(lo, l_)
            return outs

        ospec = (P(None, None, "cp"), P(None, None, "cp"))
        fe = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("cp"),) * 3, out_specs=[ospec] * chain,
                                   check_vma=False))
        lo_, ll_ = (np.asarray(x) for x in fe(o, lse, mask)[-1])
        same = hashlib.sha1(lo_.view(np.uint16).tobytes() + ll_.tobytes()).hexdigest() == rec["out_sha1"]
        tm = timed(fe, o, lse, mask, per=chain)
        ms, src = a2a_ms_of(tm)
        refs["exchange_ppermute"] = {"ms": ms, "source": src, "bytes": sent, "correct": same,
                                     "kernel_ms": tm.get("kernel_ms"), "parts_ms": tm.get("parts_ms", {}),
                                     **bw(sent, ms)}

    if spec.get("refs"):
        guarded("exchange_ppermute", _exchange_ppermute)

    phase("exchange_ppermute")

    def _copies():
        d0, d1 = mesh.devices.flat[0], mesh.devices.flat[1]
        k = max(spec["wall_n"], 2)
        x0 = jax.device_put(jnp.ones((sent // 2,), dtype), d0)
        x1 = jax.device_put(jnp.ones((sent // 2,), dtype), d1)
        for two_way in (False, True):
            jax.block_until_ready([jax.device_put(x0, d1), jax.device_put(x1, d0)])     # warm-up
            t0 = time.perf_counter()
            ys = [jax.device_put(x0, d1) for _ in range(k)]
            if two_way:
                ys += [jax.device_put(x1, d0) for _ in range(k)]
            jax.block_until_ready(ys)
            ms = (time.perf_counter() - t0) / k * 1e3
            same = bool(np.array_equal(np.asarray(ys[0][:64]), np.asarray(x0[:64])))
            refs["device_put_2way" if two_way else "device_put_1way"] = {
                "ms": ms, "source": "wall", "bytes": sent, "correct": same, **bw(sent, ms)}
            del ys

    if spec.get("device_put"):
        guarded("copies", _copies)

    rec["refs"] = refs
    phase("copies")
    rec["phase_s"] = phase_s
    print(RESULT_TAG + json.dumps(rec), flush=True)
    return 0


def torch_peer_copy(nbytes: int, *, k: int) -> dict:
    """cudaMemcpyPeer-style ceiling: torch ``copy_`` GPU0 -> GPU1 (copy engines), one way and both
    ways at once on separate streams, wall clock over k copies between device synchronisations."""
    import torch

    if torch.cuda.device_count() < 2:
        raise RuntimeError("torch sees fewer than 2 GPUs")
    a0 = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda:0")
    a1 = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda:1")
    b1, b0 = torch.empty_like(a0, device="cuda:1"), torch.empty_like(a1, device="cuda:0")
    s0, s1 = torch.cuda.Stream(device=0), torch.cuda.Stream(device=1)
    out = {}
    for two_way in (False, True):
        for it in range(2):                                  # warm-up, then timed
            n = 2 if it == 0 else k
            for d in (0, 1):
                torch.cuda.synchronize(d)
            t0 = time.perf_counter()
            for _ in range(n):
                with torch.cuda.stream(s0):
                    b1.copy_(a0, non_blocking=True)
                if two_way:
                    with torch.cuda.stream(s1):
                        b0.copy_(a1, non_blocking=True)
            for d in (0, 1):
                torch.cuda.synchronize(d)
            ms = (time.perf_counter() - t0) / n * 1e3
        ok = bool(torch.equal(b1[:4096].cpu(), a0[:4096].cpu())) and (not two_way or
                                                                    bool(torch.equal(b0[:4096].cpu(), a1[:4096].cpu())))
        gbs = nbytes / (ms * 1e-3) / 1e9
        out["torch_peer_copy_2way" if two_way else "torch_peer_copy_1way"] = {
            "ms": ms, "source": "wall", "bytes": nbytes, "correct": ok, "gb_per_s": gbs,
            "link_fraction": gbs / NVLINK_GB_S}
    del a0, a1, b0, b1
    torch.cuda.empty_cache()
    return out


if __name__ == "__main__":
    sys.exit(main())
