"""Low-precision MLA KV formats (HELIX_SEMANTICS.md §10): FP8 E4M3 and NVFP4, in pure jnp.

Every function here is jit-able; conversions use the ``ml_dtypes`` types that jax exposes
(``jnp.float8_e4m3fn``, ``jnp.float4_e2m1fn``), i.e. round-to-nearest-even. Values are clipped to the
format's largest finite value *before* the cast, so out-of-range inputs saturate (E4M3 ``fn`` has no
infinity and XLA's cast would turn them into NaN). Arithmetic is float32 throughout, and every
division by a scale is written as a multiplication by its float32 reciprocal (``fl32(1/s)``): that
is what XLA emits for a division by a broadcast anyway, and what a kernel does, so the formulas
below are bit-exact specifications.

NVFP4 quantization is written so that XLA cannot change its result on any backend (see
``benchmarks/nvfp4_gpu_diag.py``): XLA:GPU deletes cast round trips such as ``f32 -> e2m1 -> f32``
(``SimplifyFPConversions`` under the default ``xla_allow_excess_precision``) and lowers f32 division
to the approximate ``div.full.f32``, and every backend rewrites ``v / 6`` as ``v * fl32(1/6)``. So E2M1
rounding is done by comparisons, ``sf`` / ``fl32(1/sf)`` come from tables indexed by the scale's
code, and the ``/ 6`` of the block scale is corrected exactly (``_nvfp4_scale_codes``); the results
are those of the formulas below with a true, correctly rounded division.

FP8 E4M3, per-tensor scale (§10.2)
  ``q = RNE_e4m3(clip(fl32(x * scale), -448, 448))``; ``x ≈ fl32(q * fl32(1 / scale))``. One float32 ``scale``
  (orig -> quant, TRT-LLM's ``kv_scale_orig_quant``) covers the whole 576-value row
  ``[latent 512 | rope 64]``. Derived from data: ``scale = 448 / amax(|x|)``.

NVFP4 (§10.3)
  E2M1 elements (``±{0, .5, 1, 1.5, 2, 3, 4, 6}``) in 16-element blocks along the feature dim, one
  E4M3 block scale ``sf`` per block, one float32 ``global_scale`` per tensor (orig -> quant).
  Derived from data: ``global_scale = 448 * 6 / amax(|x|)``; static default (§10.3)
  ``NVFP4_KV_GLOBAL_SCALE = 2688 / 30 = 89.6``.

    sf   = RNE_e4m3(clip(fl32(amax(|block|) * global_scale) / 6, 0, 448))
    e    = RNE_e2m1(clip(fl32(fl32(x * global_scale) * fl32(1 / sf)), -6, 6))  (0 where sf == 0)
    x   ≈ fl32(e * sf) * fl32(1 / global_scale)                  (e * sf is exact in f32)

  Storage: elements are **packed two per byte in uint8** — element ``2k`` in the low nibble and
  ``2k+1`` in the high nibble of byte ``k`` (the order of CUDA's ``__nv_fp4x2_e2m1``) — with the
  4-bit code ``sign<<3 | exponent<<1 | mantissa``. uint8 rather than ``jnp.float4_e2m1fn``
  because numpy/ml_dtypes and XLA's CPU runtime store a float4 array one element per byte, so the
  byte layout a kernel or an FFI handler sees would depend on the backend; packed uint8 has one
  unambiguous layout and its true size (half a byte per value). Block scales are stored as
  ``float8_e4m3fn`` (one byte each).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = [
    "KV_DTYPES", "FP8_E4M3_MAX", "E2M1_MAX", "NVFP4_BLOCK", "NVFP4_KV_GLOBAL_SCALE", "E2M1_VALUES",
    "check_kv_dtype", "fp8_scale_from_amax", "quantize_fp8", "dequantize_fp8",
    "nvfp4_global_scale_from_amax", "quantize_nvfp4", "dequantize_nvfp4", "nvfp4_block_scales",
    "pack_fp4", "unpack_fp4", "fp4_codes", "bytes_per_token",
]

KV_DTYPES = ("bf16", "fp8_e4m3", "nvfp4")
FP8_E4M3_MAX = 448.0
E2M1_MAX = 6.0
NVFP4_BLOCK = 16
NVFP4_KV_GLOBAL_SCALE = FP8_E4M3_MAX * E2M1_MAX / 30.0   # §10.3 static KV global (amax 30)
# Value of each 4-bit E2M1 code 0..15 (bit 3 is the sign).
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)


def check_kv_dtype(kv_dtype) -> str:
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, got {kv_dtype!r}")
    return kv_dtype


def _scalar(scale, name):
    s = jnp.asarray(scale, jnp.float32)
    if s.size != 1:
        raise ValueError(f"{name} must be a single float (shape [] or [1]), got shape {s.shape}")
    s = s.reshape(())
    if not isinstance(s, jax.core.Tracer):  # concrete: checked here; under jit the caller's value is trusted
        v = float(s)
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite float > 0, got {v}")
    return s


# Largest data-derived scale: its reciprocal (the dequantization factor, also used by the kernels) stays a
# normal float32, and a tiny but nonzero amax (below ~1e-35) cannot overflow the scale to inf, which would
# turn the zeros of the tensor into NaN (0 * inf).
MAX_DERIVED_SCALE = 2.0 ** 126


def _derived_scale(amax, numerator, default):
    """``min(numerator / amax, MAX_DERIVED_SCALE)`` as float32; ``default`` where ``amax`` is not > 0."""
    a = jnp.asarray(amax, jnp.float32)
    s = jnp.minimum(jnp.float32(numerator) / jnp.where(a > 0, a, 1.0), jnp.float32(MAX_DERIVED_SCALE))
    return jnp.where(a > 0, s, jnp.float32(default))


# -- FP8 E4M3 ---------------------------------------------------------------------------------
def fp8_scale_from_amax(amax):
    """Per-tensor orig->quant scale ``min(448 / amax, 2^126)`` (1.0 for an all-zero tensor). float32 scalar."""
    return _derived_scale(amax, FP8_E4M3_MAX, 1.0)


def quantize_fp8(x, scale):
    """``x [...]`` float -> E4M3 ``[...]``: ``RNE(clip(x*scale, ±448))`` (saturating)."""
    s = _scalar(scale, "scale")
    y = jnp.asarray(x).astype(jnp.float32) * s
    return jnp.clip(y, -FP8_E4M3_MAX, FP8_E4M3_MAX).astype(jnp.float8_e4m3fn)


def dequantize_fp8(q, scale, dtype=jnp.float32):
    """E4M3 ``q [...]`` -> ``q * fl32(1/scale)`` in ``dtype`` (computed in float32)."""
    inv = jnp.float32(1.0) / _scalar(scale, "scale")
    return (q.astype(jnp.float32) * inv).astype(dtype)


# -- FP4 E2M1 codes and packing -----------------------------------------------------------------
def fp4_codes(x):
    """Round ``x`` (float, already in block units) to E2M1 (RNE, saturating at ±6); uint8 codes 0..15.

    Written as comparisons against the RNE midpoints of the grid (ties to the even code: 0.25 -> 0,
    0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4) rather than a cast round trip
    ``f32 -> float4_e2m1fn -> f32``: XLA's GPU pipeline (``SimplifyFPConversions``, on by default via
    ``xla_allow_excess_precision``) deletes such round trips, which silently turned the rounding into
    truncation there. The sign comes from the sign bit (``-0.0`` and tiny negatives -> code 8).
    """
    v = jnp.asarray(x, jnp.float32)
    a = jnp.abs(v)
    mag = sum((a > t).astype(jnp.uint8) for t in (0.25, 1.25, 2.5, 5.0)) \
        + sum((a >= t).astype(jnp.uint8) for t in (0.75, 1.75, 3.5))
    return jnp.where(jnp.signbit(v), mag + 8, mag).astype(jnp.uint8)


def pack_fp4(codes):
    """uint8 codes ``[..., D]`` (0..15, D even) -> packed bytes ``[..., D/2]`` (low nibble = even index)."""
    c = jnp.asarray(codes, jnp.uint8)
    if c.shape[-1] % 2:
        raise ValueError(f"pack_fp4: last dim must be even, got {c.shape}")
    c = c.reshape(c.shape[:-1] + (c.shape[-1] // 2, 2))
    return (c[..., 0] | (c[..., 1] << 4)).astype(jnp.uint8)


def unpack_fp4(packed):
    """Packed bytes ``[..., D/2]`` uint8 -> E2M1 values ``[..., D]`` float32."""
    p = jnp.asarray(packed, jnp.uint8)
    codes = jnp.stack([p & 0xF, p >> 4], axis=-1).reshape(p.shape[:-1] + (2 * p.shape[-1],))
    return jnp.asarray(E2M1_VALUES)[codes.astype(jnp.int32)]


# -- NVFP4 ------------------------------------------------------------------------------------
def nvfp4_global_scale_from_amax(amax):
    """Per-tensor orig->quant global scale ``min(448*6 / amax, 2^126)`` (§10.3 static default when amax == 0)."""
    return _derived_scale(amax, FP8_E4M3_MAX * E2M1_MAX, NVFP4_KV_GLOBAL_SCALE)


def _blocks(x):
    x = jnp.asarray(x).astype(jnp.float32)
    d = x.shape[-1]
    if d % NVFP4_BLOCK:
        raise ValueError(f"NVFP4: last dim must be a multiple of {NVFP4_BLOCK}, got {x.shape}")
    return x.reshape(x.shape[:-1] + (d // NVFP4_BLOCK, NVFP4_BLOCK))


# E4M3 decode tables by code (sign bit included; 0x7F / 0xFF are NaN) and the correctly rounded f32
# reciprocals of the non-negative codes (entry 0 unused). Looked up instead of cast / divided because
# XLA deletes a cast round trip f32 -> e4m3 -> f32 on GPU and lowers f32 division there to the
# approximate ``div.full.f32`` (``-nvptx-prec-divf32=1``); a table lookup is exact on every backend.
_E4M3_VALUE = np.arange(256, dtype=np.uint8).view(jnp.float8_e4m3fn).astype(np.float32)
with np.errstate(divide="ignore"):
    _E4M3_RECIP = np.where(_E4M3_VALUE[:128] > 0, np.float32(1) / _E4M3_VALUE[:128], 0).astype(np.float32)


def _e4m3_bits(q):
    """E4M3 ``[...]`` -> its uint8 codes (a bitcast, never a value conversion)."""
    return lax.bitcast_convert_type(jnp.asarray(q, jnp.float8_e4m3fn), jnp.uint8)


def _e4m3_value(code):
    """uint8/int codes ``[...]`` -> float32 values of E4M3 (exact, by table)."""
    return jnp.asarray(_E4M3_VALUE)[jnp.asarray(code).astype(jnp.int32)]


def _nvfp4_scale_codes(amax, g):
    """Block amax ``[...]`` (f32) -> uint8 E4M3 codes of ``RNE_e4m3(clip(fl32(amax * g) / 6, 0, 448))``.

    The quotient is never formed exactly: XLA rewrites ``v / 6`` to ``v * fl32(1/6)`` (every
    backend) and GPU divisions are approximate, either of which can move ``fl32(v/6)`` across an E4M3
    rounding midpoint. So a candidate from ``v * (1/6)`` (off by at most one E4M3 step) is corrected
    by comparing ``v`` with ``6 * midpoint`` of the neighbouring codes, which is exact in f32 (an
    E4M3 midpoint has <= 5 significant bits). Equals the true-division result because ``fl32(v/6)``
    lands on a midpoint only when ``v/6`` is one (then the tie goes to the even code).
    """
    v = amax * g
    cand = jnp.clip(v * jnp.float32(1.0 / E2M1_MAX), 0.0, FP8_E4M3_MAX).astype(jnp.float8_e4m3fn)
    code = _e4m3_bits(cand).astype(jnp.int32)               # 0..126, 127 only for NaN input
    up, dn = jnp.minimum(code + 1, 126), jnp.maximum(code - 1, 0)
    s, s_up, s_dn = _e4m3_value(code), _e4m3_value(up), _e4m3_value(dn)
    t_up = (s + s_up) * jnp.float32(E2M1_MAX / 2)            # 6 * midpoint, exact
    t_dn = (s + s_dn) * jnp.float32(E2M1_MAX / 2)
    go_up = (code < 126) & ((v > t_up) | ((v == t_up) & (up % 2 == 0)))
    go_dn = (code > 0) & ((v < t_dn) | ((v == t_dn) & (dn % 2 == 0)))
    return jnp.where(go_up, up, jnp.where(go_dn, dn, code)).astype(jnp.uint8)


def _nvfp4_scale_codes_of(x, g):
    return _nvfp4_scale_codes(jnp.max(jnp.abs(_blocks(x)), axis=-1), g)


def nvfp4_block_scales(x, global_scale):
    """E4M3 block scales ``[..., D/16]`` of ``x [..., D]`` for the given global scale."""
    g = _scalar(global_scale, "global_scale")
    return lax.bitcast_convert_type(_nvfp4_scale_codes_of(x, g), jnp.float8_e4m3fn)


def quantize_nvfp4(x, global_scale):
    """``x [..., D]`` -> ``(packed uint8 [..., D/2], block scales e4m3 [..., D/16])``.

    Blocks are 16 consecutive features of one row; an all-zero block (or one whose scale
    underflows E4M3) stores zeros. ``sf`` and ``fl32(1/sf)`` come from tables indexed by the scale's
    code (see ``_E4M3_RECIP``), so the result is bit-exact on CPU and GPU alike.
    """
    g = _scalar(global_scale, "global_scale")
    xb = _blocks(x)
    code = _nvfp4_scale_codes(jnp.max(jnp.abs(xb), axis=-1), g)         # [..., D/16]
    inv_sf = jnp.asarray(_E4M3_RECIP)[code.astype(jnp.int32)][..., None]
    pos = (_e4m3_value(code) > 0)[..., None]
    y = jnp.where(pos, (xb * g) * inv_sf, 0.0)
    codes = fp4_codes(y).reshape(jnp.shape(x))
    return pack_fp4(codes), lax.bitcast_convert_type(code, jnp.float8_e4m3fn)


def dequantize_nvfp4(packed, block_scales, global_scale, dtype=jnp.float32):
    """Inverse of :func:`quantize_nvfp4`: ``[..., D/2]`` + ``[..., D/16]`` -> ``[..., D]`` in ``dtype``."""
    g = _scalar(global_scale, "global_scale")
    e = unpack_fp4(packed)
    d = e.shape[-1]
    sf = _e4m3_value(_e4m3_bits(block_scales))      # not a cast: see _E4M3_VALUE
    if sf.shape[-1] * NVFP4_BLOCK != d:
        raise ValueError(f"NVFP4: {sf.shape[-1]} block scales do not cover {d} values")
    eb = e.reshape(e.shape[:-1] + (d // NVFP4_BLOCK, NVFP4_BLOCK))
    return ((eb * sf[..., None]) * (jnp.float32(1.0) / g)).reshape(e.shape).astype(dtype)


# -- sizes ------------------------------------------------------------------------------------
def bytes_per_token(kv_dtype: str, *, latent_dim: int = 512, rope_dim: int = 64,
                    float_bytes: int = 2) -> int:
    """Bytes one cached token occupies in a page (per layer), excluding per-tensor scalars.

    ``bf16``: ``576 * float_bytes`` (1152); ``fp8_e4m3``: 576; ``nvfp4``: 576/2 packed bytes plus
    576/16 E4M3 block scales = 324.
    """
    d = latent_dim + rope_dim
    kv_dtype = check_kv_dtype(kv_dtype)
    if kv_dtype == "bf16":
        return d * float_bytes
    if kv_dtype == "fp8_e4m3":
        return d
    return d // 2 + d // NVFP4_BLOCK
