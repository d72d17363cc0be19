"""XLA FFI backend of the bounded MLA decode: targets ``helix_mla_decode`` (float pages),
``helix_mla_decode_fp8`` (FP8Pages) and ``helix_mla_decode_nvfp4`` (NVFP4Pages).

One target name per KV format (their operand lists differ), two handlers each
(``ffi/src/mla_decode_cpu.cc`` and ``ffi/src/mla_decode_cuda.cu``):
the CPU handler is what CI runs; the CUDA handler is the Hopper (sm_90a) split-KV kernel. The op
is a plain ``jax.ffi.ffi_call``, so it works per rank inside ``shard_map`` (call it there: under a
plain ``jit`` with sharded operands XLA would gather everything around the custom call).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ... import _ffi
from ...cache import kv_format

TARGET = "helix_mla_decode"
CPU_SYMBOL = "HelixMlaDecodeCpu"
CUDA_SYMBOL = "HelixMlaDecodeCuda"
CUDA_DTYPES = (jnp.bfloat16, jnp.float16)
SUPPORTED_KV_DTYPES = ("bf16", "fp8_e4m3", "nvfp4")
# kv_dtype -> (target, CPU symbol, CUDA symbol) for quantized pages.
QUANT_TARGETS = {"fp8_e4m3": ("helix_mla_decode_fp8", "HelixMlaDecodeFp8Cpu", "HelixMlaDecodeFp8Cuda"),
                 "nvfp4": ("helix_mla_decode_nvfp4", "HelixMlaDecodeNvfp4Cpu", "HelixMlaDecodeNvfp4Cuda")}
MAX_PARTS = 160  # split-KV CTAs per row tile, upper bound; mirrors kMaxParts in mla_decode_cuda.cu


def _align(x):
    return (x + 255) // 256 * 256


def workspace_bytes(batch, rows):
    """Bytes of the CUDA handler's split-KV workspace for ``batch`` sequences of ``rows`` = G*H query rows.

    The row tiles' segment tables ``[ceil(rows / 64), segs]`` int4 and part tables ``[ceil(rows / 64), MAX_PARTS]``
    int2 (each CTA plans its own split-KV part and writes its range and segments there), per-sequence segment
    ranges, partial lse ``[segs, rows]`` fp32 and partial o ``[segs, rows, 512]`` in the activation dtype, with
    ``segs = batch + MAX_PARTS`` (mirrors ``Layout`` in the .cu file).
    The workspace is a third result of the custom call, so XLA owns it (FFI scratch allocation is
    not available in the CUDA runtime here).
    """
    segs = batch + MAX_PARTS
    row_tiles = -(-rows // 64)
    return (_align(16 * segs * row_tiles) + _align(8 * MAX_PARTS * row_tiles) + _align(8 * batch)
            + _align(4 * segs * rows) + _align(2 * segs * rows * 512))


def availability(platform):
    """``(ok, reason)``: the handler for ``platform`` is built and loadable."""
    return _ffi.target_availability(platform, cpu_symbol=CPU_SYMBOL, cuda_symbol=CUDA_SYMBOL)


def preferred(platform):
    """Auto-selected only on GPU (on CPU the handler is a test vehicle, not faster than XLA)."""
    return platform in ("gpu", "cuda")


def check_operands(platform, q_latent, c_latent, k_rope):
    """Raise ``ValueError`` unless this backend handles these operands (the dispatch skips it then)."""
    if platform in ("gpu", "cuda"):
        _check_gpu_operands(q_latent, c_latent, k_rope)


def _check_gpu_operands(q_latent, c_latent, k_rope):
    if q_latent.dtype not in CUDA_DTYPES or c_latent.dtype != q_latent.dtype:
        raise ValueError("mla_decode implementation='ffi' on GPU needs q and KV in one dtype of bf16/fp16, got "
                         f"q {q_latent.dtype}, KV {c_latent.dtype}")
    p = c_latent.shape[1]
    if p % 16:
        raise ValueError(f"mla_decode implementation='ffi' on GPU needs a page size that is a multiple of 16, got {p}")
    if q_latent.shape[-1] != 512 or k_rope.shape[-1] != 64:
        raise ValueError(f"mla_decode implementation='ffi' on GPU needs Dl=512, Dr=64, got "
                         f"{q_latent.shape[-1]}, {k_rope.shape[-1]}")


def check_quantized_operands(platform, q_latent, pages):
    """Like :func:`check_operands` for ``FP8Pages`` / ``NVFP4Pages`` (the GPU kernel dequantizes to q's dtype)."""
    if platform in ("gpu", "cuda"):
        _check_gpu_quantized(q_latent, pages)


def _check_gpu_quantized(q_latent, pages):
    if q_latent.dtype not in CUDA_DTYPES:
        raise ValueError(f"mla_decode implementation='ffi' on GPU needs bf16/fp16 queries for {kv_format(pages)} "
                         f"pages, got {q_latent.dtype}")
    p = pages.c_latent.shape[1]
    if p % 16:
        raise ValueError(f"mla_decode implementation='ffi' on GPU needs a page size that is a multiple of 16, got {p}")
    if q_latent.shape[-1] != 512 or pages.k_rope.shape[-1] * (2 if kv_format(pages) == "nvfp4" else 1) != 64:
        raise ValueError("mla_decode implementation='ffi' on GPU needs Dl=512, Dr=64")


def _call(target, operands, out_shape, batch, rows, softmax_scale):
    """``ffi_call`` with the platform-specific workspace (1 byte on CPU, the split-KV partials on CUDA)."""
    def call(ws_bytes):
        def f(*ops):
            out = jax.ffi.ffi_call(
                target, out_shape + (jax.ShapeDtypeStruct((ws_bytes,), jnp.uint8),),
                vmap_method="sequential")(*ops, softmax_scale=np.float32(softmax_scale))
            return out[0], out[1]
        return f

    # The workspace size is platform-specific: lowering for CUDA (also from a CPU host) gets the real one.
    return jax.lax.platform_dependent(*operands, cpu=call(1), cuda=call(workspace_bytes(batch, rows)))


def mla_decode_quantized(q_latent, q_rope, pages, page_table, kv_bounds, softmax_scale):
    """Bounded MLA decode of ``FP8Pages`` / ``NVFP4Pages`` through ``helix_mla_decode_{fp8,nvfp4}``.

    Operands after the queries: fp8 ``c_latent [N, P, 512]``, ``k_rope [N, P, 64]`` (float8_e4m3fn),
    ``scale [1]``; nvfp4 ``c_latent [N, P, 256]``, ``k_rope [N, P, 32]`` (uint8), ``c_latent_sf [N, P, 32]``,
    ``k_rope_sf [N, P, 4]`` (float8_e4m3fn), ``global_scale [1]``; then ``page_table``, ``kv_bounds``.
    The handlers dequantize in the kernel with the formulas of ``helix_jax.quant`` (``q * fl32(1/scale)``,
    ``fl32(e2m1 * sf) * fl32(1/global)``). Returns ``(o [B, G, H, 512] in q dtype, lse [B, G, H] f32)``.
    """
    if isinstance(softmax_scale, jax.core.Tracer):
        raise ValueError("mla_decode implementation='ffi' needs a static softmax_scale (a Python float), got a tracer")
    fmt = kv_format(pages)
    if fmt not in QUANT_TARGETS:
        raise ValueError(f"mla_decode_quantized: pages must be FP8Pages or NVFP4Pages, got {type(pages).__name__}")
    target, cpu_sym, cuda_sym = QUANT_TARGETS[fmt]
    _ffi.ensure_target(target, cpu_symbol=cpu_sym, cuda_symbol=cuda_sym)
    if jax.default_backend() == "gpu":
        _check_gpu_quantized(q_latent, pages)
    b, g, h, dl = q_latent.shape
    fields = [x.reshape(1).astype(jnp.float32) if x.ndim != 3 else x for x in pages]
    operands = (q_latent, q_rope, *fields, page_table.astype(jnp.int32), kv_bounds.astype(jnp.int32))
    out_shape = (jax.ShapeDtypeStruct((b, g, h, dl), q_latent.dtype), jax.ShapeDtypeStruct((b, g, h), jnp.float32))
    return _call(target, operands, out_shape, b, g * h, softmax_scale)


def mla_decode(q_latent, q_rope, c_latent, k_rope, page_table, kv_bounds, softmax_scale):
    """Bounded MLA decode through the FFI target (shapes validated by ``api.mla_decode``).

    q_latent ``[B, G, H, 512]``, q_rope ``[B, G, H, 64]``, c_latent ``[N, P, 512]``,
    k_rope ``[N, P, 64]``, page_table ``[B, npp]`` int32, kv_bounds ``[B, G]`` int32.
    Returns ``(o [B, G, H, 512] in q_latent.dtype, lse [B, G, H] float32)``.
    """
    if isinstance(softmax_scale, jax.core.Tracer):
        raise ValueError("mla_decode implementation='ffi' needs a static softmax_scale (a Python float), got a tracer")
    _ffi.ensure_target(TARGET, cpu_symbol=CPU_SYMBOL, cuda_symbol=CUDA_SYMBOL)
    if jax.default_backend() == "gpu":
        _check_gpu_operands(q_latent, c_latent, k_rope)
    b, g, h, dl = q_latent.shape
    operands = (q_latent, q_rope, c_latent, k_rope, page_table.astype(jnp.int32), kv_bounds.astype(jnp.int32))
    out_shape = (jax.ShapeDtypeStruct((b, g, h, dl), q_latent.dtype), jax.ShapeDtypeStruct((b, g, h), jnp.float32))
    return _call(TARGET, operands, out_shape, b, g * h, softmax_scale)
