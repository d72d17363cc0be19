#!/bin/bash
# Session 17, call 6: issue 6's ratios on the final library, ceilings in the same call.
export PYTHONPATH=$PWD
timeout 380 python3 benchmarks/mla_decode.py --backends ffi --B 16,64 --L 65536 --hg 16x4,16x1,128x1 --kv-dtypes bf16,fp8_e4m3,nvfp4 --iterations 20 --name mla_decode_s17_formats --out $OUT > $OUT/s17f_bench.log 2>&1; echo rc $?
python3 - <<'PY'
import json, glob, os
f = glob.glob(os.environ["OUT"] + "/mla_decode_s17_formats_*.json")[0]
d = json.load(open(f)); print(d["device"], d["ceilings"])
ms = {(r["kv_dtype"], r["B"], r["H"], r["G"]): r["ms"] for r in d["records"] if r["backend"] == "ffi"}
for (k, B, H, G), v in sorted(ms.items()):
    if k == "bf16": continue
    print(f"{k} B={B} H={H} G={G}: {v:.4f} ms, bf16 {ms[('bf16', B, H, G)]:.4f} ms, speed-up {ms[('bf16', B, H, G)] / v:.2f}x")
PY
