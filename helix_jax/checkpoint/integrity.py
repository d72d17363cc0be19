"""Integrity primitives for checkpoints: layout-independent array fingerprints, file digests,
model-config hashing.

An array fingerprint is two 32-bit sums of hashed ``(element bits, linear index)`` pairs. The sums
wrap mod 2**32, so they are associative and commutative: the value does not depend on how the array
is sharded or on the reduction order, and it is computed on the devices (only 8 bytes reach the host).
Changing any single element changes both sums with certainty (the mixer is a bijection).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["fingerprint", "fingerprints", "file_digests", "config_dict", "config_hash"]

_M1, _M2 = 0x85EBCA6B, 0xC2B2AE35          # murmur3 fmix32 constants
_SEED_A, _SEED_B, _ODD = 0x9E3779B9, 0x7F4A7C15, 0x27D4EB2F


def _fmix(h, xp):
    h = h ^ (h >> 16)
    h = h * xp.uint32(_M1)
    h = h ^ (h >> 13)
    h = h * xp.uint32(_M2)
    return h ^ (h >> 16)


def _sums(words, xp):
    """``words``: uint32 array (any shape). Returns the two wrapped sums as uint32 scalars."""
    idx = xp.arange(words.size, dtype=xp.uint32).reshape(words.shape)
    h1 = _fmix(words ^ _fmix(idx + xp.uint32(_SEED_A), xp), xp)
    h2 = _fmix((words * xp.uint32(_ODD)) ^ _fmix(idx + xp.uint32(_SEED_B), xp), xp)
    return xp.sum(h1, dtype=xp.uint32), xp.sum(h2, dtype=xp.uint32)


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def _np_words(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    if x.dtype == np.bool_:
        return x.astype(np.uint32)
    size = x.dtype.itemsize
    if size == 8:
        return x.view(np.uint32).reshape(x.shape + (2,))
    if size not in _UINT:
        raise ValueError(f"fingerprint: unsupported dtype {x.dtype}")
    return x.view(_UINT[size]).astype(np.uint32)


def _jax_words(x):
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32)
    size = x.dtype.itemsize
    if size == 8:
        return jax.lax.bitcast_convert_type(x, jnp.uint32)
    if size not in _UINT:
        raise ValueError(f"fingerprint: unsupported dtype {x.dtype}")
    return jax.lax.bitcast_convert_type(x, _UINT[size]).astype(jnp.uint32)


@jax.jit
def _jax_fingerprints(xs):
    return jnp.stack([jnp.stack(_sums(_jax_words(x), jnp)) for x in xs]) if xs else jnp.zeros((0, 2), jnp.uint32)


def _hex(a, b) -> str:
    return f"{int(a):08x}{int(b):08x}"


HOST_BYTES = 1 << 20   # smaller single-host arrays are hashed on the host: cheaper than a compile


def _on_device(x, host_bytes) -> bool:
    return isinstance(x, jax.Array) and (x.nbytes > host_bytes or not x.is_fully_addressable
                                         or jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key))


def fingerprints(xs, *, host_bytes: int = HOST_BYTES) -> list[str]:
    """:func:`fingerprint` of many arrays. jax arrays above ``host_bytes`` (the KV pools) are reduced
    on their devices, together in one compiled call per device set; small ones on the host."""
    xs = list(xs)
    out: list[str | None] = [None] * len(xs)
    dev = [i for i, x in enumerate(xs) if _on_device(x, host_bytes)]
    for i in dev:
        if jax.dtypes.issubdtype(xs[i].dtype, jax.dtypes.prng_key):
            raise ValueError("fingerprint: pass jax.random.key_data(key), not a typed key array")
    groups: dict = {}   # one compiled call per device set (jit cannot mix meshes)
    for i in dev:
        groups.setdefault(frozenset(xs[i].sharding.device_set), []).append(i)
    for idx in groups.values():
        sums = np.asarray(_jax_fingerprints([xs[i] for i in idx]))
        for i, (a, b) in zip(idx, sums):
            out[i] = _hex(a, b)
    for i, x in enumerate(xs):
        if out[i] is None:
            with np.errstate(over="ignore"):
                out[i] = _hex(*_sums(_np_words(np.asarray(x)), np))
    return out


def fingerprint(x, *, host_bytes: int = HOST_BYTES) -> str:
    """16 hex digits identifying the exact bits of ``x`` (a jax or numpy array), layout-independent.

    Large jax arrays are reduced on their devices; numpy arrays, scalars and small arrays on the
    host; both give the same value for the same bits.
    """
    return fingerprints([x], host_bytes=host_bytes)[0]


def file_digests(root: Path) -> dict[str, dict]:
    """``{relative posix path: {"size", "sha256"}}`` for every file under ``root`` (sorted)."""
    root = Path(root)
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        out[path.relative_to(root).as_posix()] = {"size": os.path.getsize(path), "sha256": h.hexdigest()}
    return out


def config_dict(config) -> dict | None:
    """A JSON-safe dict of a model config (dict, dataclass, NamedTuple or ``to_dict()`` object)."""
    if config is None:
        return None
    if isinstance(config, dict):
        d = dict(config)
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        d = dataclasses.asdict(config)
    elif hasattr(config, "_asdict"):
        d = config._asdict()
    elif hasattr(config, "to_dict"):
        d = config.to_dict()
    else:
        raise ValueError(
            f"model_config must be a dict, dataclass, NamedTuple or have to_dict(), got {type(config).__name__}")
    return json.loads(json.dumps(d, sort_keys=True, default=str))


def config_hash(config) -> str | None:
    d = config_dict(config)
    if d is None:
        return None
    return hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
