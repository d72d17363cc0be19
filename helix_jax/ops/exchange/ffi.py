"""XLA FFI backend of the Helix exchange: targets ``helix_sanitize_pack``, ``helix_combine`` and the
peer transport ``helix_exchange_peer``.

Handlers: ``ffi/src/exchange_cpu.cc`` (CI) and ``ffi/src/exchange_cuda.cu`` (16-byte-vector CUDA
kernels). Payload layout as in :mod:`.reference` (bit-identical). Call inside ``shard_map``.

``helix_exchange_peer`` is the whole exchange for the devices of one process: each rank publishes
its receive buffer to its group (host rendezvous keyed by XLA's run id, ``ffi/src/peer_rendezvous.h``),
stores its sanitized, packed rows straight into the peers' buffers (on GPU: NVLink peer stores into
two library-owned buffers used alternately, then per-block done flags; on CPU: memcpy and a host
barrier) and combines its own buffer. Its outputs equal ``combine(lax.all_to_all(sanitize_pack(...)))``
bit for bit.
"""
from __future__ import annotations

import ctypes
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ... import _ffi
from .reference import container_dtype, pad_elems

PACK_TARGET = "helix_sanitize_pack"
COMBINE_TARGET = "helix_combine"
PEER_TARGET = "helix_exchange_peer"
_SYMBOLS = {PACK_TARGET: ("HelixSanitizePackCpu", "HelixSanitizePackCuda"),
            COMBINE_TARGET: ("HelixCombineCpu", "HelixCombineCuda")}
_PEER_SYMBOLS = ("HelixExchangePeerCpu", "HelixExchangePeerCuda")
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


def peer_availability(platform, groups=None):
    """``(ok, reason)``: the peer exchange handler for ``platform`` is built and loadable and, on GPU,
    every device of each group in ``groups`` can reach the others' memory directly."""
    cpu, cuda = _PEER_SYMBOLS
    ok, why = _ffi.target_availability(platform, cpu_symbol=cpu, cuda_symbol=cuda)
    if not ok or platform not in ("gpu", "cuda") or groups is None:
        return ok, why
    for row in groups:
        if not _peer_accessible(tuple(int(x) for x in row)):
            return False, f"GPUs {list(row)} cannot access each other's memory directly (no peer-to-peer)"
    return True, ""


@functools.cache
def _peer_accessible(ordinals: tuple) -> bool:
    fn = _ffi.load_library("cuda").HelixPeerAccessible
    fn.restype = ctypes.c_int
    arr = (ctypes.c_int64 * len(ordinals))(*ordinals)
    return bool(fn(arr, len(ordinals)))


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



def exchange_peer(partial_out, lse, zero_kv_mask, *, peer_groups, timeout_s: float = PEER_TIMEOUT_S):
    """Sanitize + pack + all-to-all + combine in one custom call (peer transport).

    partial_out ``[T, H, D]``, lse ``[T, H]``, zero_kv_mask ``[T]`` -> ``(out [T, H//cp, D] in
    partial_out's dtype, lse [T, H//cp] float32)`` for this rank's head group; ``peer_groups``: tuple
    of cp-tuples of local device ordinals, one per cp group, in rank order
    (:func:`helix_jax.ops.exchange.peer_groups`).
    """
    _check_dtype(partial_out.dtype, "partial_out")
    cpu, cuda = _PEER_SYMBOLS
    _ffi.ensure_target(PEER_TARGET, cpu_symbol=cpu, cuda_symbol=cuda)
    groups = np.asarray(peer_groups, np.int64)
    cp = groups.shape[1]
    t, h, d = partial_out.shape
    outs = (jax.ShapeDtypeStruct((t, h // cp, d), partial_out.dtype), jax.ShapeDtypeStruct((t, h // cp), jnp.float32))
    return jax.ffi.ffi_call(PEER_TARGET, outs, vmap_method="sequential")(
        partial_out, lse.astype(jnp.float32), jnp.asarray(zero_kv_mask, bool),
        groups=groups.reshape(-1), cp=np.int64(cp), timeout_s=float(timeout_s))
