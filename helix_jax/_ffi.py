"""Shared loader for helix_jax's XLA FFI libraries.

Two libraries are built by ``bash ffi/build.sh`` into ``helix_jax/_lib/`` (or found in the folder
named by the environment variable ``HELIX_JAX_FFI_LIB_DIR``):

  ``libhelix_jax_ffi_cpu.so``   C++ CPU handlers (CI tests the FFI path with them)
  ``libhelix_jax_ffi_cuda.so``  CUDA handlers for Hopper (sm_90a)

Each FFI target has one name and up to two handlers: its CPU handler (symbol in the CPU library)
registered for platform ``"cpu"`` and its CUDA handler (symbol in the CUDA library) registered for
``"CUDA"`` when that library loads and JAX sees a GPU. Ops call :func:`ensure_target` before their
``jax.ffi.ffi_call``; registration happens once per process.

Usage from an op module::

    from helix_jax import _ffi
    _ffi.ensure_target("helix_mla_decode", cpu_symbol="HelixMlaDecodeCpu",
                       cuda_symbol="HelixMlaDecodeCuda")
"""
from __future__ import annotations

import ctypes
import functools
import os
import pathlib
import threading

import jax

__all__ = ["BUILD_COMMAND", "LIB_DIR_ENV", "LIBRARIES", "FFIUnavailableError", "lib_dirs",
           "find_library", "load_library", "gpu_present", "target_availability", "ensure_target",
           "registered_platforms"]

BUILD_COMMAND = "bash ffi/build.sh"
LIB_DIR_ENV = "HELIX_JAX_FFI_LIB_DIR"
LIBRARIES = {"cpu": "libhelix_jax_ffi_cpu.so", "cuda": "libhelix_jax_ffi_cuda.so"}

_lock = threading.Lock()
_registered: dict[str, set[str]] = {}


class FFIUnavailableError(RuntimeError):
    """The FFI library or one of its symbols is missing; the message says how to build it."""


def lib_dirs() -> list[pathlib.Path]:
    """Folders searched for the libraries, in order: ``$HELIX_JAX_FFI_LIB_DIR``, then ``helix_jax/_lib``."""
    dirs = []
    env = os.environ.get(LIB_DIR_ENV)
    if env:
        dirs.append(pathlib.Path(env))
    dirs.append(pathlib.Path(__file__).resolve().parent / "_lib")
    return dirs


def find_library(kind: str) -> pathlib.Path | None:
    """Path of the ``"cpu"`` or ``"cuda"`` library, or ``None`` when it is not built."""
    if kind not in LIBRARIES:
        raise ValueError(f"kind must be one of {sorted(LIBRARIES)}, got {kind!r}")
    for d in lib_dirs():
        p = d / LIBRARIES[kind]
        if p.is_file():
            return p
    return None


@functools.cache
def _load(path: str) -> ctypes.CDLL:
    return ctypes.cdll.LoadLibrary(path)


def _missing_message(kind: str) -> str:
    where = ", ".join(str(d) for d in lib_dirs())
    return (f"{LIBRARIES[kind]} was not found (searched {where}); build it from the repository root "
            f"with `{BUILD_COMMAND}` (needs cmake and g++; nvcc for the CUDA library) or point "
            f"{LIB_DIR_ENV} at the folder that holds it")


def load_library(kind: str) -> ctypes.CDLL:
    """Load (once) and return the library; raises :class:`FFIUnavailableError` with the build command."""
    path = find_library(kind)
    if path is None:
        raise FFIUnavailableError(_missing_message(kind))
    try:
        return _load(str(path))
    except OSError as e:
        raise FFIUnavailableError(f"{path} failed to load ({e}); rebuild it with `{BUILD_COMMAND}`") from e


@functools.cache
def gpu_present() -> bool:
    """True when JAX has a CUDA GPU backend in this process."""
    try:
        return any(d.platform == "gpu" for d in jax.devices("gpu"))
    except RuntimeError:
        return False


def _symbol(kind: str, symbol: str):
    lib = load_library(kind)
    try:
        return getattr(lib, symbol)
    except AttributeError as e:
        raise FFIUnavailableError(f"{LIBRARIES[kind]} lacks the symbol {symbol!r}: it is stale; rebuild it with "
                                  f"`{BUILD_COMMAND}`") from e


def target_availability(platform: str, *, cpu_symbol: str, cuda_symbol: str | None) -> tuple[bool, str]:
    """Whether the target's handler for ``platform`` (``"cpu"`` or ``"gpu"``/``"cuda"``) can be registered."""
    kind = "cpu" if platform == "cpu" else "cuda" if platform in ("gpu", "cuda") else None
    if kind is None:
        return False, f"no FFI handler for platform {platform!r}"
    symbol = cpu_symbol if kind == "cpu" else cuda_symbol
    if symbol is None:
        return False, f"this target has no {kind} handler"
    try:
        _symbol(kind, symbol)
    except FFIUnavailableError as e:
        return False, str(e)
    return True, ""


def ensure_target(name: str, *, cpu_symbol: str, cuda_symbol: str | None = None) -> set[str]:
    """Register FFI target ``name`` once: CPU handler always, CUDA handler when built and a GPU exists.

    Raises :class:`FFIUnavailableError` (with the build command) when the CPU library or symbol is
    missing, or when a GPU is present and the CUDA handler is expected but missing. Returns the set
    of registered platforms (``{"cpu"}`` or ``{"cpu", "CUDA"}``).
    """
    with _lock:
        if name in _registered:
            return set(_registered[name])
        done = set()
        fn = _symbol("cpu", cpu_symbol)
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(fn), platform="cpu")
        done.add("cpu")
        if cuda_symbol is not None and gpu_present():
            fn = _symbol("cuda", cuda_symbol)
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(fn), platform="CUDA")
            done.add("CUDA")
        _registered[name] = done
        return set(done)


def registered_platforms(name: str) -> set[str]:
    """Platforms ``name`` is registered for in this process (empty if not yet)."""
    return set(_registered.get(name, ()))
