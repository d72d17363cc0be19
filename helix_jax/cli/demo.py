"""Speculative decoding with Helix CP on the tiny MLA model (the main job).

Prefill a batch of prompts, run ``--steps`` spec-verify steps (DSpark linear-chain drafts, Helix
verify groups that straddle pages and ranks), then print a summary and whether the tokens are
identical to plain greedy decoding (cp = 1, no drafts, full causal recompute).

With ``--requests N`` the demo serves N requests with continuous batching instead
(:func:`helix_jax.memory.serve_requests`): staggered arrivals, random prompt lengths, ``--max-batch``
rows whose KV pages come from one Helix page pool; requests join and leave between steps, and each
one's tokens are compared with greedy decoding of its prompt alone.
"""
from __future__ import annotations

import json
import sys

import numpy as np

# Prompt lengths of the default batch: with page 4 and cp 4 their first verify groups straddle a
# page *and* a rank boundary (30 -> positions 30..33, 13 -> 13..16).
DEFAULT_PROMPT_LENS = (30, 13)
DEFAULT_STEPS = 24


def add_arguments(p):
    p.add_argument("--cp", type=int, default=None,
                   help="CP ranks (default: the visible GPUs, else a virtual 4-device CPU mesh)")
    p.add_argument("--draft-len", type=int, default=3, help="drafts per step k (1..7); G = 1 + k")
    p.add_argument("--steps", type=int, default=None, help=f"spec-verify steps (default {DEFAULT_STEPS})")
    p.add_argument("--page-size", type=int, default=4, help="tokens per KV page")
    p.add_argument("--overlap", action="store_true",
                   help="overlap-scheduler mode: stale-base positions corrected on device")
    p.add_argument("--sampling", choices=["greedy", "rejection"], default="greedy")
    p.add_argument("--temperature", type=float, default=1.0, help="temperature for --sampling rejection")
    p.add_argument("--implementation", default=None,
                   help="MLA decode backend: ffi, pallas, reference (default: auto)")
    p.add_argument("--kv-dtype", choices=["bf16", "fp8_e4m3", "nvfp4"], default="bf16",
                   help="target KV format (bf16 = unquantized model dtype; quantized formats are lossy)")
    p.add_argument("--prompt-lens", type=int, nargs="+", default=None,
                   help=f"prompt length of each sequence in the batch (default {' '.join(map(str, DEFAULT_PROMPT_LENS))})")
    p.add_argument("--seed", type=int, default=0, help="seed for the prompts and sampling")
    p.add_argument("--check", action="store_true",
                   help="exit 1 unless the tokens equal plain greedy decoding (cp=1, no drafts)")
    p.add_argument("--json", action="store_true", help="print one JSON summary object last")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--save", metavar="DIR", default=None,
                   help="after the run, checkpoint the decoding state, params and tokens to DIR (Orbax)")
    p.add_argument("--resume", metavar="DIR", default=None,
                   help="continue a run saved with --save (any --cp / --page-size) for --steps more steps")
    g = p.add_argument_group("continuous batching (--requests N)")
    g.add_argument("--requests", type=int, default=None, metavar="N",
                   help="serve N requests with continuous batching (staggered arrivals, varying prompt lengths)")
    g.add_argument("--max-batch", type=int, default=None, metavar="B", help="batch rows (default min(N, 4))")
    g.add_argument("--num-pages", type=int, default=None,
                   help="KV pages per CP rank in the pool, null page included (default: every row at full length); "
                        "a small pool makes requests wait for pages")
    g.add_argument("--new-tokens", type=int, default=16, help="tokens generated per request (t0 included)")
    g.add_argument("--prompt-range", type=int, nargs=2, default=[8, 40], metavar=("LO", "HI"),
                   help="request prompt lengths are drawn uniformly from [LO, HI]")
    g.add_argument("--max-gap", type=int, default=2, help="steps between consecutive arrivals: uniform in [0, GAP]")


def _default_cp(jax, heads):
    if jax.default_backend() == "cpu":
        return 4
    n = len(jax.devices())
    return max(c for c in range(1, n + 1) if heads % c == 0)


def _table(rows):
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{w}}  {v}" for k, v in rows)


