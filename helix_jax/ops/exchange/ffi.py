"""XLA FFI backend of the Helix exchange: targets ``helix_sanitize_pack``, ``helix_combine`` and the
peer transport ``helix_pack_all_to_all``.

Handlers: ``ffi/src/exchange_cpu.cc`` (CI) and ``ffi/src/exchange_cuda.cu`` (16-byte-vector CUDA
kernels). Payload layout as in :mod:`.reference` (bit-identical). Call inside ``shard_map``.

``helix_pack_all_to_all`` fuses sanitize + pack with the all-to-all for the devices of one process:
each rank publishes its receive buffer to its group (host rendezvous keyed by XLA's run id,
``ffi/src/peer_rendezvous.h``) and stores its rows straight into the peers' buffers (on GPU over
NVLink with peer access, with a device-side arrive/done flag handshake per block; on CPU with
memcpy). Its output equals ``lax.all_to_all(sanitize_pack(...), axis, 0, 0, tiled=True)``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ... import _ffi
from .reference import container_dtype, pad_elems

PACK_TARGET = "helix_sanitize_pack"
COMBINE_TARGET = "helix_combine"
A2A_TARGET = "helix_pack_all_to_all"
_SYMBOLS = {PACK_TARGET: ("HelixSanitizePackCpu", "HelixSanitizePackCuda"),
            COMBINE_TARGET: ("HelixCombineCpu", "HelixCombineCuda")}
_A2A_SYMBOLS = ("HelixPackAllToAllCpu", "HelixPackAllToAllCuda")
MAX_PEER_RANKS = 8  # peer_rendezvous.h kMaxRanks
PEER_TIMEOUT_S = 120.0
DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float32))


def availability(platform):
    """``(ok, reason)``: both targets' handlers for ``platform`` are built and loadable."""
    for cpu, cuda in _SYMBOLS.values():
        ok, why = _ffi.target_availability(platform, cpu_symbol=cpu, cuda_symbol=cuda)
        if not ok:
            return ok, why
    return True, ""


def peer_availability(platform):
    """``(ok, reason)``: the peer all-to-all handler for ``platform`` is built and loadable."""
    cpu, cuda = _A2A_SYMBOLS
    return _ffi.target_availability(platform, cpu_symbol=cpu, cuda_symbol=cuda)


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



def pack_all_to_all(partial_out, lse, zero_kv_mask, *, peer_groups, timeout_s: float = PEER_TIMEOUT_S):
    """Sanitize + pack + all-to-all in one custom call (peer transport).

    partial_out ``[T, H, D]``, lse ``[T, H]``, zero_kv_mask ``[T]`` -> received payload
    ``[cp(src), T, H//cp, D+pad]``; ``peer_groups``: tuple of cp-tuples of local device ordinals,
    one per cp group, in rank order (see :func:`helix_jax.exchange.peer_groups`).
    """
    _check_dtype(partial_out.dtype, "partial_out")
    cpu, cuda = _A2A_SYMBOLS
    _ffi.ensure_target(A2A_TARGET, cpu_symbol=cpu, cuda_symbol=cuda)
    groups = np.asarray(peer_groups, np.int64)
    cp = groups.shape[1]
    t, h, d = partial_out.shape
    out = jax.ShapeDtypeStruct((cp, t, h // cp, d + pad_elems(partial_out.dtype)),
                               container_dtype(partial_out.dtype))
    return jax.ffi.ffi_call(A2A_TARGET, out, vmap_method="sequential")(
        partial_out, lse.astype(jnp.float32), jnp.asarray(zero_kv_mask, bool),
        groups=groups.reshape(-1), cp=np.int64(cp), timeout_s=float(timeout_s))
