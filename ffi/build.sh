#!/usr/bin/env bash
# Build the FFI libraries into helix_jax/_lib/. Uses the python on PATH (the project venv) for
# jax's FFI headers. CUDA handlers are built when nvcc is found (no GPU needed to compile).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${PYTHON:-python}"
inc="$($py -c 'import jax.ffi; print(jax.ffi.include_dir())')"
nvcc_bin="$(command -v nvcc || true)"
if [ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc_bin=/usr/local/cuda/bin/nvcc; fi
cuda_flag=()
if [ -n "$nvcc_bin" ]; then cuda_flag=(-DCMAKE_CUDA_COMPILER="$nvcc_bin" -DHELIX_BUILD_CUDA=ON); else cuda_flag=(-DHELIX_BUILD_CUDA=OFF); fi
cmake -S "$here" -B "$here/build" -DXLA_FFI_INCLUDE_DIR="$inc" "${cuda_flag[@]}" "$@" >/dev/null
cmake --build "$here/build" -j "$(nproc)"
ls -1 "$here/../helix_jax/_lib/"
