"""NVFP4 quantization, stage by stage, on the current JAX backend vs a numpy float32 oracle.

  python3 benchmarks/nvfp4_gpu_diag.py            # CPU: everything must match; GPU: shows what XLA changed
  python3 benchmarks/nvfp4_gpu_diag.py --rows 512 --pallas-rows 64   # smaller / faster

Why: on the H200 the jnp path of ``cache.append_kv`` (helix_jax.quant, compiled by XLA) disagreed with the
numpy oracle and with the Pallas append kernel on ~70% of the written nvfp4 bytes, while CPU matched.
This script quantizes random bf16 / f32 rows ``[rows, 576]`` (global scale 89.6) and a set of planted
rounding ties (global scale 1) with several formulations, each a jitted function that returns every
stage, and compares each stage bit for bit with the numpy oracle (``tests/test_quant.py``: RNE on the
explicit E4M3 / E2M1 grids, float32 op order of the documented formulas):

  amax     block max |x|                        [rows, 36]
  sf_raw   fl32(amax * g) / 6 before E4M3 rounding (the f32 the formulation computed; "-" if none)
  sf       E4M3 block scale                     [rows, 36]
  sf_used  the f32 value of sf that y is computed with
  inv_sf   fl32(1 / sf)
  y        fl32(fl32(x * g) * inv_sf)           [rows, 576]
  codes    E2M1 codes 0..15
  packed   two codes per byte                   [rows, 288]

``sf_raw`` differs on every backend for the legacy variants (~30%): XLA turns ``v / 6`` into
``v * fl32(1/6)``, which only matters when it crosses an E4M3 rounding tie ("planted ties" rows).

Expected on GPU if the diagnosis holds: legacy packed ~70% (as in the H200 test), legacy+cmp ~10%
(sf_used unrounded), legacy+cmp+tab ~0%, library / quantize_nvfp4 / append_kv / pallas 0%, and the
child (no excess precision) legacy packed 0%. Simulated on CPU in tests/test_quant_xla_rewrites.py.

Formulations ("variants"):
  legacy         quant.py before the fix: ``(amax*g)/6``, cast f32->e4m3->f32, ``1/sf``, cast f32->e2m1->f32
  legacy+cmp     legacy, but E2M1 rounding by comparisons (no f4 cast round trip)
  legacy+cmp+tab legacy+cmp, and sf_used / inv_sf from tables indexed by the sf code (no e4m3 round trip,
                 no runtime division)
  library        helix_jax.quant now (legacy+cmp+tab, and sf by an exactly corrected ``v * (1/6)``)
  quantize_nvfp4 the public function end to end (packed, sf only)
  pallas         cache.append_kv(implementation="pallas") (on CPU: interpret mode, 64 rows, shown as
                 "pallas[n]i" and not counted: there its ``/ 6`` is XLA:CPU's ``* fl32(1/6)``)
  append_kv      cache.append_kv default (jnp) path, same rows as pallas

Then, in a child process with ``XLA_FLAGS=--xla_allow_excess_precision=false`` (which switches off XLA's
``SimplifyFPConversions`` pass, the suspected cause) the legacy variant again, and on GPU the PTX of that
child is grepped for the f32 division instruction XLA emitted (``div.full.f32`` = approximate).
Exit status 0 iff the library, quantize_nvfp4, append_kv and pallas rows match the oracle everywhere.
"""
from __future__ import annotations

import argparse
import glob
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

from helix_jax import cache, quant  # noqa: E402
from test_quant import E2M1, E4M3, rne  # noqa: E402  (independent oracle: explicit grids)

F32 = np.float32
G_DEFAULT = F32(quant.NVFP4_KV_GLOBAL_SCALE)
STAGES = ("amax", "sf_raw", "sf", "sf_used", "inv_sf", "y", "codes", "packed")


# -- numpy float32 oracle, stage by stage --------------------------------------------------------
def oracle_stages(x, g):
    """Every stage of the documented NVFP4 formulas (quant.py docstring) in numpy float32."""
    x = np.asarray(x, F32)
    g = F32(g)
    xb = x.reshape(x.shape[0], -1, 16)
    amax = np.abs(xb).max(-1)
    sf_raw = (amax * g) / F32(6)
    sf = F32(rne(np.minimum(sf_raw, F32(448)), E4M3))
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(sf > 0, F32(1) / sf, F32(0)).astype(F32)
        y = np.where(sf[..., None] > 0, (xb * g) * inv[..., None], F32(0)).astype(F32)
    e = rne(y, E2M1)
    codes = (np.searchsorted(E2M1, np.abs(e)) + 8 * np.signbit(e)).astype(np.uint8).reshape(x.shape)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return dict(amax=amax, sf_raw=sf_raw, sf=sf, sf_used=sf, inv_sf=inv, y=y.reshape(x.shape), codes=codes,
                packed=packed)


