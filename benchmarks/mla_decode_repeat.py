"""Repeat GPU contract or format cases of the FFI MLA decode and check each run against a float64 oracle and
bitwise against the case's first run (a result that changes between identical calls is a race).

``--suite formats --fmt fp8_e4m3 --case 0`` repeats tests/test_mla_decode_formats.py's DETERMINISM_CASES on quantized
pages (session 17: the open race of the fp8 ring-wrapping case). ``--seed-shift`` adds to the pytest node's seed (as
HELIX_TEST_SEED does) for other inputs of the same shape.

Used to chase the one failure of `test_gpu_contract[128-4-128-64-lens6-ffi]` seen with the opt-in TMA
loads (benchmarks/NOTES.md, attempt 7). The seesaw load path is read once per process, so pick it with the
environment: ``HELIX_MLA_DECODE_LOAD=tma_evict_first python3 benchmarks/mla_decode_repeat.py --case 6 --runs 40``.
Exit status 1 if any run fails the oracle check or differs from the first run.
"""
import argparse
import functools
import itertools
import os
import pathlib
import sys
import time
import zlib

import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

import test_mla_decode_contract as contract  # noqa: E402
import test_mla_decode_formats as formats  # noqa: E402

SMALL = (3, 4, 8, 64, [300, 64, 1])   # a CPU-sized case, to smoke-test this script without a GPU


def _seeded(nodeid, shift):
    """The pytest node's generator (tests/conftest.py's rng fixture: crc32 of the node id), shifted by ``shift``."""
    return np.random.default_rng(zlib.crc32(nodeid.encode()) + shift)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=("contract", "formats"), default="contract",
                    help="contract: GPU_CASES of test_mla_decode_contract.py (bf16 pages); formats: DETERMINISM_CASES of "
                         "test_mla_decode_formats.py (quantized pages, --fmt)")
    ap.add_argument("--fmt", choices=formats.FORMATS, default="fp8_e4m3", help="page format of --suite formats")
    ap.add_argument("--case", type=int, nargs="+", default=None,
                    help="indices into the suite's case list (default: all)")
    ap.add_argument("--seed-shift", type=int, nargs="+", default=[0],
                    help="added to the pytest node's seed (other random inputs); several values: one pass each")
    ap.add_argument("--small", action="store_true", help="one small case instead (runs on CPU too)")
    ap.add_argument("--runs", type=int, default=10, help="calls per case (the first is the bitwise baseline)")
    ap.add_argument("--seconds", type=float, default=60.0, help="stop repeating a case after this long")
    ap.add_argument("--implementation", default="ffi")
    ap.add_argument("--dtype", choices=("bf16", "f16"), default="bf16",
                    help="contract suite: the queries' and pages' 16-bit type (f16: the f16 kernel instantiations)")
    args = ap.parse_args(argv)
    if args.suite != "contract" and args.dtype != "bf16":
        ap.error(f"--dtype {args.dtype}: only the contract suite has a 16-bit page type to choose (formats: --fmt)")
    # The environment variables the CUDA handler reads, as the run's label.
    mode = " ".join(f"{k[len('HELIX_MLA_DECODE_'):]}={v}" for k, v in sorted(os.environ.items())
                    if k.startswith("HELIX_MLA_DECODE_")) or "defaults"
    if args.dtype != "bf16":  # (the contract suite's: rejected above for the formats suite)
        mode += f" dtype={args.dtype}"
    suite_cases = contract.GPU_CASES if args.suite == "contract" else formats.DETERMINISM_CASES
    picked = range(len(suite_cases)) if args.case is None else args.case
    for i in picked:
        if not 0 <= i < len(suite_cases):
            ap.error(f"--case {i}: the {args.suite} suite has cases 0..{len(suite_cases) - 1}")
    cases = [("small", SMALL)] if args.small else [(i, suite_cases[i]) for i in picked]
    failed = False
    for (name, (B, G, H, P, lens)), shift in itertools.product(cases, args.seed_shift):
        # Same seed as the pytest node (tests/conftest.py's rng fixture), so the same inputs.
        if args.suite == "contract":
            nodeid = (f"tests/test_mla_decode_contract.py::test_gpu_contract[{B}-{G}-{H}-{P}-lens{name}-"
                      f"{args.implementation}]")
            case = contract.gpu_case(_seeded(nodeid, shift), B, G, H, P, lens,
                                     dtype=jnp.float16 if args.dtype == "f16" else jnp.bfloat16)
            run, check = contract.run, contract.check
        else:
            nodeid = (f"tests/test_mla_decode_formats.py::test_gpu_ffi_formats_are_deterministic[{B}-{G}-{H}-{P}-"
                      f"lens{name}-{args.fmt}]")
            case = formats.gpu_formats_case(args.fmt, _seeded(nodeid, shift), B, G, H, P, lens)
            run, ref = formats.run, formats.oracle(case)   # one float64 oracle per case, for every run checked
            check = functools.partial(formats.check, tol_o=1e-2, ref=ref,
                                      tol_lse=formats.gpu_lse_tol(args.fmt, args.implementation))
        o0, l0 = run(case, args.implementation)
        if args.suite == "formats":  # the first run's distance from the oracle, pass or fail (error budgets)
            o_err, lse_err = formats.errors(case, o0, l0, ref)
            print(f"[{mode}] case {name} seed shift {shift}: run 0 o rel err {o_err:.3e}, lse max err {lse_err:.3e}",
                  flush=True)
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
                both = np.isfinite(lse) & np.isfinite(l0)   # (-inf - -inf is nan: compare finite entries only)
                dl = np.abs(lse - l0)[both].max(initial=0.0)
                dl = np.inf if np.any(np.isfinite(lse) != np.isfinite(l0)) else dl
                where = np.argwhere(d > 0)
                print(f"[{mode}] case {name} run {i}: differs from run 0 at (b, g) {where[:8].tolist()}"
                      f"{' ...' if len(where) > 8 else ''} ({len(where)} pairs), max |o diff| {d.max():.3g}, "
                      f"max |lse diff| {dl:.3g}", flush=True)
            if time.time() - t0 > args.seconds:
                break
        print(f"[{mode}] case {name} (B={B} G={G} H={H} P={P}, seed shift {shift}): {i + 1} runs, {bad_check} oracle failures, "
              f"{bad_bits} differ from run 0", flush=True)
        failed |= bool(bad_check or bad_bits)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
