"""Small FFI MLA decode case for compute-sanitizer (memcheck / racecheck) on the GPU.

  XLA_PYTHON_CLIENT_ALLOCATOR=platform compute-sanitizer --tool memcheck --kernel-name regex:mla \
      python3 benchmarks/mla_decode_sanitize.py
The platform allocator gives every buffer its own cudaMalloc, so a read past a pool or table is seen.
Unbalanced lengths (including a 0-length sequence and bound-0 rows) exercise the schedule, the
split-KV partials and the combine; the result is checked against the jnp reference.
"""
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from helix_jax.cache import MLAPages  # noqa: E402
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
    args = (mk(B, G, H, 512), mk(B, G, H, 64), MLAPages(mk(n, P, 512), mk(n, P, 64)), jnp.asarray(table))
    outs = {}
    for impl in ("ffi", "reference"):
        f = jax.jit(lambda ql, qr, pg, pt, bd, _i=impl: mla_decode(ql, qr, pg, pt, kv_bounds=bd, softmax_scale=0.07,
                                                                   implementation=_i))
        outs[impl] = [np.asarray(x.astype(jnp.float32)) for x in f(*args, jnp.asarray(bounds))]
    o, lse = outs["ffi"]
    ro, rl = outs["reference"]
    err = np.linalg.norm(o - ro) / np.linalg.norm(ro)
    lse_err = np.nanmax(np.abs(np.where(np.isinf(rl), 0, lse - rl)))
    same_inf = np.array_equal(np.isinf(lse), np.isinf(rl))
    print(f"sanitize case: o rel err {err:.2e}, lse max err {lse_err:.2e}, -inf rows match: {same_inf}")
    return 0 if (err < 2e-2 and lse_err < 2e-2 and same_inf) else 1


if __name__ == "__main__":
    raise SystemExit(main())
