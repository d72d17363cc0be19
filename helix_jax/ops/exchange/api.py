"""Public Helix exchange (sanitize + pack -> all-to-all -> combine), one dispatch point.

Backends, in the order ``implementation=None`` tries them:
  ``ffi``        XLA FFI custom calls ``helix_sanitize_pack`` / ``helix_combine`` (CUDA kernels on
                 GPU, C++ on CPU); auto-selected on GPU only.
  ``reference``  pure jnp (alias ``xla``); the default on CPU.
Both produce the same payload bits (see :mod:`.reference` for the layout). An explicit backend
that cannot run raises ``ValueError`` with the reason.

Transports of the all-to-all (``transport=``):
  ``collective`` ``lax.all_to_all`` of the packed payload (XLA -> NCCL on GPU, gloo across processes).
  ``peer``       the custom call ``helix_exchange_peer``: sanitize + pack stored straight into the
                 peers' receive buffers (NVLink peer stores on GPU), then the combine, in one call;
                 devices of one process only, named by ``peer_groups`` (:func:`peer_groups`). Same
                 output bits.
``transport=None`` picks ``peer`` on GPU with the ffi backend when ``peer_groups`` is given (it is
measured faster there: ``benchmarks/NOTES.md``), else ``collective``.
"""
from __future__ import annotations

import importlib
import logging
import math

import jax
import jax.numpy as jnp
import numpy as np

from . import reference

log = logging.getLogger("helix_jax.ops.exchange")

BACKENDS = ("ffi", "reference")
TRANSPORTS = ("collective", "peer")
_ALIASES = {"xla": "reference", "jnp": "reference"}


def _backend_module(name):
    if name == "reference":
        return reference
    return importlib.import_module(f".{name}", __package__)


def resolve(implementation, platform=None):
    """The backend name ``implementation`` selects on ``platform`` (default: JAX's default backend)."""
    platform = jax.default_backend() if platform is None else platform
    if implementation is not None:
        name = _ALIASES.get(implementation, implementation)
        if name not in BACKENDS:
            raise ValueError(f"implementation must be one of {BACKENDS + tuple(_ALIASES)} or None, "
                             f"got {implementation!r}")
        if name != "reference":
            ok, why = _backend_module(name).availability(platform)
            if not ok:
                raise ValueError(f"exchange implementation={name!r} cannot run on {platform}: {why}")
        return name
    mod = _backend_module("ffi")
    ok, why = mod.availability(platform)
    if ok and mod.preferred(platform):
        log.debug("exchange: using ffi on %s", platform)
        return "ffi"
    log.debug("exchange: using reference on %s (%s)", platform, why if not ok else "ffi not preferred")
    return "reference"


def peer_groups(mesh, axis_name: str):
    """The peer transport's device table for ``mesh``: one tuple of local device ordinals per group of
    devices that differ only along ``axis_name``, in rank order. ``None`` when a device of the mesh
    belongs to another process (the peer transport then cannot be used)."""
    if axis_name not in mesh.axis_names:
        raise ValueError(f"axis_name {axis_name!r} is not an axis of the mesh {mesh.axis_names}")
    devs = np.moveaxis(np.asarray(mesh.devices), mesh.axis_names.index(axis_name), -1)
    me = jax.process_index()
    if any(d.process_index != me for d in devs.ravel()):
        return None
    ordinal = np.vectorize(lambda d: d.id if d.local_hardware_id is None else d.local_hardware_id, otypes=[np.int64])
    return tuple(tuple(int(x) for x in row) for row in ordinal(devs).reshape(-1, devs.shape[-1]))


