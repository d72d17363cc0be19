"""Ledger metadata cost: B = 4096 sequences x G = 8 under jit, per rank, for growing sequence lengths.

The metadata is closed-form per token, so its cost is O(B*G) and must not grow with the sequence
length. Writes benchmarks/results/ledger_<date>.{json,md}.

    python benchmarks/ledger.py [--iters 200]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import pathlib
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from helix_jax import ledger


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--cp", type=int, default=8)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"))
    a = ap.parse_args()

    f = jax.jit(lambda pos, r: ledger.verify_metadata(pos, r, page_size=a.page_size, cp_size=a.cp))
    rng = np.random.default_rng(0)
    records = []
    for seq_len in (1 << 10, 1 << 16, 1 << 20, 1 << 24):
        p0 = rng.integers(0, seq_len, size=a.batch)
        pos = jnp.asarray(p0[:, None] + np.arange(a.group), jnp.int32)
        jax.block_until_ready(f(pos, 3))
        times = []
        for _ in range(a.iters):
            t = time.perf_counter()
            jax.block_until_ready(f(pos, 3))
            times.append((time.perf_counter() - t) * 1e6)
        med = statistics.median(times)
        records.append({"seq_len": seq_len, "B": a.batch, "G": a.group, "cp": a.cp,
                        "page_size": a.page_size, "us_median": med,
                        "ns_per_token": med * 1e3 / (a.batch * a.group)})
        print(f"L={seq_len:>9}  B={a.batch} G={a.group}: {med:8.1f} us/call (median of {a.iters}), "
              f"{records[-1]['ns_per_token']:.2f} ns/token")
    device = f"{jax.devices()[0].platform}: {platform.processor() or platform.machine()}"
    date = dt.date.today().isoformat()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"device": device, "date": date, "records": records}
    (out / f"ledger_{date}.json").write_text(json.dumps(doc, indent=1))
    md = [f"# Ledger metadata cost ({device}, {date})", "", "| seq_len | B | G | us/call (median) | ns/token |",
          "|---|---|---|---|---|"]
    md += [f"| {r['seq_len']} | {r['B']} | {r['G']} | {r['us_median']:.1f} | {r['ns_per_token']:.2f} |" for r in records]
    ratio = records[-1]["us_median"] / records[0]["us_median"]
    md += ["", f"Cost at L=16M over L=1K: {ratio:.2f}x (O(B*G), independent of L)."]
    (out / f"ledger_{date}.md").write_text("\n".join(md) + "\n")
    print(f"ratio L=16M / L=1K: {ratio:.2f}x -> {out}/ledger_{date}.json")


if __name__ == "__main__":
    main()