def run(args) -> int:
    if args.check and args.sampling != "greedy":
        print("error: --check compares with greedy decoding; use it with --sampling greedy", file=sys.stderr)
        return 2
    if args.requests is not None:
        from .demo_requests import run_requests
        return run_requests(args)
    if args.steps is None:
        args.steps = DEFAULT_STEPS
    if args.prompt_lens is None:
        args.prompt_lens = list(DEFAULT_PROMPT_LENS)
    import jax
    from tqdm import tqdm

    import helix_jax as hj
    from helix_jax.models import MLAModelConfig, derive_drafter, init_model
    from helix_jax.spec import (SpecConfig, greedy_reference, make_params, required_max_len, run_spec_decode,
                                validate_spec_config)

    tcfg = MLAModelConfig()
    cp = args.cp if args.cp is not None else _default_cp(jax, tcfg.num_heads)
    lens = np.asarray(args.prompt_lens)
    try:
        if np.any(lens < 1):
            raise ValueError(f"--prompt-lens must be >= 1, got {lens.tolist()}")
        mesh = hj.make_cp_mesh(cp)
        config = SpecConfig(target=tcfg, draft=tcfg.replace(num_layers=1), draft_len=args.draft_len,
                            sampling=args.sampling, temperature=args.temperature, overlap=args.overlap,
                            page_size=args.page_size, implementation=args.implementation,
                            kv_dtype=args.kv_dtype,
                            max_len=required_max_len(int(lens.max()), steps=max(args.steps, 0),
                                                     draft_len=args.draft_len))
        if args.steps < 1:
            raise ValueError(f"--steps must be >= 1, got {args.steps}")
        validate_spec_config(config, cp_size=cp)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    target = init_model(tcfg, seed=0)
    drafter = derive_drafter(target, num_layers=config.draft.num_layers)
    params = make_params(target, drafter)
    rng = np.random.default_rng(args.seed)
    prompts = np.zeros((len(lens), int(lens.max())), np.int32)
    for b, n in enumerate(lens):
        prompts[b, :n] = rng.integers(0, tcfg.vocab_size, size=n)

    bars = []
    if not args.no_progress:
        print(f"prefill + compile (cp={cp}, draft_len={args.draft_len}) ...", file=sys.stderr, flush=True)

    def ready():
        bars.append(tqdm(total=args.steps, desc=f"spec-verify cp={cp} k={args.draft_len}", unit="step",
                         file=sys.stderr, disable=args.no_progress))

    if args.resume:
        from helix_jax.checkpoint import CheckpointError, resume_spec_decode
        try:
            resumed = resume_spec_decode(args.resume, mesh=mesh, config=config, steps=args.steps,
                                         progress=lambda n: bars[0].update(1), on_ready=ready)
        except (CheckpointError, ValueError) as e:
            print(f"error: --resume {args.resume}: {e}", file=sys.stderr)
            return 2
        res, config, prompts, lens = resumed.run, resumed.config, resumed.prompts, resumed.prompt_lens
    else:
        res = run_spec_decode(params, prompts, lens, mesh=mesh, config=config, steps=args.steps, seed=args.seed,
                              progress=lambda n: bars[0].update(1), on_ready=ready)
    bars[0].close()
    if args.save:
        import pathlib

        from helix_jax.checkpoint import save_spec_run
        # Replace DIR only when it already holds a checkpoint (never an unrelated folder).
        again = (pathlib.Path(args.save) / "manifest.json").is_file()
        save_spec_run(args.save, res, prompts=prompts, prompt_lens=lens, config=config, params=params, overwrite=again)
        print(f"saved the decoding state after {len(res.accepted)} steps to {args.save}", file=sys.stderr)

    emitted = int((res.accepted + 1).sum())
    mean_len = float((res.accepted + 1).mean())
    new_emitted = int((res.accepted[len(res.accepted) - args.steps:] + 1).sum())   # this invocation's steps
    tps = new_emitted / res.seconds if res.seconds > 0 else float("inf")
    ref = greedy_reference(target, prompts, lens, max(len(t) for t in res.tokens))
    identical = all(t == ref[b, : len(t)].tolist() for b, t in enumerate(res.tokens))
    g = config.group_len
    straddle = int(sum(len({(p + j) // args.page_size for j in range(g)}) > 1
                       for p in res.positions.reshape(-1)))
    cross_rank = int(sum(len({((p + j) // args.page_size) % cp for j in range(g)}) > 1
                         for p in res.positions.reshape(-1)))
    print(f"Helix speculative decoding on the tiny MLA model ({tcfg.num_layers} layers, {tcfg.num_heads} heads, "
          f"latent {tcfg.kv_lora_rank} + rope {tcfg.qk_rope_head_dim}, vocab {tcfg.vocab_size}; "
          f"drafter = its first {config.draft.num_layers} layer(s)), {jax.default_backend()} backend")
    print(_table([
        ("cp size", cp),
        ("draft_len", args.draft_len),
        ("page size", args.page_size),
        ("batch (prompt lengths)", f"{len(lens)} ({', '.join(map(str, lens.tolist()))})"),
        ("sampling", args.sampling + (f" (T={args.temperature})" if args.sampling == "rejection" else "")),
        ("overlap scheduler", "on" if args.overlap else "off"),
        ("steps", args.steps),
        ("verify groups across pages / ranks", f"{straddle} / {cross_rank} of {res.positions.size}"),
        ("tokens emitted", emitted),
        ("mean accepted length", f"{mean_len:.2f} (of max {g})"),
        ("tokens/s", f"{tps:.1f}"),
        ("identical to greedy", "yes" if identical else "no"),
    ]))
    if args.json:
        print(json.dumps({
            "cp": cp, "draft_len": args.draft_len, "steps": args.steps, "page_size": args.page_size,
            "overlap": bool(args.overlap), "sampling": args.sampling, "kv_dtype": args.kv_dtype,
            "prompt_lens": lens.tolist(), "tokens_emitted": emitted, "mean_accepted_length": mean_len,
            "tokens_per_s": tps, "identical_to_greedy": identical, "groups_across_pages": straddle,
            "groups_across_ranks": cross_rank, "accepted": res.accepted.T.tolist(), "tokens": res.tokens,
        }))
    if args.check and not identical:
        print("check failed: spec-decoded tokens differ from plain greedy decoding", file=sys.stderr)
        return 1
    return 0
