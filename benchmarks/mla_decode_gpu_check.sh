#!/usr/bin/env bash
# One device call: load (or build) the FFI library, gpu-marked contract tests, compute-sanitizer
# memcheck + racecheck on a small case, then the benchmark. Logs go to ${OUT:-/tmp/out}.
# Usage: bash benchmarks/mla_decode_gpu_check.sh [tests] [sanitize] [bench ARGS...]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
if ! python3 -c "import ctypes; ctypes.CDLL('helix_jax/_lib/libhelix_jax_ffi_cuda.so'); ctypes.CDLL('helix_jax/_lib/libhelix_jax_ffi_cpu.so')"; then
  echo "carried libraries do not load here: building"; PYTHON=python3 bash ffi/build.sh 2>&1 | tail -3
fi
while [ $# -gt 0 ]; do
  case "$1" in
    tests) shift; timeout 240 python3 -m pytest -m gpu -q -rA tests/test_mla_decode_contract.py 2>&1 | tail -25 | tee "$OUT/gpu_tests.log" ;;
    sanitize) shift
      for tool in memcheck racecheck; do
        # Only our kernels are instrumented (kns = kernel-name substring); XLA's own kernels run unchecked.
        XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout 150 compute-sanitizer --tool $tool --kernel-name kns=mla_ \
          python3 benchmarks/mla_decode_sanitize.py > "$OUT/$tool.log" 2>&1
        echo "== $tool rc=$?"; grep -v "^$" "$OUT/$tool.log" | tail -6
      done ;;
    bench) shift; timeout 400 python3 benchmarks/mla_decode.py --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log" | tail -80; break ;;
    *) echo "unknown step $1"; exit 2 ;;
  esac
done
