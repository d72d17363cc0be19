#!/usr/bin/env bash
# session 14, call 7: where mla_mid_q8s's cycles go (B=64 G=4 H=16 fp8, one launch): warp-stall reasons per issued
# instruction, and the SASS lines with the most stall samples (PC sampling, -lineinfo build).
timeout 200 ncu --kernel-name regex:mla_mid_q8s --launch-skip 1 --launch-count 1 --section WarpStateStats --section SourceCounters \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio --import-source yes -o $OUT/s14_7 \
  .carry/mla_standalone s8prof 1 > $OUT/s14_7_ncu.log 2>&1
echo "ncu rc=$?"
ncu -i $OUT/s14_7.ncu-rep --page raw --csv 2>&1 | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
hdr, val = rows[0], rows[-1]
st = sorted(((float(v.replace(",", "")), h) for h, v in zip(hdr, val) if "issue_stalled" in h and v.replace(",", "").replace(".", "").isdigit()), reverse=True)
for v, h in st[:14]: print(f"{v:8.3f} {h}")
'
ncu -i $OUT/s14_7.ncu-rep --page source --csv --print-source sass > $OUT/s14_7_sass.csv 2> $OUT/s14_7_sass.err
echo "source page rc=$? lines=$(wc -l < $OUT/s14_7_sass.csv)"; head -c 600 $OUT/s14_7_sass.err
python3 - $OUT/s14_7_sass.csv <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
if not rows: sys.exit()
hdr = rows[0]; print("columns:", hdr[:12])
col = next((i for i, h in enumerate(hdr) if "Sampling (All" in h), None)
src = next((i for i, h in enumerate(hdr) if h in ("Source", "# Source")), 1)
if col is None: sys.exit()
def f(x):
    try: return float(x.replace(",", ""))
    except: return 0.0
tot = sum(f(r[col]) for r in rows[1:])
top = sorted(rows[1:], key=lambda r: -f(r[col]))[:40]
print("total samples", tot)
for r in top: print(f"{f(r[col])/max(tot,1)*100:5.1f}%  {r[0]:>6}  {r[src][:110]}")
PY
rm -f $OUT/s14_7.ncu-rep
