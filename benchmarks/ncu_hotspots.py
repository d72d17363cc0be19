"""Where a kernel's warps stall, per SASS instruction, from Nsight Compute's source page.

  ncu --section SourceCounters --section WarpStateStats -o rep python3 benchmarks/mla_decode_profile.py ...
  ncu -i rep.ncu-rep --page source --csv --print-source sass > source.csv
  python3 benchmarks/ncu_hotspots.py source.csv --top 30 --split 124,4000,5309

Prints the warp-state samples in all, per opcode, per region (``--split``: instruction indices where regions start, e.g.
the consumers' and the producer's ``USETMAXREG``), and the ``--top`` instructions with their three largest stall
reasons and a little context. The out-of-line retry loops of ``mbarrier.try_wait`` sit at the end of the kernel: a wait's
in-line branch (``@!P0 BRA``) right after its ``SYNCS.PHASECHK`` carries most of its samples. A gzipped CSV is read too.
"""
from __future__ import annotations

import argparse
import collections
import csv
import gzip
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def read_source(path: str) -> list[dict]:
    """The source page's instruction rows (dicts by column name); skips ncu's leading ``Kernel Name`` row."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if "Address" in r and "Source" in r), None)
    if start is None:
        raise ValueError(f"{path}: no header row with 'Address' and 'Source' (ncu --page source --csv --print-source sass)")
    hdr = rows[start]
    if SAMPLES not in hdr:
        raise ValueError(f"{path}: no '{SAMPLES}' column (profile with --section SourceCounters)")
    return [dict(zip(hdr, r)) for r in rows[start + 1:] if len(r) == len(hdr)]


def opcode(sass: str) -> str:
    """The instruction's opcode without modifiers or predicate (``@!P0 BRA 0x..`` -> ``BRA``)."""
    parts = sass.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0].split(".")[0] if parts else ""


def summarize(rows: list[dict], *, top: int = 20, split: tuple[int, ...] = ()) -> str:
    samples = [int(r[SAMPLES] or 0) for r in rows]
    total = sum(samples)
    if total == 0:
        return "no samples\n"
    stalls = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c]
    out = [f"instructions {len(rows)}, samples {total}"]
    if split:
        bounds = [0, *sorted(split), len(rows)]
        for a, b in zip(bounds, bounds[1:]):
            n = sum(samples[a:b])
            out.append(f"  region [{a}, {b}): {n} ({100 * n / total:.1f} %)")
    by_op = collections.Counter()
    for r, s in zip(rows, samples):
        by_op[opcode(r["Source"])] += s
    out.append("by opcode: " + ", ".join(f"{k} {100 * v / total:.1f} %" for k, v in by_op.most_common(12)))
    out.append(f"top {top} instructions (index, samples, % of all, SASS, top stall reasons):")
    for i in sorted(sorted(range(len(rows)), key=lambda i: -samples[i])[:top]):
        why = sorted(((int(rows[i][c] or 0), c[6:]) for c in stalls), reverse=True)[:3]
        why_s = ", ".join(f"{n} {k}" for n, k in why if n)
        out.append(f"  {i:6d} {samples[i]:8d} {100 * samples[i] / total:5.1f} %  {rows[i]['Source'].strip()[:64]:64s} {why_s}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output (.csv or .csv.gz)")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--split", default="", help="comma-separated instruction indices where regions start")
    args = ap.parse_args(argv)
    if args.top < 1:
        ap.error("--top must be >= 1")
    try:
        split = tuple(int(x) for x in args.split.split(",") if x.strip())
    except ValueError:
        ap.error(f"--split must be comma-separated integers, got {args.split!r}")
    try:
        rows = read_source(args.csv)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if any(not 0 < s < len(rows) for s in split):
        ap.error(f"--split indices must lie in (0, {len(rows)})")
    sys.stdout.write(summarize(rows, top=args.top, split=split))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
