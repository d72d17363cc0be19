"""XLA FFI backend of the Helix exchange: targets ``helix_sanitize_pack`` and ``helix_combine``.

Handlers: ``ffi/src/exchange_cpu.cc`` (CI) and ``ffi/src/exchange_cuda.cu`` (16-byte-vector CUDA
kernels). Payload layout as in :mod:`.reference` (bit-identical). Call inside ``shard_map``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ... import _ffi
from .reference import container_dtype, pad_elems

PACK_TARGET = "helix_sanitize_pack"
COMBINE_TARGET = "helix_combine"
_SYMBOLS = {PACK_TARGET: ("HelixSanitizePackCpu", "HelixSanitizePackCuda"),
            COMBINE_TARGET: ("HelixCombineCpu", "HelixCombineCuda")}
DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float32))


def availability(platform):
    """``(ok, reason)``: both targets' handlers for ``platform`` are built and loadable."""
    for cpu, cuda in _SYMBOLS.values():
        ok, why = _ffi.target_availability(platform, cpu_symbol=cpu, cuda_symbol=cuda)
        if not ok:
            return ok, why
    return True, ""


def preferred(platform):
    """Auto-selected only on GPU; on CPU the jnp path stays the default."""
    return platform in ("gpu", "cuda")


def _ensure():
    for name, (cpu, cuda) in _SYMBOLS.items():
        _ffi.ensure_target(name, cpu_symbol=cpu, cuda_symbol=cuda)


def _check_dtype(dtype, what):
    if jnp.dtype(dtype) not in DTYPES:
        raise ValueError(f"exchange implementation='ffi' needs {what} in bfloat16 or float32, got {jnp.dtype(dtype)}")


def sanitize_pack(partial_out, lse, zero_kv_mask, *, cp_size: int):
    """partial_out ``[T, H, D]``, lse ``[T, H]``, zero_kv_mask ``[T]`` -> payload ``[cp, T, H//cp, D+pad]``."""
    _check_dtype(partial_out.dtype, "partial_out")
    _ensure()
    t, h, d = partial_out.shape
    out = jax.ShapeDtypeStruct((cp_size, t, h // cp_size, d + pad_elems(partial_out.dtype)),
                               container_dtype(partial_out.dtype))
    return jax.ffi.ffi_call(PACK_TARGET, out, vmap_method="sequential")(
        partial_out, lse.astype(jnp.float32), jnp.asarray(zero_kv_mask, bool))


def combine(payload, *, dtype):
    """payload ``[cp(src), T, Hc, W]`` -> ``(out [T, Hc, D] in dtype, lse [T, Hc] float32)``."""
    _check_dtype(dtype, "the activation dtype")
    _ensure()
    _, t, hc, w = payload.shape
    d = w - pad_elems(dtype)
    outs = (jax.ShapeDtypeStruct((t, hc, d), jnp.dtype(dtype)), jax.ShapeDtypeStruct((t, hc), jnp.float32))
    return jax.ffi.ffi_call(COMBINE_TARGET, outs, vmap_method="sequential")(payload)

