#!/bin/bash
# The GPU-marked tests file by file, each under its own time limit, with one summary line per file, so a run that is
# cut short still says what passed (one `pytest -m gpu tests/` under a single timeout prints nothing when cut).
#
#   scripts/gpu_suite.sh [LIMIT_S per file, default 240] [test files ..., default tests/test_*.py]
#
# Full outputs go to ${GPU_SUITE_TMP:-/tmp}/gpu_suite_<file>.log; the exit status is 0 only if every file passed
# (pytest's 5, "no tests collected", counts as passed: most files have no GPU test).
limit=${1:-240}
shift $(( $# > 0 ? 1 : 0 ))
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(tests/test_*.py)
tmp=${GPU_SUITE_TMP:-/tmp}
status=0
for f in "${files[@]}"; do
  log="$tmp/gpu_suite_$(basename "$f" .py).log"
  start=$(date +%s)
  timeout "$limit" python3 -m pytest -m gpu -q -rfE -p no:cacheprovider "$f" > "$log" 2>&1
  rc=$?
  summary=$(grep -E "^(=+ )?[0-9]+ (passed|failed|error|skipped|deselected)|no tests ran" "$log" | tail -1)
  [ $rc -eq 124 ] && summary="cut by the ${limit} s limit after: $(grep -cE 'PASSED|FAILED' "$log") reported, see $log"
  echo "$f rc $rc $(( $(date +%s) - start )) s: ${summary:-see $log}"
  grep -E "^(FAILED|ERROR) " "$log" | head -20
  if [ $rc -ne 0 ] && [ $rc -ne 5 ]; then status=1; fi
done
exit $status