def resolve_transport(transport, *, implementation: str, cp_size: int, peer_groups=None, platform=None):
    """The all-to-all transport ``transport`` selects (see the module docstring); explicit choices
    that cannot run raise ``ValueError`` with the reason."""
    platform = jax.default_backend() if platform is None else platform
    if transport not in (None,) + TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS} or None, got {transport!r}")
    if transport == "collective" or (transport is None and platform not in ("gpu", "cuda")):
        return "collective"  # nothing to probe
    why = _peer_problem(implementation, cp_size, peer_groups, platform)
    if transport == "peer":
        if why:
            raise ValueError(f"transport='peer' cannot run: {why}")
        return "peer"
    if why:
        log.debug("exchange: collective transport (%s)", why)
        return "collective"
    log.debug("exchange: peer transport")
    return "peer"


def _peer_problem(implementation, cp_size, groups, platform):
    if implementation != "ffi":
        return f"it is part of the ffi backend, not {implementation!r}"
    if groups is None:
        return ("it needs peer_groups (the mesh's local device ordinals per cp group: "
                "helix_jax.ops.exchange.peer_groups(mesh, axis_name)); a mesh spanning processes has none")
    g = np.asarray(groups)
    if g.ndim != 2 or g.shape[1] != cp_size or g.size == 0 or not np.issubdtype(g.dtype, np.integer):
        return f"peer_groups must be a non-empty [num_groups, cp={cp_size}] table of ints, got {groups!r}"
    if len(set(g.ravel().tolist())) != g.size:
        return f"peer_groups lists a device twice: {groups!r}"
    from . import ffi
    if cp_size > ffi.MAX_PEER_RANKS:
        return f"cp_size={cp_size} exceeds the peer transport's {ffi.MAX_PEER_RANKS} ranks"
    ok, reason = ffi.peer_availability(platform, g.tolist())
    return "" if ok else reason


def _check_float(name, x):
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{name} must be floating point, got {x.dtype}")


def _check_cp(cp_size, heads):
    if isinstance(cp_size, bool) or not isinstance(cp_size, int) or cp_size < 1:
        raise ValueError(f"cp_size must be an int >= 1, got {cp_size!r}")
    if heads % cp_size:
        raise ValueError(f"heads H={heads} must be divisible by cp_size={cp_size}")


def _pack_operands(partial_out, lse, zero_kv_mask, cp_size):
    partial_out, lse = jnp.asarray(partial_out), jnp.asarray(lse)
    if partial_out.ndim != 3:
        raise ValueError(f"partial_out must have shape [T, H, D], got {partial_out.shape}")
    t, h, d = partial_out.shape
    _check_float("partial_out", partial_out)
    _check_cp(cp_size, h)
    if lse.shape != (t, h):
        raise ValueError(f"lse must have shape [T, H]={[t, h]}, got {list(lse.shape)}")
    if (d * partial_out.dtype.itemsize) % 16:
        raise ValueError(f"partial_out rows must be a multiple of 16 bytes, got D={d} in {partial_out.dtype}")
    mask = jnp.zeros((t,), bool) if zero_kv_mask is None else jnp.asarray(zero_kv_mask)
    if mask.shape != (t,) or mask.dtype != jnp.bool_:
        raise ValueError(f"zero_kv_mask must be a bool array of shape [T]={[t]} or None, got "
                         f"{mask.dtype} {list(mask.shape)}")
    return partial_out, lse, mask


def sanitize_pack(partial_out, lse, zero_kv_mask, *, cp_size: int, implementation=None):
    """Zero-KV sanitize fused with packing into one all-to-all payload (§6.3).

    Args:
      partial_out: ``[T, H, D]`` partial attention output (activation dtype).
      lse: ``[T, H]`` natural-log LSE of each partial.
      zero_kv_mask: ``[T]`` bool (``kv_bounds == 0``) or ``None`` (pass-through). Masked tokens'
        rows become ``(0, -inf)`` whatever they held (R11).
      cp_size: number of head groups; ``H % cp_size == 0``.

    Returns:
      payload ``[cp, T, H // cp, D + 16 // itemsize]`` (uint container of the activation width).
    """
    partial_out, lse, mask = _pack_operands(partial_out, lse, zero_kv_mask, cp_size)
    name = resolve(implementation)
    return _backend_module(name).sanitize_pack(partial_out, lse, mask, cp_size=cp_size)