# -- jnp formulations ------------------------------------------------------------------------------
def _e2m1_cast(y):
    """quant.fp4_codes before the fix: RNE through a cast round trip f32 -> float4_e2m1fn -> f32."""
    v = jnp.clip(y, -6.0, 6.0).astype(jnp.float4_e2m1fn).astype(jnp.float32)
    a = jnp.abs(v)
    mag = sum((a >= t).astype(jnp.uint8) for t in (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0))
    return jnp.where(jnp.signbit(v), mag + 8, mag).astype(jnp.uint8)


def formulation(x, g, *, e2m1="cast", sf_tables=False, sf_exact=False):
    """All stages of one NVFP4 formulation of ``x [R, D]`` (legacy = all defaults)."""
    xb = x.astype(jnp.float32).reshape(x.shape[0], -1, 16)
    amax = jnp.max(jnp.abs(xb), axis=-1)
    if sf_exact:
        code = quant._nvfp4_scale_codes(amax, g)
        sf = lax.bitcast_convert_type(code, jnp.float8_e4m3fn)
        sf_raw = jnp.full(amax.shape, jnp.nan, jnp.float32)          # never formed
    else:
        sf_raw = amax * g / 6.0
        sf = jnp.clip(sf_raw, 0.0, 448.0).astype(jnp.float8_e4m3fn)
    if sf_tables:
        code = lax.bitcast_convert_type(sf, jnp.uint8).astype(jnp.int32)
        sf32 = jnp.asarray(quant._E4M3_VALUE)[code]
        inv = jnp.asarray(quant._E4M3_RECIP)[code]
    else:
        sf32 = sf.astype(jnp.float32)
        inv = jnp.float32(1.0) / jnp.where(sf32 > 0, sf32, 1.0)
    inv = jnp.where(sf32 > 0, inv, 0.0)
    y = jnp.where(sf32[..., None] > 0, (xb * g) * inv[..., None], 0.0).reshape(x.shape)
    codes = (quant.fp4_codes if e2m1 == "cmp" else _e2m1_cast)(y)
    packed = quant.pack_fp4(codes)
    return dict(amax=amax, sf_raw=sf_raw, sf=sf, sf_used=sf32, inv_sf=inv, y=y, codes=codes, packed=packed)


VARIANTS = {
    "legacy": dict(),
    "legacy+cmp": dict(e2m1="cmp"),
    "legacy+cmp+tab": dict(e2m1="cmp", sf_tables=True),
    "library": dict(e2m1="cmp", sf_tables=True, sf_exact=True),
}
MUST_MATCH = ("library", "quantize_nvfp4", "append_kv", "pallas")


# -- inputs ----------------------------------------------------------------------------------------
def planted_ties():
    """f32 rows (global scale 1) whose blocks hit rounding ties: amax * 1 = 6 * (E4M3 midpoint) +- k ulp
    (the block scale's RNE tie and its neighbours) and E2M1 ties of y (block amax 6 -> sf 1)."""
    mids = ((E4M3[:-1] + E4M3[1:]) / 2).astype(F32)
    t = mids * F32(6)
    assert np.all(t.astype(np.float64) == mids.astype(np.float64) * 6)      # exact in f32
    amax = (t.view(np.int32)[:, None] + np.arange(-2, 3)[None, :]).astype(np.int32).view(F32).ravel()
    rng = np.random.default_rng(1)
    blocks = rng.uniform(-1, 1, (amax.size, 16)).astype(F32) * amax[:, None]
    blocks[:, 5] = amax
    blocks[::2, 5] = -amax[::2]
    ties = F32([6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -6, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5])
    blocks = np.concatenate([blocks, np.tile(ties, (36, 1))])
    pad = (-len(blocks)) % 36
    blocks = np.concatenate([blocks, rng.normal(0, 1, (pad, 16)).astype(F32)])
    return blocks.reshape(-1, 576)


