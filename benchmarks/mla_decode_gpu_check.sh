#!/usr/bin/env bash
# One device call: load (or build) the FFI library, gpu-marked contract tests, compute-sanitizer
# memcheck + racecheck on a small case, then the benchmark. Logs go to ${OUT:-/tmp/out}.
# Usage: bash benchmarks/mla_decode_gpu_check.sh [standalone] [tests] [formats] [sanitize] [trace] [q8] [q4] [repeat]
#                                                 [bench ARGS...]
#   formats: gpu-marked FP8/NVFP4 page tests (tests/test_mla_decode_formats.py)
#   trace: the seesaw kernel's timeline (standalone driver built with -DHELIX_SS_TRACE, then its load-path
#          timings; benchmarks/NOTES.md, session 6)
#   repeat: every GPU contract case 3x per seesaw load path, vs the oracle and bitwise (races)
#   q8: the fp8 small-G*H kernel (mla_small_q8): standalone checks + timings/probes, then the three sanitizers
#       on its checks (benchmarks/NOTES.md, session 8)
#   q4: the nvfp4 small-G*H kernel (mla_small_q4): the same (benchmarks/NOTES.md, session 9)
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
    standalone) shift
      # Kernel variants vs a CPU double reference, timings, and the sanitizers without JAX in the process.
      bin=.carry/mla_standalone
      if ! [ -x "$bin" ] || ! "$bin" small > /dev/null 2>&1; then
        bin=/tmp/mla_standalone
        nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -diag-suppress 940,2473 -Xcompiler -Wno-return-type \
          -I"$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())')" -Iffi/src benchmarks/mla_decode_standalone.cu -o $bin
      fi
      timeout 120 $bin 2>&1 | tee "$OUT/standalone.log"
      mask=$(sed -n 's/.*variants passing: mask=\([0-9]*\).*/\1/p' "$OUT/standalone.log")
      if (( (mask & 12) == 12 )); then export HELIX_MLA_DECODE_KERNEL=auto
      elif (( (mask & 4) )); then export HELIX_MLA_DECODE_KERNEL=seesaw
      elif (( (mask & 2) )); then export HELIX_MLA_DECODE_KERNEL=wgmma
      else export HELIX_MLA_DECODE_KERNEL=mma; fi
      echo "== kernel variant for the rest of this run: $HELIX_MLA_DECODE_KERNEL"
      for tool in memcheck racecheck synccheck; do
        timeout 120 compute-sanitizer --tool $tool $bin small > "$OUT/standalone_$tool.log" 2>&1
        echo "== standalone $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|PASS|FAIL" "$OUT/standalone_$tool.log" | head -8
      done ;;
    tests) shift; timeout 240 python3 -m pytest -m gpu -q -rA tests/test_mla_decode_contract.py 2>&1 | tail -25 | tee "$OUT/gpu_tests.log" ;;
    formats) shift; timeout 300 python3 -m pytest -m gpu -q -rA tests/test_mla_decode_formats.py 2>&1 | tail -25 | tee "$OUT/gpu_formats.log" ;;
    sanitize) shift
      for tool in memcheck; do  # racecheck crashes (SIGSEGV) inside the JAX process: see the standalone step
        # Only our kernels are instrumented (kns = kernel-name substring); XLA's own kernels run unchecked.
        XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout 150 compute-sanitizer --tool $tool --kernel-name kns=mla_ \
          python3 benchmarks/mla_decode_sanitize.py > "$OUT/$tool.log" 2>&1
        echo "== $tool rc=$?"; grep -v "^$" "$OUT/$tool.log" | tail -6
      done ;;
    trace) shift
      nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -diag-suppress 940,2473 -Xcompiler -Wno-return-type \
        -DHELIX_SS_TRACE -I"$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())')" -Iffi/src \
        benchmarks/mla_decode_standalone.cu -o /tmp/mla_standalone_trace &&
        timeout 240 /tmp/mla_standalone_trace load > "$OUT/trace.log" 2>&1
      echo "== trace rc=$?"; grep -E "passing|^trace|^tile|^ *[0-9]+ |^load" "$OUT/trace.log" ;;
    q8) shift
      bin=/tmp/mla_standalone_q8
      nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -diag-suppress 940,2473,128 -Xcompiler -Wno-return-type \
        -I"$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())')" -Iffi/src benchmarks/mla_decode_standalone.cu -o $bin &&
        timeout 150 $bin q8 2>&1 | tee "$OUT/q8.log" | grep -E "^q8"
      for tool in memcheck synccheck racecheck; do
        timeout 120 compute-sanitizer --tool $tool $bin q8 999 > "$OUT/q8_$tool.log" 2>&1
        echo "== q8 $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/q8_$tool.log"
      done ;;
    q4) shift
      # The nvfp4 small-G*H kernel (mla_small_q4): standalone checks (incl. a ring-wrapping case), timings per batch in
      # separate processes (a fault poisons the process), the sanitizers on the checks (benchmarks/NOTES.md, session 9).
      bin=/tmp/mla_standalone_q4
      nvcc -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a --use_fast_math -diag-suppress 940,2473,128 -Xcompiler -Wno-return-type \
        -I"$(python3 -c 'import jax.ffi; print(jax.ffi.include_dir())')" -Iffi/src benchmarks/mla_decode_standalone.cu -o $bin &&
        timeout 120 $bin q4 999 > "$OUT/q4_checks.log" 2>&1; echo "== q4 checks rc=$?"; grep -E "passing" "$OUT/q4_checks.log"
      for B in 64 1 128; do timeout 150 $bin q4 $B 2>&1 | tee "$OUT/q4_B$B.log" | grep -E "^q4"; done
      for tool in memcheck synccheck racecheck; do
        timeout 150 compute-sanitizer --tool $tool $bin q4 999 > "$OUT/q4_$tool.log" 2>&1
        echo "== q4 $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/q4_$tool.log"
      done ;;
    repeat) shift
      for ld in tma_evict_first cpasync tma tma_multicast; do
        HELIX_MLA_DECODE_LOAD=$ld timeout 150 python3 benchmarks/mla_decode_repeat.py --runs 3 --seconds 20 > "$OUT/repeat_$ld.log" 2>&1
        echo "== repeat $ld rc=$?"; grep -v Warn "$OUT/repeat_$ld.log" | tail -7
      done ;;
    bench) shift; timeout 400 python3 benchmarks/mla_decode.py --out "$OUT" "$@" 2>&1 | tee "$OUT/bench.log" | tail -80; break ;;
    *) echo "unknown step $1"; exit 2 ;;
  esac
done
