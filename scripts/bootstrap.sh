#!/usr/bin/env bash
# One entry for a fresh machine: create .venv (Python 3.12), install helix_jax with its extras,
# build the FFI library when a C++ toolchain is present, then run the requested job.
#   bash scripts/bootstrap.sh demo [demo flags...]   -> python -m helix_jax demo ...
#   bash scripts/bootstrap.sh test [pytest flags...] -> the test suite on 8 virtual CPU devices
set -euo pipefail
cd "$(dirname "$0")/.."
job="${1:-demo}"; shift || true

pick_python() {  # prints "PYENV_VERSION|interpreter" for a Python >= 3.12
  local c pv
  for c in python3.12 python3; do
    for pv in 3.12.1 ""; do
      if PYENV_VERSION=$pv $c -c 'import sys; sys.exit(sys.version_info[:2] < (3, 12))' 2>/dev/null; then
        echo "$pv|$c"; return 0
      fi
    done
  done
  echo "error: Python >= 3.12 is required (jax 0.11.2 is published for 3.12+)" >&2; return 1
}

if [ ! -x .venv/bin/python ]; then
  sel=$(pick_python)
  echo "[bootstrap] creating .venv with ${sel#*|} (PYENV_VERSION=${sel%%|*})"
  PYENV_VERSION=${sel%%|*} ${sel#*|} -m venv .venv
fi
stamp=.venv/.helix_jax_installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "[bootstrap] installing helix_jax and its extras"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test,model,notebooks]"
  touch "$stamp"
fi
if command -v cmake >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1 && [ -f ffi/CMakeLists.txt ]; then
  echo "[bootstrap] building the FFI library (CPU handlers; CUDA handlers when nvcc is present)"
  PATH="$PWD/.venv/bin:$PATH" bash ffi/build.sh >/tmp/helix_jax_ffi_build.log 2>&1 \
    || { echo "[bootstrap] FFI build failed; log:"; tail -40 /tmp/helix_jax_ffi_build.log; exit 1; }
fi
export XLA_FLAGS="${XLA_FLAGS:---xla_force_host_platform_device_count=8}"
case "$job" in
  demo) exec .venv/bin/python -m helix_jax demo "$@" ;;
  test) exec .venv/bin/python -m pytest -q -n 2 --dist loadfile "$@" ;;
  *) exec .venv/bin/python -m helix_jax "$job" "$@" ;;
esac