# -- comparison ------------------------------------------------------------------------------------
def _bits(a):
    a = np.asarray(a)
    if a.dtype == jnp.float8_e4m3fn:
        a = a.astype(F32)
    if a.dtype == F32:
        a = np.where(np.isnan(a), F32(np.nan), a).view(np.uint32)      # one NaN pattern
    return a


def _hex(v):
    v = np.asarray(v)
    return f"0x{int(v.view(np.uint32)):08x}" if v.dtype == F32 else f"0x{int(v):02x}"


def compare(name, got, want, x, *, examples=5):
    """Print the mismatch fraction of each stage and a few examples; return the packed+sf mismatch count."""
    bad_final = 0
    parts = []
    lines = []
    for st in STAGES:
        if st not in got:
            continue
        g, w = np.asarray(got[st]), np.asarray(want[st])
        if g.dtype == jnp.float8_e4m3fn:
            g = g.astype(F32)
        if st == "sf_raw" and np.all(np.isnan(g)):
            parts.append(f"{st} -")
            continue
        g = g.reshape(w.shape)
        diff = _bits(g) != _bits(w)
        n = int(diff.sum())
        parts.append(f"{st} {n / diff.size:.4%}")
        if st in ("sf", "packed"):
            bad_final += n
        for idx in list(zip(*np.nonzero(diff)))[:examples if n else 0]:
            r, c = int(idx[0]), int(idx[1])
            if st in ("amax", "sf_raw", "sf", "sf_used", "inv_sf"):
                inp = f"block {r},{c} amax(x)={np.abs(x[r, 16 * c:16 * c + 16]).max()!r}"
            elif st == "packed":
                inp = f"x[{r},{2 * c}:{2 * c + 2}]={x[r, 2 * c:2 * c + 2].tolist()} y_oracle={want['y'][r, 2 * c:2 * c + 2].tolist()}"
            else:
                inp = f"x[{r},{c}]={x[r, c]!r}"
            gv, wv = g[r, c], w[r, c]
            lines.append(f"      {st:7s} {inp}: got {gv!r} ({_hex(gv)}) want {wv!r} ({_hex(wv)})")
    print(f"  {name:15s} " + " | ".join(parts))
    for ln in lines:
        print(ln)
    return bad_final


def hlo_facts(fn, x, g):
    """What the optimizing compiler kept of the legacy formulation (compiled HLO text)."""
    text = jax.jit(fn).lower(x, g).compile().as_text()
    return (f"compiled legacy HLO: converts to f4e2m1fn: {text.count('f4e2m1fn[')} "
            f"(lowered: {jax.jit(fn).lower(x, g).as_text().count('f4E2M1FN>')}), "
            f"f8e4m3fn->f32 converts kept: {'yes' if 'f8e4m3fn' in text else 'no'}, divides: {text.count(' divide(')}, "
            f"multiply by fl32(1/6) = 0.166666672: {'yes' if '0.166666672' in text else 'no'}")


# -- pallas / append_kv ------------------------------------------------------------------------------
def append_paths(x, g, n_rows):
    """Rows ``x[:n_rows]`` appended by cache.append_kv (pallas and default) into fresh poisoned pages."""
    gsz = 4
    b = n_rows // gsz
    rows = jnp.asarray(x[:b * gsz])
    c_new = rows[:, :512].reshape(b, gsz, 512)
    k_new = rows[:, 512:].reshape(b, gsz, 64)
    rng = np.random.default_rng(2)
    u8 = lambda *s: jnp.asarray(rng.integers(0, 256, s, dtype=np.uint8))   # noqa: E731
    e4 = lambda *s: lax.bitcast_convert_type(u8(*s) & 0x77, jnp.float8_e4m3fn)   # noqa: E731  no NaN codes
    pages = cache.NVFP4Pages(u8(b, gsz, 256), u8(b, gsz, 32), e4(b, gsz, 32), e4(b, gsz, 4),
                             jnp.asarray([g], jnp.float32))
    table = jnp.arange(b, dtype=jnp.int32)[:, None]              # sequence i -> page i
    slots = jnp.tile(jnp.arange(gsz, dtype=jnp.int32), (b, 1))   # row j -> offset j
    out = {}
    for name, impl in (("pallas", "pallas"), ("append_kv", "jnp")):
        kw = {} if impl == "jnp" else dict(implementation="pallas")
        f = jax.jit(lambda p, t, s, c, k, kw=kw: cache.append_kv(p, t, s, c, k, **kw))
        p = f(pages, table, slots, c_new, k_new)
        packed = np.concatenate([np.asarray(p.c_latent).reshape(-1, 256), np.asarray(p.k_rope).reshape(-1, 32)], 1)
        sf = np.concatenate([np.asarray(p.c_latent_sf).reshape(-1, 32), np.asarray(p.k_rope_sf).reshape(-1, 4)], 1)
        out[name] = dict(sf=sf, packed=packed)
    return out, b * gsz