def combine_payload(payload, *, dtype, implementation=None):
    """LSE combine of a received payload ``[cp(src), T, Hc, W]`` (§7).

    Returns ``(out [T, Hc, D] in dtype, lse [T, Hc] float32)``: fp32 accumulation, empty partials
    contribute exactly 0, all-empty rows give 0 and ``-inf``.
    """
    payload = jnp.asarray(payload)
    dtype = jnp.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"dtype must be a floating dtype, got {dtype}")
    if payload.ndim != 4:
        raise ValueError(f"payload must have shape [cp, T, Hc, W], got {payload.shape}")
    if payload.dtype != reference.container_dtype(dtype):
        raise ValueError(f"payload must be {reference.container_dtype(dtype)} for dtype {dtype}, got {payload.dtype}")
    if payload.shape[-1] <= reference.pad_elems(dtype):
        raise ValueError(f"payload last dim must exceed the pad {reference.pad_elems(dtype)}, got {payload.shape}")
    name = resolve(implementation)
    return _backend_module(name).combine(payload, dtype=dtype)


def exchange(partial_out, lse, zero_kv_mask, *, axis_name: str, cp_size: int, implementation=None,
             transport=None, peer_groups=None):
    """Per-rank Helix exchange inside ``shard_map``: sanitize+pack -> one all-to-all -> combine.

    Args:
      partial_out: ``[..., H, D]`` (e.g. ``[B, G, H, 512]``) this rank's partial over its KV shard.
      lse: ``[..., H]``; zero_kv_mask: ``[...]`` bool or ``None``.
      axis_name / cp_size: the mesh axis of the cp ranks and its size.
      implementation: backend of pack/combine (module docstring).
      transport: ``"collective"``, ``"peer"`` or ``None`` (module docstring); ``peer_groups``: the
        table :func:`peer_groups` returns for the mesh (needed by ``"peer"``).

    Returns:
      ``(out [..., Hc, D], lse [..., Hc])`` for this rank's head group ``axis_index * Hc + [0, Hc)``.
    """
    partial_out, lse = jnp.asarray(partial_out), jnp.asarray(lse)
    if partial_out.ndim < 2 or lse.shape != partial_out.shape[:-1]:
        raise ValueError(f"lse must have shape partial_out.shape[:-1]; got {partial_out.shape} and {lse.shape}")
    lead, (h, d) = partial_out.shape[:-2], partial_out.shape[-2:]
    _check_cp(cp_size, h)
    t = math.prod(lead)
    if zero_kv_mask is not None:
        zero_kv_mask = jnp.asarray(zero_kv_mask)
        if zero_kv_mask.shape != lead:
            raise ValueError(f"zero_kv_mask must have shape {list(lead)}, got {list(zero_kv_mask.shape)}")
        zero_kv_mask = zero_kv_mask.reshape(t)
    name = resolve(implementation)
    hc = h // cp_size
    if cp_size > 1 and resolve_transport(transport, implementation=name, cp_size=cp_size,
                                         peer_groups=peer_groups) == "peer":
        from . import ffi
        out, lse_out = ffi.exchange_peer(*_pack_operands(partial_out.reshape(t, h, d), lse.reshape(t, h),
                                                         zero_kv_mask, cp_size), peer_groups=peer_groups)
        return out.reshape(*lead, hc, d), lse_out.reshape(*lead, hc)
    payload = sanitize_pack(partial_out.reshape(t, h, d), lse.reshape(t, h), zero_kv_mask,
                            cp_size=cp_size, implementation=name)
    if cp_size > 1:
        payload = jax.lax.all_to_all(payload, axis_name, 0, 0, tiled=True)
    out, lse_out = combine_payload(payload, dtype=partial_out.dtype, implementation=name)
    return out.reshape(*lead, hc, d), lse_out.reshape(*lead, hc)
