"""Small FFI MLA decode case for compute-sanitizer (memcheck / racecheck) on the GPU.

  XLA_PYTHON_CLIENT_ALLOCATOR=platform compute-sanitizer --tool memcheck --kernel-name regex:mla \
      python3 benchmarks/mla_decode_sanitize.py
The platform allocator gives every buffer its own cudaMalloc, so a read past a pool or table is seen.
Unbalanced lengths (including a 0-length sequence and bound-0 rows) exercise the schedule, the
split-KV partials and the combine; the result is checked against the jnp reference, for bf16 pages and
for the same pool quantized to FP8Pages and NVFP4Pages (the quantized kernels' staging and dequant).
"""
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from helix_jax import quant  # noqa: E402
from helix_jax.cache import FP8Pages, MLAPages, NVFP4Pages  # noqa: E402
from helix_jax.ops.mla_decode import mla_decode  # noqa: E402


def main():
    rng = np.random.default_rng(0)
    B, G, H, P = 4, 2, 40, 64
    lens = np.array([1000, 0, 70, 129])
    bounds = np.maximum(lens[:, None] - (G - 1) + np.arange(G)[None, :], 0).astype(np.int32)
    bounds[2, 0] = 0
    npp = -(-int(bounds.max()) // P)
    n = B * npp
    table = rng.permutation(n).astype(np.int32).reshape(B, npp)
    mk = lambda *s: jnp.asarray(rng.standard_normal(s, np.float32), jnp.bfloat16)  # noqa: E731
    pool = MLAPages(mk(n, P, 512), mk(n, P, 64))
    s8, g4 = jnp.full((1,), 60.0, jnp.float32), jnp.full((1,), 300.0, jnp.float32)
    (c, csf), (k, ksf) = quant.quantize_nvfp4(pool.c_latent, g4), quant.quantize_nvfp4(pool.k_rope, g4)
    formats = {"bf16": pool,
               "fp8_e4m3": FP8Pages(quant.quantize_fp8(pool.c_latent, s8), quant.quantize_fp8(pool.k_rope, s8), s8),
               "nvfp4": NVFP4Pages(c, k, csf, ksf, g4)}
    q = (mk(B, G, H, 512), mk(B, G, H, 64))
    ok = True
    for fmt, pages in formats.items():
        outs = {}
        for impl in ("ffi", "reference"):
            f = jax.jit(lambda ql, qr, pg, pt, bd, _i=impl: mla_decode(ql, qr, pg, pt, kv_bounds=bd, softmax_scale=0.07,
                                                                       implementation=_i))
            outs[impl] = [np.asarray(x.astype(jnp.float32)) for x in f(*q, pages, jnp.asarray(table), jnp.asarray(bounds))]
        o, lse = outs["ffi"]
        ro, rl = outs["reference"]
        err = np.linalg.norm(o - ro) / np.linalg.norm(ro)
        lse_err = np.nanmax(np.abs(np.where(np.isinf(rl), 0, lse - rl)))
        same_inf = np.array_equal(np.isinf(lse), np.isinf(rl))
        print(f"sanitize case {fmt}: o rel err {err:.2e}, lse max err {lse_err:.2e}, -inf rows match: {same_inf}")
        ok &= bool(err < 2e-2 and lse_err < 2e-2 and same_inf)
    return 0 if ok else 1

if __name__ == "__main__":
    raise SystemExit(main())
