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

# ab_winner LOG: the library name (the NAME of `ab_bench NAME_rK ...`, without `_rK`) with the lowest summed ms over
# the rows that hold steady between rounds: every B=16 row and H=128 G=1 at any B, H=16 rows left out (the B=64 G=4
# rows move +-5 % with the power cap, the H=16 ones by less than the libraries differ). Prints nothing for a log
# without bench rows. Use it to pick the library a run's final benchmark measures, e.g.
#   W=$(ab_winner "$L"); D=$LIB_A; [ "$W" = b ] && D=$LIB_B
ab_winner() {
  python3 - "$1" <<'PY'
import re, sys
t, cur = {}, None
for line in open(sys.argv[1]):
    if line.startswith("=="):  # a bench header, or any other section (whose rows count for no library)
        m = re.match(r"== bench (\w+?)_r\d", line)
        cur = m.group(1) if m else None
        continue
    m = re.search(r" ms=([\d.]+)", line)
    if m and cur and ("B=16 " in line or "G=1 H=128" in line) and " H=16" not in line:
        t[cur] = t.get(cur, 0.0) + float(m.group(1))
if t:
    print(min(t, key=t.get))
PY
}
