# A/B timing helper for device run scripts (source it: `. benchmarks/ab_bench.sh`). Each call runs
# benchmarks/mla_decode.py once (FFI backend, no ceilings) under the given environment and appends its records, one line
# each, to a log. Alternate the libraries being compared in the caller, e.g.
#
#   for r in 1 2; do
#     ab_bench new_r$r "$OUT/x.log" --B 16,64 --L 65536 --hg 128x1 --kv-dtypes bf16 -- HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
#     ab_bench old_r$r "$OUT/x.log" --B 16,64 --L 65536 --hg 128x1 --kv-dtypes bf16 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_old
#   done
#
# Arguments: NAME LOG [benchmark arguments ...] [-- VAR=VALUE ...]. AB_TIMEOUT (seconds, default 80) bounds each run;
# its full output stays in ${AB_TMP:-/tmp}/ab_NAME.log.
ab_bench() {
  local name=$1 log=$2
  shift 2
  local args=() envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  envs=("$@")
  local tmp=${AB_TMP:-/tmp}
  env "${envs[@]}" timeout "${AB_TIMEOUT:-80}" python3 benchmarks/mla_decode.py --backends ffi --no-ceilings \
    --name "ab_$name" --out "$tmp/ab_out" "${args[@]}" > "$tmp/ab_$name.log" 2>&1
  local rc=$?
  echo "== bench $name (${envs[*]}) rc $rc" >> "$log"
  grep -E "backend=" "$tmp/ab_$name.log" | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' -e 's/ frac_roofline.*//' \
    | cut -c1-200 >> "$log"
  return $rc
}
