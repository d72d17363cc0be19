"""Public bounded MLA decode with one dispatch point over its backends.

Backends, in the order ``implementation=None`` tries them:
  ``ffi``       XLA FFI custom call (CUDA kernel on Hopper, C++ handler on CPU); needs the built library.
  ``pallas``    Pallas kernel (GPU; ``interpret=True`` on CPU for tests).
  ``reference`` pure jnp (alias ``xla``); always available.
``None`` picks the first backend available on the platform that it is *preferred* on (ffi and
pallas only auto-select on GPU) and logs the choice at debug level. An explicit name that cannot
run raises with the reason.

KV formats: a backend module declares the page formats it decodes in ``SUPPORTED_KV_DTYPES``
(default ``("bf16",)`` = unquantized float pages when absent). Quantized pages
(``FP8Pages``/``NVFP4Pages``) go to ``module.mla_decode_quantized(q_latent, q_rope, pages,
page_table, kv_bounds, softmax_scale)``; auto-selection skips backends that do not support the
format (falling back to ``reference``), an explicit one raises ``ValueError``.
"""
from __future__ import annotations

import importlib
import logging

import jax
import jax.numpy as jnp
import numpy as np

from ...cache import FP8Pages, MLAPages, NVFP4Pages, kv_format
from . import reference

log = logging.getLogger("helix_jax.ops.mla_decode")

BACKENDS = ("ffi", "pallas", "reference")
_ALIASES = {"xla": "reference", "jnp": "reference"}


def _backend_module(name):
    if name == "reference":
        return reference
    try:
        return importlib.import_module(f".{name}", __package__)
    except ImportError as e:  # pragma: no cover - backend file missing
        raise ValueError(f"mla_decode backend {name!r} is not part of this installation: {e}") from e


def _platform():
    return jax.default_backend()


def supported_kv_dtypes(module) -> tuple:
    """KV formats a backend module decodes (its ``SUPPORTED_KV_DTYPES``, default ``("bf16",)``)."""
    return tuple(getattr(module, "SUPPORTED_KV_DTYPES", ("bf16",)))


def _operand_problem(mod, platform, q_latent, pages):
    """Why ``mod`` cannot take these operands (its optional ``check_operands`` hook), or None."""
    if isinstance(pages, MLAPages):
        check, args = getattr(mod, "check_operands", None), (platform, q_latent, pages.c_latent, pages.k_rope)
    else:  # quantized pages: optional ``check_quantized_operands(platform, q_latent, pages)``
        check, args = getattr(mod, "check_quantized_operands", None), (platform, q_latent, pages)
    if check is None or pages is None:
        return None
    try:
        check(*args)
    except ValueError as e:
        return str(e)
    return None


def _resolve(implementation, platform, kv_dtype="bf16", q_latent=None, pages=None):
    if implementation is not None:
        name = _ALIASES.get(implementation, implementation)
        if name not in BACKENDS:
            raise ValueError(f"implementation must be one of {BACKENDS + tuple(_ALIASES)} or None, got {implementation!r}")
        if name != "reference":
            mod = _backend_module(name)
            ok, why = mod.availability(platform)
            if not ok:
                raise ValueError(f"mla_decode implementation={name!r} cannot run on {platform}: {why}")
            if kv_dtype not in supported_kv_dtypes(mod):
                raise ValueError(f"mla_decode implementation={name!r} does not support {kv_dtype!r} KV pages "
                                 f"(it supports {supported_kv_dtypes(mod)}); use implementation='reference' "
                                 "or None")
            why = _operand_problem(mod, platform, q_latent, pages)
            if why:
                raise ValueError(why)
        return name
    for name in BACKENDS:
        if name == "reference":
            break
        try:
            mod = _backend_module(name)
        except ValueError:
            continue
        ok, why = mod.availability(platform)
        if ok and kv_dtype not in supported_kv_dtypes(mod):
            ok, why = False, f"no {kv_dtype} support"
        if ok:
            problem = _operand_problem(mod, platform, q_latent, pages)
            if problem:
                ok, why = False, problem
        if ok and mod.preferred(platform):
            log.debug("mla_decode: using %s on %s", name, platform)
            return name
        log.debug("mla_decode: skipping %s on %s (%s)", name, platform, why if not ok else "not preferred")
    log.debug("mla_decode: using reference on %s", platform)
    return "reference"


