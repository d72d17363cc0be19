"""Per-rank memory plan under Helix: weights, target KV, CP-free draft KV, recurrent state, max requests."""
from __future__ import annotations

import json


def add_arguments(p):
    from helix_jax.memory import PRESETS

    p.add_argument("--model", default="deepseek-v3", choices=sorted(PRESETS), help="model preset")
    p.add_argument("--gpu-mem", type=float, default=141.0, help="device memory per rank, GiB")
    p.add_argument("--cp", type=int, default=1, help="Helix CP (KVP) ranks")
    p.add_argument("--tp", type=int, default=1, help="attention TP ranks")
    p.add_argument("--world", type=int, default=None, help="ranks in total (default tp*cp)")
    p.add_argument("--attention-dp", action="store_true", help="attention data parallel")
    p.add_argument("--context", type=int, default=131072, help="global tokens per request")
    p.add_argument("--draft-len", type=int, default=3, help="draft tokens per verify group (k)")
    p.add_argument("--draft", default="default",
                   help="draft preset, 'none', or 'default' (the model's own)")
    p.add_argument("--page-size", type=int, default=64, help="tokens per page P")
    p.add_argument("--kv-dtype", default=None, help="KV cache dtype (default: the preset's)")
    p.add_argument("--reserve-frac", type=float, default=0.1,
                   help="share of device memory kept for activations/workspaces")
    p.add_argument("--weight-gib", type=float, default=None,
                   help="weights per rank, GiB (default: preset totals / world)")
    p.add_argument("--json", action="store_true", help="print one JSON object last")


def _gib(b):
    if b >= 1 << 30 or b == 0:
        return f"{b / (1 << 30):8.2f} GiB"
    return f"{b / (1 << 20):8.2f} MiB"


def run(args) -> int:
    from helix_jax import memory as hm

    try:
        mapping = hm.Mapping(tp=args.tp, cp=args.cp, world=args.world, attention_dp=args.attention_dp)
        draft = None if args.draft == "none" else args.draft
        plan = hm.plan_memory(
            args.model, gpu_bytes=int(args.gpu_mem * hm.plan.GIB), mapping=mapping, context=args.context,
            draft_len=args.draft_len, page_size=args.page_size, draft=draft, kv_dtype=args.kv_dtype,
            reserve_frac=args.reserve_frac,
            weight_bytes=None if args.weight_gib is None else int(args.weight_gib * hm.plan.GIB))
    except ValueError as e:
        print(f"plan-memory: {e}")
        return 2
    s, m = plan.split, plan.mapping
    print(f"plan-memory: {plan.model} (draft {plan.draft or 'none'}), mapping tp={m.tp} cp={m.cp} "
          f"world={m.world}{' attention-DP' if m.attention_dp else ''}; draft mapping tp={plan.draft_mapping.tp} cp=1")
    print(f"  context {plan.context} + verify group {plan.group_len} tokens; page size {plan.page_size}; "
          f"KV dtype {plan.kv_dtype}")
    print("  per rank:")
    print(f"    device memory      {_gib(plan.gpu_bytes)}")
    print(f"    weights            {_gib(plan.weight_bytes)}")
    print(f"    reserve            {_gib(plan.reserve_bytes)}")
    print(f"    KV/state budget    {_gib(plan.kv_budget_bytes)}")
    print(f"      target KV        {_gib(s.target_bytes)}  {s.target_pages} pages (Helix, 1 null)")
    print(f"      draft KV         {_gib(s.draft_bytes)}  {s.draft_pages} pages (CP-free, 1 null)")
    print(f"      recurrent state  {_gib(s.state_bytes)}  tp_eff={plan.tp_eff_state}")
    print(f"      unused           {s.unused_bytes} B")
    print(f"  cost model (per rank-local target token): target slope {plan.target_cost.slope} B + "
          f"{plan.target_cost.intercept} B/request; draft slope "
          f"{0 if plan.draft_cost is None else plan.draft_cost.slope} B + "
          f"{0 if plan.draft_cost is None else plan.draft_cost.intercept} B/request")
    print(f"  bytes per global token on one rank: target {plan.target_bytes_per_global_token:.1f}, "
          f"draft {plan.draft_bytes_per_global_token:.1f}")
    print(f"  one request: {s.superblocks_per_request} super-blocks = {s.superblocks_per_request} pages "
          f"per rank, {_gib(s.request_bytes).strip()} per rank")
    print(f"  max concurrent requests: {s.max_requests}")
    if args.json:
        print(json.dumps(plan.as_dict()))
    return 0
