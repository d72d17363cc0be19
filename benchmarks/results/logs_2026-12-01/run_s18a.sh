#!/bin/bash
# Session 18, call 1: nvfp4 pages at G*H > 16 on the seesaw kernel with a decoding producer (kLoad 4): the GPU
# format tests on nvfp4 FFI cases (incl. the determinism reruns), then its speed against bf16 and the old pipe kernel.
export PYTHONPATH=$PWD
nvidia-smi -L
echo "== formats, nvfp4 ffi"
timeout 300 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k "nvfp4 and ffi" -q > $OUT/s18a_formats.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s18a_formats.log | cut -c1-300 | tail -12
echo "== bench"
B="timeout 120 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --no-ceilings"
$B --B 16,64 --hg 16x4,128x1,64x4 --kv-dtypes bf16,nvfp4 --name s18a_nv4 --out $OUT > $OUT/s18a_bench.log 2>&1; echo rc $?
HELIX_MLA_DECODE_DEQUANT=pipe $B --B 64 --hg 16x4,128x1 --kv-dtypes nvfp4 --name s18a_pipe --out $OUT > $OUT/s18a_pipe.log 2>&1; echo rc $?
python3 - <<'PY'
import json, glob, os
for n in ("s18a_nv4", "s18a_pipe"):
    for f in glob.glob(os.environ["OUT"] + f"/{n}_*.json"):
        d = json.load(open(f))
        for r in d["records"]:
            print(n, r["kv_dtype"], "B", r["B"], "H", r["H"], "G", r["G"], f'{r["ms"]:.4f} ms', r.get("speedup_vs_bf16"), r.get("kernel_us"))
PY
