"""Repeat GPU contract cases of the FFI MLA decode and check each run against a float64 oracle and
bitwise against the case's first run (a result that changes between identical calls is a race).

Used to chase the one failure of `test_gpu_contract[128-4-128-64-lens6-ffi]` seen with the opt-in TMA
loads (benchmarks/NOTES.md, attempt 7). The seesaw load path is read once per process, so pick it with the
environment: ``HELIX_MLA_DECODE_LOAD=tma_evict_first python3 benchmarks/mla_decode_repeat.py --case 6 --runs 40``.
Exit status 1 if any run fails the oracle check or differs from the first run.
"""
import argparse
import os
import pathlib
import sys
import time
import zlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from test_mla_decode_contract import GPU_CASES, check, gpu_case, run  # noqa: E402

SMALL = (3, 4, 8, 64, [300, 64, 1])   # a CPU-sized case, to smoke-test this script without a GPU


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", type=int, nargs="+", default=list(range(len(GPU_CASES))),
                    help=f"indices into tests/test_mla_decode_contract.py GPU_CASES (0..{len(GPU_CASES) - 1})")
    ap.add_argument("--small", action="store_true", help="one small case instead (runs on CPU too)")
    ap.add_argument("--runs", type=int, default=10, help="calls per case (the first is the bitwise baseline)")
    ap.add_argument("--seconds", type=float, default=60.0, help="stop repeating a case after this long")
    ap.add_argument("--implementation", default="ffi")
    args = ap.parse_args(argv)
    mode = os.environ.get("HELIX_MLA_DECODE_LOAD", "auto")
    cases = [("small", SMALL)] if args.small else [(i, GPU_CASES[i]) for i in args.case]
    failed = False
    for name, (B, G, H, P, lens) in cases:
        nodeid = (f"tests/test_mla_decode_contract.py::test_gpu_contract[{B}-{G}-{H}-{P}-lens{name}-"
                  f"{args.implementation}]")
        # Same seed as the pytest node (tests/conftest.py's rng fixture), so the same inputs.
        case = gpu_case(np.random.default_rng(zlib.crc32(nodeid.encode())), B, G, H, P, lens)
        o0, l0 = run(case, args.implementation)
        bad_check = bad_bits = 0
        t0 = time.time()
        for i in range(args.runs):
            o, lse = (o0, l0) if i == 0 else run(case, args.implementation)
            same = i > 0 and np.array_equal(o, o0, equal_nan=True) and np.array_equal(lse, l0, equal_nan=True)
            if not same:  # the float64 oracle only for run 0 and for runs that differ from it
                try:
                    check(case, o, lse)
                except AssertionError as e:
                    bad_check += 1
                    print(f"[{mode}] case {name} run {i}: oracle check FAILED: {e}", flush=True)
            if i and not same:
                bad_bits += 1
                d = np.nan_to_num(np.abs(o - o0), nan=np.inf).max(axis=(2, 3))
                where = np.argwhere(d > 0)
                print(f"[{mode}] case {name} run {i}: differs from run 0 at (b, g) {where[:8].tolist()}"
                      f"{' ...' if len(where) > 8 else ''}, max |diff| {d.max():.3g}", flush=True)
            if time.time() - t0 > args.seconds:
                break
        print(f"[{mode}] case {name} (B={B} G={G} H={H} P={P}): {i + 1} runs, {bad_check} oracle failures, "
              f"{bad_bits} differ from run 0", flush=True)
        failed |= bool(bad_check or bad_bits)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
