"""XLA FFI backend of the bounded MLA decode: target ``helix_mla_decode``.

One target name, two handlers (``ffi/src/mla_decode_cpu.cc`` and ``ffi/src/mla_decode_cuda.cu``):
the CPU handler is what CI runs; the CUDA handler is the Hopper (sm_90a) split-KV kernel. The op
is a plain ``jax.ffi.ffi_call``, so it works per rank inside ``shard_map`` (call it there: under a
plain ``jit`` with sharded operands XLA would gather everything around the custom call).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ... import _ffi

TARGET = "helix_mla_decode"
CPU_SYMBOL = "HelixMlaDecodeCpu"
CUDA_SYMBOL = "HelixMlaDecodeCuda"
CUDA_DTYPES = (jnp.bfloat16, jnp.float16)
MAX_PARTS = 160  # split-KV CTAs per row tile, upper bound; mirrors kMaxParts in mla_decode_cuda.cu


def _align(x):
    return (x + 255) // 256 * 256


def workspace_bytes(batch, rows):
    """Bytes of the CUDA handler's split-KV workspace for ``batch`` sequences of ``rows`` = G*H query rows.

    Segment table, part ranges, per-sequence ranges, partial lse ``[segs, rows]`` and partial o
    ``[segs, rows, 512]`` fp32 with ``segs = batch + MAX_PARTS`` (mirrors ``Layout`` in the .cu file).
    The workspace is a third result of the custom call, so XLA owns it (FFI scratch allocation is
    not available in the CUDA runtime here).
    """
    segs = batch + MAX_PARTS
    return (_align(16 * segs) + _align(8 * MAX_PARTS) + _align(8 * batch) + _align(4 * segs * rows)
            + _align(4 * segs * rows * 512))


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

    def call(ws_bytes):
        def f(*ops):
            out = jax.ffi.ffi_call(
                TARGET,
                (jax.ShapeDtypeStruct((b, g, h, dl), q_latent.dtype), jax.ShapeDtypeStruct((b, g, h), jnp.float32),
                 jax.ShapeDtypeStruct((ws_bytes,), jnp.uint8)),
                vmap_method="sequential")(*ops, softmax_scale=np.float32(softmax_scale))
            return out[0], out[1]
        return f

    # The workspace size is platform-specific: lowering for CUDA (also from a CPU host) gets the real one.
    return jax.lax.platform_dependent(*operands, cpu=call(1), cuda=call(workspace_bytes(b, g * h)))
