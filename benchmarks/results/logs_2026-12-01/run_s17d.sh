#!/bin/bash
# Session 17, call 4: the proxy fence's cost (library before / after, alternating) and the fp8 / nvfp4 GPU error spread over seeds.
export PYTHONPATH=$PWD
B="python3 benchmarks/mla_decode.py --backends ffi --B 16,64 --L 65536 --hg 16x4,16x1,128x1 --no-ceilings --iterations 20 --out $OUT"
for r in 1 2; do
  echo "== bench before $r"; HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_before timeout 140 $B --kv-dtypes fp8_e4m3 --name s17_fence_before_$r > $OUT/s17d_before_$r.log 2>&1; echo rc $?
  echo "== bench after $r"; timeout 140 $B --kv-dtypes fp8_e4m3 --name s17_fence_after_$r > $OUT/s17d_after_$r.log 2>&1; echo rc $?
done
python3 - <<'PY'
import json, glob, os
out = os.environ["OUT"]
rows = {}
for f in sorted(glob.glob(f"{out}/*s17_fence_*.json")):
    tag = "before" if "before" in f else "after"
    for r in json.load(open(f))["records"]:
        if r["backend"] != "ffi" or r["kv_dtype"] != "fp8_e4m3": continue
        rows.setdefault((r["B"], r["H"], r["G"]), {}).setdefault(tag, []).append(r["ms"])
for k, v in sorted(rows.items()):
    print("B=%d H=%d G=%d" % k, "before", ["%.4f" % x for x in v.get("before", [])], "after", ["%.4f" % x for x in v.get("after", [])])
PY
echo "== seeds"
timeout 200 python3 benchmarks/mla_decode_repeat.py --suite formats --fmt fp8_e4m3 --case 0 1 3 --runs 1 --seed-shift 0 1 2 3 4 5 > $OUT/s17d_seeds_fp8.log 2>&1; echo rc $?
grep -E "rel err|FAILED" $OUT/s17d_seeds_fp8.log | cut -c1-200