def _validate_quantized(pages, dl, dr):
    """Shapes/dtypes of FP8Pages / NVFP4Pages against the queries' ``Dl``/``Dr``; returns ``(N, P)``."""
    fmt = kv_format(pages)
    for f, x in zip(pages._fields, pages):
        if not hasattr(x, "ndim"):
            raise ValueError(f"pages.{f} must be an array, got {type(x).__name__}")
    n, p = pages.c_latent.shape[:2] if pages.c_latent.ndim == 3 else (None, None)
    if fmt == "fp8_e4m3":
        want = {"c_latent": ((n, p, dl), jnp.float8_e4m3fn), "k_rope": ((n, p, dr), jnp.float8_e4m3fn)}
        scalars = ("scale",)
    else:
        if dl % 16 or dr % 16:
            raise ValueError(f"nvfp4 pages need Dl and Dr divisible by 16, got {dl}, {dr}")
        want = {"c_latent": ((n, p, dl // 2), jnp.uint8), "k_rope": ((n, p, dr // 2), jnp.uint8),
                "c_latent_sf": ((n, p, dl // 16), jnp.float8_e4m3fn),
                "k_rope_sf": ((n, p, dr // 16), jnp.float8_e4m3fn)}
        scalars = ("global_scale",)
    for f, (shape, dtype) in want.items():
        x = getattr(pages, f)
        if tuple(x.shape) != shape or x.dtype != dtype:
            raise ValueError(f"{fmt} pages.{f} must be {jnp.dtype(dtype).name} of shape {list(shape)} "
                             f"(N, P from c_latent), got {x.dtype} {list(x.shape)}")
    for f in scalars:
        x = getattr(pages, f)
        if x.size != 1 or x.dtype != jnp.float32:
            raise ValueError(f"{fmt} pages.{f} must be one float32 (shape [] or [1]), got {x.dtype} {list(x.shape)}")
    return n, p


def _validate(q_latent, q_rope, pages, page_table, kv_bounds, softmax_scale):
    if isinstance(pages, (FP8Pages, NVFP4Pages)):
        c_lat = k_rope = None
    elif not isinstance(pages, tuple) or len(pages) != 2:
        raise ValueError("pages must be an MLAPages(c_latent [N, P, Dl], k_rope [N, P, Dr]) pair, "
                         "FP8Pages or NVFP4Pages")
    else:
        c_lat, k_rope = pages
    for name, x, nd in (("q_latent", q_latent, 4), ("q_rope", q_rope, 4),
                        ("pages.c_latent", pages[0], 3), ("pages.k_rope", pages[1], 3),
                        ("page_table", page_table, 2), ("kv_bounds", kv_bounds, 2)):
        if getattr(x, "ndim", None) != nd:
            raise ValueError(f"{name} must be a rank-{nd} array, got shape {getattr(x, 'shape', type(x))}")
    b, g, h, dl = q_latent.shape
    dr = q_rope.shape[-1]
    if q_rope.shape[:3] != (b, g, h):
        raise ValueError(f"q_rope must have shape [B, G, H, Dr] with [B, G, H]={(b, g, h)}, got {q_rope.shape}")
    if c_lat is None:
        n, p = _validate_quantized(pages, dl, dr)
    else:
        n, p = c_lat.shape[:2]
        if c_lat.shape[2] != dl:
            raise ValueError(f"pages.c_latent last dim must equal q_latent's Dl={dl}, got {c_lat.shape}")
        if k_rope.shape != (n, p, dr):
            raise ValueError(f"pages.k_rope must have shape {(n, p, dr)}, got {k_rope.shape}")
    if page_table.shape[0] != b:
        raise ValueError(f"page_table must have shape [B={b}, pages_per_seq], got {page_table.shape}")
    if kv_bounds.shape != (b, g):
        raise ValueError(f"kv_bounds must have shape [B, G]={(b, g)}, got {kv_bounds.shape}")
    floats = (("q_latent", q_latent), ("q_rope", q_rope))
    if c_lat is not None:
        floats += (("pages.c_latent", c_lat), ("pages.k_rope", k_rope))
    for name, x in floats:
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(f"{name} must be floating point, got {x.dtype}")
    if q_rope.dtype != q_latent.dtype:
        raise ValueError(f"q_rope dtype {q_rope.dtype} must equal q_latent dtype {q_latent.dtype}")
    for name, x in (("page_table", page_table), ("kv_bounds", kv_bounds)):
        if not jnp.issubdtype(x.dtype, jnp.integer):
            raise ValueError(f"{name} must be an integer array, got {x.dtype}")
    scale = float(softmax_scale) if not isinstance(softmax_scale, jax.core.Tracer) else None
    if scale is not None and not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"softmax_scale must be a finite positive float, got {softmax_scale!r}")
    try:
        hb = np.asarray(kv_bounds)
    except Exception:  # traced: checked by the caller's metadata
        return
    cap = page_table.shape[1] * p
    if hb.size and (hb.min() < 0 or hb.max() > cap):
        raise ValueError(f"kv_bounds must lie in [0, pages_per_seq*page_size={cap}], got range [{hb.min()}, {hb.max()}]")


def mla_decode(q_latent, q_rope, pages, page_table, *, kv_bounds, softmax_scale, implementation=None):
    """Bounded absorbed-MLA decode of one rank's paged KV (§5.1).

    Args:
      q_latent: ``[B, G, H, 512]`` queries already multiplied by ``W_UK``.
      q_rope: ``[B, G, H, 64]`` RoPE'd queries.
      pages: this rank's pages: :class:`MLAPages` (``c_latent [N, P, 512]``, ``k_rope [N, P, 64]``),
        or quantized :class:`FP8Pages` / :class:`NVFP4Pages` (see ``helix_jax.cache``).
      page_table: ``[B, pages_per_seq]`` int local page ids.
      kv_bounds: ``[B, G]`` keyword-only; token (b, g) sees local entries ``[0, kv_bounds[b, g])``.
      softmax_scale: logit scale (``1/sqrt(192)`` for DeepSeek-V3 without YaRN).
      implementation: ``None`` (auto), ``"ffi"``, ``"pallas"``, ``"reference"``/``"xla"``.

    Returns:
      ``(partial_out [B, G, H, 512] in q_latent.dtype, lse [B, G, H] float32)``, natural-log LSE;
      rows with bound 0 give the identity ``(0, -inf)``.
    """
    pages = MLAPages(*pages) if isinstance(pages, tuple) and not isinstance(pages, MLAPages) and len(pages) == 2 else pages
    q_latent, q_rope = jnp.asarray(q_latent), jnp.asarray(q_rope)
    page_table, kv_bounds = jnp.asarray(page_table), jnp.asarray(kv_bounds)
    _validate(q_latent, q_rope, pages, page_table, kv_bounds, softmax_scale)
    fmt = kv_format(pages)
    name = _resolve(implementation, _platform(), fmt, q_latent, pages)
    if fmt != "bf16":
        mod = reference if name == "reference" else _backend_module(name)
        return mod.mla_decode_quantized(q_latent, q_rope, pages, page_table.astype(jnp.int32),
                                        kv_bounds.astype(jnp.int32), softmax_scale)
    if name == "reference":
        return reference.mla_decode(q_latent, q_rope, pages.c_latent, pages.k_rope,
                                    page_table.astype(jnp.int32), kv_bounds.astype(jnp.int32), softmax_scale)
    return _backend_module(name).mla_decode(
        q_latent, q_rope, pages.c_latent, pages.k_rope, page_table.astype(jnp.int32),
        kv_bounds.astype(jnp.int32), softmax_scale)
