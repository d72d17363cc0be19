#!/bin/bash
# Session 17, call 5: where mla_mid_q8s's fence goes (before the PV issue: fence1, after it: fence2), then the whole
# formats GPU test file on the faster one.
export PYTHONPATH=$PWD
B="python3 benchmarks/mla_decode.py --backends ffi --B 16,64 --L 65536 --hg 16x4,128x1 --no-ceilings --iterations 20 --kv-dtypes fp8_e4m3 --out $OUT"
for v in fence1 fence2; do
  echo "== bench $v"; HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_$v timeout 100 $B --name s17_$v > $OUT/s17e_$v.log 2>&1; echo rc $?
done
pick=$(python3 - <<'PY'
import json, glob, os
out = os.environ["OUT"]
ms = {}
for v in ("fence1", "fence2"):
    for f in glob.glob(f"{out}/s17_{v}_*.json"):
        for r in json.load(open(f))["records"]:
            ms.setdefault(v, {})[(r["B"], r["H"], r["G"])] = r["ms"]
import sys
for k in sorted(ms["fence1"]):
    print("B=%d H=%d G=%d" % k, "fence1 %.4f fence2 %.4f ratio %.3f" % (ms["fence1"][k], ms["fence2"][k], ms["fence2"][k] / ms["fence1"][k]), file=sys.stderr)
tot = {v: sum(ms[v].values()) for v in ms}
print("fence2" if tot["fence2"] < tot["fence1"] else "fence1")
PY
)
echo "picked $pick"
echo "== repeat (fp8 case 0, 150 runs) on $pick"
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_$pick timeout 70 python3 benchmarks/mla_decode_repeat.py --suite formats --fmt fp8_e4m3 --case 0 --runs 150 --seconds 45 > $OUT/s17e_repeat.log 2>&1; echo rc $?; grep -E "differs|FAILED|runs," $OUT/s17e_repeat.log | head -5
echo "== pytest formats (gpu) on $pick"
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_$pick timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider -x tests/test_mla_decode_formats.py > $OUT/s17e_pytest.log 2>&1; echo rc $?; tail -6 $OUT/s17e_pytest.log | cut -c1-400