def _oracle_rows(want, n):
    return {k: v[:n] for k, v in want.items()}


def run_child(args):
    """Legacy variant only, under the XLA_FLAGS the parent set; prints its stage mismatches."""
    x = make_inputs(args)[0][1]
    want = oracle_stages(x, G_DEFAULT)
    got = jax.device_get(jax.jit(formulation)(jnp.asarray(x), G_DEFAULT))
    compare("legacy", got, want, x, examples=0)
    return 0


def make_inputs(args):
    rng = np.random.default_rng(0)
    x = rng.normal(0, 4, (args.rows, 576)).astype(F32)
    x_bf16 = np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32))
    return [("bf16 rows", x_bf16, jnp.bfloat16, G_DEFAULT), ("f32 rows", x, jnp.float32, G_DEFAULT),
            ("planted ties", planted_ties(), jnp.float32, F32(1))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--pallas-rows", type=int, default=None, help="default: all rows on GPU, 64 on CPU")
    ap.add_argument("--no-child", action="store_true", help="skip the allow_excess_precision=false rerun")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return run_child(args)
    t0 = time.perf_counter()
    backend = jax.default_backend()
    print(f"backend {backend} ({jax.devices()[0].device_kind}), jax {jax.__version__}, "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    n_pallas = args.pallas_rows or (64 if backend == "cpu" else args.rows)
    failures = []
    for label, x, dtype, g in make_inputs(args):
        print(f"\n{label}: {x.shape}, global scale {g!r}")
        xj = jnp.asarray(x, dtype)
        want = oracle_stages(x, g)
        if label == "bf16 rows":
            print("  " + hlo_facts(formulation, xj, g))
        for name, kw in VARIANTS.items():
            got = jax.device_get(jax.jit(lambda a, s, kw=kw: formulation(a, s, **kw))(xj, g))
            if compare(name, got, want, x) and name in MUST_MATCH:
                failures.append(f"{label}/{name}")
        packed, sf = jax.device_get(jax.jit(quant.quantize_nvfp4)(xj, g))
        if compare("quantize_nvfp4", dict(sf=sf, packed=packed), want, x):
            failures.append(f"{label}/quantize_nvfp4")
        got_app, n = append_paths(xj, g, min(n_pallas, len(x)))
        for name, got in got_app.items():
            interp = name == "pallas" and backend == "cpu"
            if compare(f"{name}[{n}]" + ("i" if interp else ""), got, _oracle_rows(want, n), x[:n]):
                if interp:   # interpret mode divides with plain `/`, which XLA:CPU turns into `* fl32(1/6)`
                    print("      (pallas in interpret mode: its `amax*g / 6` is XLA:CPU's `* fl32(1/6)`; "
                          "on GPU it uses div.rn.f32. Not counted.)")
                else:
                    failures.append(f"{label}/{name}")
    if not args.no_child:
        with tempfile.TemporaryDirectory() as dump:
            flags = f"--xla_allow_excess_precision=false --xla_dump_to={dump}"
            print(f"\nchild process, XLA_FLAGS={flags!r} (bf16 rows):")
            env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + flags).strip())
            r = subprocess.run([sys.executable, __file__, "--child", "--rows", str(args.rows)], env=env,
                               capture_output=True, text=True, timeout=300)
            print("\n".join(ln for ln in r.stdout.splitlines()) or r.stderr[-2000:])
            ptx = "".join(open(f).read() for f in glob.glob(os.path.join(dump, "*.ptx")))
            if ptx:
                print("  PTX f32 divisions in that program: " + ", ".join(
                    f"{k} x{ptx.count(k)}" for k in ("div.full.f32", "div.rn.f32", "div.approx", "rcp.rn.f32",
                                                     "rcp.approx")))
            else:
                print("  (no PTX dumped on this backend)")
    print(f"\n{'OK' if not failures else 'MISMATCH: ' + ', '.join(failures)}: library / quantize_nvfp4 / append_kv "
          f"/ pallas vs the numpy oracle ({time.perf_counter() - t0:.1f} s)")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
