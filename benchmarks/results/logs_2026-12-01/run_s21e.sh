#!/bin/bash
# Session 21, call 5: where the warps of the nvfp4 decoding seesaw (kLoad 6, H=16 G=4 B=64) and of the bf16 seesaw
# (H=128 G=1 B=64) stall, by source line and SASS instruction (PC sampling; HEAD's library built with -lineinfo).
export PYTHONPATH=$PWD
L=$OUT/s21e.log
nvidia-smi -L > $L
prof() {  # name kv H G
  timeout 200 ncu --kernel-name regex:mla_seesaw --launch-skip 1 --launch-count 1 --section WarpStateStats --section SourceCounters \
    --import-source yes -o $OUT/s21e_$1 python3 benchmarks/mla_decode_profile.py --kv-dtype $2 --B 64 --L 65536 --H $3 --G $4 --calls 3 > /tmp/s21e_$1_ncu.log 2>&1
  echo "== ncu $1 rc=$?" >> $L
  for what in cuda sass; do
    ncu -i $OUT/s21e_$1.ncu-rep --page source --csv --print-source $what > /tmp/s21e_$1_$what.csv 2> /tmp/s21e_$1_$what.err
    python3 - /tmp/s21e_$1_$what.csv $what >> $L <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
def f(x):
    try: return float(x.replace(",", ""))
    except Exception: return 0.0
data, hdr, col, src, fname = [], None, None, 1, ""
for r in rows:
    if any("Sampling (All" in c for c in r):
        hdr = r; col = next(i for i, h in enumerate(r) if "Sampling (All" in h)
        src = next((i for i, h in enumerate(r) if h in ("Source", "# Source")), 1)
        continue
    if r and r[0] == "File Name": fname = r[1].split("/")[-1] if len(r) > 1 else ""; continue
    if hdr is not None and len(r) > col: data.append((f(r[col]), fname, r[0], r[src]))
tot = sum(d[0] for d in data)
print(f"-- {sys.argv[2]}: total samples {tot:.0f}; header {hdr[:4] if hdr else None}")
for v, fn, a, s in sorted(data, key=lambda d: -d[0])[:45]:
    print(f"{v/max(tot,1)*100:5.1f}%  {fn[:22]:>22} {a:>6}  {s[:140]}")
PY
  done
  gzip -c /tmp/s21e_$1_cuda.csv > $OUT/s21e_$1_cuda.csv.gz; gzip -c /tmp/s21e_$1_sass.csv > $OUT/s21e_$1_sass.csv.gz
  rm -f $OUT/s21e_$1.ncu-rep
}
prof nv4 nvfp4 16 4
prof bf16 bf16 128 1
tail -5 $L
