"""``python -m helix_jax demo --requests N``: continuous batching with Helix speculative decoding.

N requests arrive staggered (gaps of ``0..--max-gap`` steps) with prompt lengths drawn from
``--prompt-range``; :func:`helix_jax.memory.serve_requests` admits them into ``--max-batch`` rows whose
KV pages come from one Helix page pool (``--num-pages`` per rank), runs spec-verify steps, and
releases each request's row and pages once it has ``--new-tokens`` tokens. Every request's tokens
are then compared with plain greedy decoding of its prompt alone (cp = 1, no drafts).
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np


def _table(rows):
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{w}}  {v}" for k, v in rows)


def _check_args(args):
    """Flag errors of the ``--requests`` mode -> ``ValueError`` naming the flag."""
    if args.requests < 1:
        raise ValueError(f"--requests must be >= 1, got {args.requests}")
    if args.max_batch is not None and args.max_batch < 1:
        raise ValueError(f"--max-batch must be >= 1, got {args.max_batch}")
    if args.new_tokens < 1:
        raise ValueError(f"--new-tokens must be >= 1, got {args.new_tokens}")
    lo, hi = args.prompt_range
    if not 1 <= lo <= hi:
        raise ValueError(f"--prompt-range must be LO HI with 1 <= LO <= HI, got {lo} {hi}")
    if args.max_gap < 0:
        raise ValueError(f"--max-gap must be >= 0, got {args.max_gap}")
    for flag, value in (("--steps", args.steps), ("--prompt-lens", args.prompt_lens), ("--save", args.save),
                        ("--resume", args.resume)):
        if value is not None:
            hint = {"--steps": "; use --new-tokens", "--prompt-lens": "; use --prompt-range"}.get(flag, "")
            raise ValueError(f"{flag} does not apply with --requests{hint}")


class _Meter:
    """Per-step bookkeeping from ``serve_requests``'s progress callback.

    ``accepted[r]``: tokens request ``r`` committed per verify step (accepted + 1). Timing starts after
    the first step, so the rate excludes compiling the prefill and the step (later admissions'
    prefills, already compiled, are part of serving and stay in).
    """

    def __init__(self, want: dict, bar):
        self.want, self.bar = want, bar
        self.accepted = {r: [] for r in want}
        self.seen = {}                      # tokens per request at the previous callback (t0 = 1)
        self.steps = 0
        self.t_first = None
        self.tokens_after_first = 0

    def __call__(self, plan, tokens):
        delivered = 0
        for r in plan.slots:
            if r is None:
                continue
            before, now = self.seen.get(r, 1), len(tokens[r])
            self.accepted[r].append(now - before)
            delivered += min(now, self.want[r]) - min(before, self.want[r])
            self.seen[r] = now
        # t0 of requests admitted this step came from prefill: count it as delivered now.
        delivered += len(plan.admitted)
        self.steps += 1
        if self.t_first is None:
            self.t_first = time.perf_counter()
        else:
            self.tokens_after_first += delivered
        self.bar.update(delivered)
        self.bar.set_postfix(active=int(plan.active.sum()), step=plan.step, refresh=False)

    def tokens_per_s(self, total_tokens: int, total_seconds: float) -> float:
        if self.steps > 1:
            dt = time.perf_counter() - self.t_first
            return self.tokens_after_first / dt if dt > 0 else float("inf")
        return total_tokens / total_seconds if total_seconds > 0 else float("inf")


def run_requests(args) -> int:
    """The ``--requests`` mode of the demo (flags as in :mod:`helix_jax.cli.demo`). Returns the exit code."""
    import jax
    from tqdm import tqdm

    import helix_jax as hj
    from helix_jax import ledger
    from helix_jax import memory as hm
    from helix_jax.cli.demo import _default_cp
    from helix_jax.models import MLAModelConfig, derive_drafter, init_model
    from helix_jax.spec import SpecConfig, greedy_reference, make_params, validate_spec_config

    tcfg = MLAModelConfig()
    cp = args.cp if args.cp is not None else _default_cp(jax, tcfg.num_heads)
    try:
        _check_args(args)
        n_req, n_new = args.requests, args.new_tokens
        rows = args.max_batch if args.max_batch is not None else min(n_req, 4)
        lo, hi = args.prompt_range
        mesh = hj.make_cp_mesh(cp)
        # Each row holds its prompt, the new tokens and two verify groups (the last group may overrun).
        config = SpecConfig(target=tcfg, draft=tcfg.replace(num_layers=1), draft_len=args.draft_len,
                            sampling=args.sampling, temperature=args.temperature, overlap=args.overlap,
                            page_size=args.page_size, implementation=args.implementation, kv_dtype=args.kv_dtype,
                            max_len=hi + n_new + 2 * (args.draft_len + 1))
        validate_spec_config(config, cp_size=cp)
        reqs = hm.staggered_requests(n_req, seed=args.seed, prompt_len=(lo, hi), max_new_tokens=n_new,
                                     max_gap=args.max_gap)
        npp = ledger.pages_per_rank(config.max_len, page_size=args.page_size, cp_size=cp)
        num_pages = 1 + rows * npp if args.num_pages is None else args.num_pages
        probe = hm.HelixPagePool(num_pages=num_pages, page_size=args.page_size, cp_size=cp)
        worst = max(probe.superblocks_for(r.prompt_len + n_new + args.draft_len) for r in reqs)
        if worst > probe.usable_pages:
            raise ValueError(f"--num-pages {num_pages} holds {probe.usable_pages} usable pages per rank but the "
                             f"largest request needs {worst} (+1 null page): use --num-pages >= {worst + 1}")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    target = init_model(tcfg, seed=0)
    params = make_params(target, derive_drafter(target, num_layers=config.draft.num_layers))
    rng = np.random.default_rng(args.seed)
    prompts = {r.req_id: rng.integers(0, tcfg.vocab_size, r.prompt_len).tolist() for r in reqs}
    want = {r.req_id: r.max_new_tokens for r in reqs}

    if not args.no_progress:
        print(f"continuous batching: {n_req} requests, {rows} rows, cp={cp}, draft_len={args.draft_len} "
              f"(first step compiles) ...", file=sys.stderr, flush=True)
    bar = tqdm(total=sum(want.values()), desc=f"serve cp={cp} k={args.draft_len}", unit="tok",
               file=sys.stderr, disable=args.no_progress)
    meter = _Meter(want, bar)
    res = hm.serve_requests(params, reqs, prompts, mesh=mesh, config=config, max_batch=rows,
                            num_pages=num_pages, seed=args.seed, shuffle_pages=args.seed, progress=meter)
    bar.close()

    ids = [r.req_id for r in reqs]
    tokens = [res.tokens[r] for r in ids]
    padded = np.zeros((n_req, hi), np.int32)
    for i, r in enumerate(reqs):
        padded[i, : r.prompt_len] = prompts[r.req_id]
    ref = greedy_reference(target, padded, np.array([r.prompt_len for r in reqs]), n_new)
    same = [tokens[i] == ref[i, : want[r]].tolist() for i, r in enumerate(ids)]
    identical = all(same)
    rep = res.report
    emitted = sum(len(t) - 1 for t in tokens)   # t0 comes from prefill, as in the single-batch demo
    per_step = [n for r in ids for n in meter.accepted[r]]
    mean_len = float(np.mean(per_step)) if per_step else 0.0
    tps = meter.tokens_per_s(sum(len(t) for t in tokens), res.seconds)
    g = config.group_len
    waited = sum(rep.admit_step[r.req_id] > r.arrival_step for r in reqs)

    print(f"Helix continuous batching with speculative decoding on the tiny MLA model ({tcfg.num_layers} layers, "
          f"{tcfg.num_heads} heads, vocab {tcfg.vocab_size}; drafter = its first {config.draft.num_layers} "
          f"layer(s)), {jax.default_backend()} backend")
    print(_table([
        ("cp size", cp),
        ("draft_len", args.draft_len),
        ("page size", args.page_size),
        ("requests", f"{n_req} (prompts {min(r.prompt_len for r in reqs)}..{max(r.prompt_len for r in reqs)} "
                     f"tokens, {n_new} new each, arrivals at steps 0..{reqs[-1].arrival_step})"),
        ("rows (max batch)", rows),
        ("pages per rank (pool)", f"{num_pages} (1 null; a full row needs {npp})"),
        ("sampling", args.sampling + (f" (T={args.temperature})" if args.sampling == "rejection" else "")),
        ("overlap scheduler", "on" if args.overlap else "off"),
        ("steps", f"{rep.steps}" + (f" (+{rep.idle_steps} idle)" if rep.idle_steps else "")),
        ("tokens emitted", emitted),
        ("mean accepted length", f"{mean_len:.2f} (of max {g})"),
        ("tokens/s", f"{tps:.1f}"),
        ("peak active", f"{rep.peak_active} of {rows} rows"),
        ("peak super-blocks", f"{rep.peak_superblocks} of {num_pages - 1}"),
        ("requests that waited", f"{waited} of {n_req} (for a row or pages)"),
        ("identical to greedy per request", f"{'yes' if identical else 'no'} ({sum(same)} of {n_req})"),
    ]))
    print("  request  arrival  prompt  admitted  finished  steps  identical")
    for i, r in enumerate(reqs):
        print(f"  {str(r.req_id):>7}  {r.arrival_step:>7}  {r.prompt_len:>6}  {rep.admit_step[r.req_id]:>8}  "
              f"{rep.finish_step[r.req_id]:>8}  {len(meter.accepted[r.req_id]):>5}  {'yes' if same[i] else 'no':>9}")
    if args.json:
        print(json.dumps({
            "cp": cp, "draft_len": args.draft_len, "steps": rep.steps, "idle_steps": rep.idle_steps,
            "page_size": args.page_size, "overlap": bool(args.overlap), "sampling": args.sampling,
            "kv_dtype": args.kv_dtype, "requests": n_req, "max_batch": rows, "num_pages": num_pages,
            "new_tokens": n_new, "prompt_lens": [r.prompt_len for r in reqs], "prompts": [prompts[r] for r in ids],
            "arrival_step": [r.arrival_step for r in reqs], "admit_step": [rep.admit_step[r] for r in ids],
            "finish_step": [rep.finish_step[r] for r in ids], "peak_active": rep.peak_active,
            "peak_superblocks": rep.peak_superblocks, "tokens_emitted": emitted,
            "mean_accepted_length": mean_len, "tokens_per_s": tps, "identical_to_greedy": identical,
            "identical_per_request": same, "accepted": [[n - 1 for n in meter.accepted[r]] for r in ids],
            "tokens": tokens,
        }))
    if args.check and not identical:
        bad = [str(r) for r, ok in zip(ids, same) if not ok]
        print(f"check failed: tokens of request(s) {', '.join(bad)} differ from plain greedy decoding",
              file=sys.stderr)
        return 1
    return 0
