"""Call the MLA decode on one benchmark shape a few times, with no timer: a target for Nsight Compute.

  ncu --kernel-name regex:mla_seesaw --launch-skip 1 --launch-count 1 --set full \\
      python3 benchmarks/mla_decode_profile.py --kv-dtype bf16 --B 64 --L 65536 --H 128 --G 1

mla_decode.py times with CUPTI, which would compete with the profiler for the same callbacks; this script builds the
same inputs (mla_decode.make_inputs / make_pages) and only runs the benchmark's call (mla_decode.decode_call)
``--calls`` times.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from benchmarks.mla_decode import IMPL, decode_call, make_inputs, make_pages  # noqa: E402
from helix_jax import quant  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kv-dtype", default="bf16", help="bf16, fp8_e4m3 or nvfp4")
    ap.add_argument("--backend", default="ffi", choices=sorted(IMPL))
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--L", type=int, default=65536)
    ap.add_argument("--H", type=int, default=128)
    ap.add_argument("--G", type=int, default=1)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--calls", type=int, default=4)
    args = ap.parse_args(argv)
    kv_dtype = quant.check_kv_dtype(args.kv_dtype)
    if min(args.B, args.L, args.H, args.G, args.page_size, args.calls) < 1:
        ap.error("--B, --L, --H, --G, --page-size and --calls must be >= 1")
    q_lat, q_rope, c_lat, k_rope, table, bounds = make_inputs(
        jax.random.key(0), args.B, args.L, args.G, args.H, args.page_size, jnp.bfloat16)
    pages = make_pages(kv_dtype, c_lat, k_rope)
    del c_lat, k_rope
    f = decode_call(args.backend)
    for _ in range(args.calls):
        jax.block_until_ready(f(q_lat, q_rope, pages, table, bounds))
    print(f"{args.calls} calls of {args.backend} {kv_dtype} B={args.B} L={args.L} H={args.H} G={args.G} done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
