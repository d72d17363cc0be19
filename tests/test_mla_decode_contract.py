"""Shared contract test of ``ops.mla_decode`` (HELIX_SEMANTICS.md §5, R1, R2, R19) for every backend.

CPU (CI): ``reference``, ``ffi`` (C++ CPU handler; a missing library FAILS, it never skips) and
``pallas`` (``interpret=True``, small shapes). GPU (``-m gpu`` on the H200): ``ffi`` (CUDA kernel) and
``pallas`` (Triton), up to B=128 and L=128K. The oracle is float64 numpy over the paged pool.
Pools carry NaN in unused pages and in slots past every token's bound, so a read outside the valid
region (or a masked 0 * NaN) shows up as NaN.
"""
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helix_jax.cache import MLAPages
from helix_jax.ops.mla_decode import mla_decode

ROOT = pathlib.Path(__file__).resolve().parents[1]

SCALE = 1.0 / np.sqrt(192.0)


def oracle(q_lat, q_rope, c_lat, k_rope, page_table, bounds, scale):
    """float64 bounded decode over the paged pool; ``(0, -inf)`` for bound-0 rows."""
    q = np.concatenate([np.asarray(q_lat, np.float64), np.asarray(q_rope, np.float64)], -1)
    kv = np.concatenate([np.asarray(c_lat, np.float64), np.asarray(k_rope, np.float64)], -1)
    b_, g_, h_, _ = q.shape
    p = kv.shape[1]
    o = np.zeros((b_, g_, h_, 512))
    lse = np.full((b_, g_, h_), -np.inf)
    for b in range(b_):
        n = int(bounds[b].max())
        if n == 0:
            continue
        slots = np.arange(n)
        k = kv[np.asarray(page_table)[b, slots // p], slots % p]          # [n, 576] local-slot order
        for g in range(g_):
            nb = int(bounds[b, g])
            if nb == 0:
                continue
            logits = scale * q[b, g] @ k[:nb].T                               # [H, nb]
            m = logits.max(-1, keepdims=True)
            w = np.exp(logits - m)
            o[b, g] = (w @ k[:nb, :512]) / w.sum(-1, keepdims=True)
            lse[b, g] = m[:, 0] + np.log(w.sum(-1))
    return o, lse


def make_case(rng, *, bounds, H, P, npp, dtype=jnp.bfloat16, spare_pages=3):
    """Random queries and pool; pages in random order; NaN wherever nothing may be read.

    Each sequence gets fresh pages for its live slots; its table entries past them point at
    spare all-NaN pages (a kernel that reads past the bound, or masks by 0 * value, sees NaN).
    """
    bounds = np.asarray(bounds, np.int32)
    B, G = bounds.shape
    need = [-(-int(bounds[b].max()) // P) for b in range(B)]
    N = sum(need) + spare_pages
    perm = rng.permutation(N).astype(np.int32)
    spare = perm[sum(need):]
    table = rng.choice(spare, size=(B, npp)).astype(np.int32)
    start = 0
    for b in range(B):
        table[b, : need[b]] = perm[start: start + need[b]]
        start += need[b]
    c_lat = rng.standard_normal((N, P, 512), np.float32)
    k_rope = rng.standard_normal((N, P, 64), np.float32)
    live = np.zeros((N, P), bool)
    for b in range(B):
        slots = np.arange(int(bounds[b].max()))
        live[table[b, slots // P], slots % P] = True
    c_lat[~live] = np.nan   # spare pages, slots past every bound of their sequence
    k_rope[~live] = np.nan
    q_lat = rng.standard_normal((B, G, H, 512), np.float32)
    q_rope = rng.standard_normal((B, G, H, 64), np.float32)
    arrs = [jnp.asarray(x, dtype) for x in (q_lat, q_rope, c_lat, k_rope)]
    return dict(q_lat=arrs[0], q_rope=arrs[1], c_lat=arrs[2], k_rope=arrs[3],
                page_table=jnp.asarray(table), bounds=jnp.asarray(bounds))


def run(case, implementation, scale=SCALE):
    """Jitted call; the allocator is first filled with NaN buffers of the output sizes (poison)."""
    b, g, h, dl = case["q_lat"].shape
    poison = [jnp.full((b, g, h, dl), jnp.nan, case["q_lat"].dtype), jnp.full((b, g, h), jnp.nan, jnp.float32)]
    jax.block_until_ready(poison)
    del poison

    @jax.jit
    def f(ql, qr, cl, kr, pt, bd):
        return mla_decode(ql, qr, MLAPages(cl, kr), pt, kv_bounds=bd, softmax_scale=scale,
                          implementation=implementation)

    o, lse = f(case["q_lat"], case["q_rope"], case["c_lat"], case["k_rope"], case["page_table"], case["bounds"])
    return np.asarray(o.astype(jnp.float32), np.float64), np.asarray(lse, np.float64)


def check(case, o, lse, *, scale=SCALE):
    args = [np.asarray(case[k].astype(jnp.float32)) for k in ("q_lat", "q_rope", "c_lat", "k_rope")]
    ref_o, ref_lse = oracle(*args, np.asarray(case["page_table"]), np.asarray(case["bounds"]), scale)
    assert o.shape == ref_o.shape and lse.shape == ref_lse.shape
    empty = np.broadcast_to((np.asarray(case["bounds"]) == 0)[:, :, None], lse.shape)
    assert not np.isnan(o).any(), "NaN in o (unwritten output or a masked read of a NaN slot)"
    assert not np.isnan(lse).any(), "NaN in lse"
    assert np.all(lse[empty] == -np.inf), "bound-0 rows must have lse = -inf"
    assert np.all(o[empty] == 0.0), "bound-0 rows must have o = 0"
    assert np.all(np.isfinite(lse[~empty])), "non-empty rows must have a finite lse"
    f32 = case["q_lat"].dtype == jnp.float32
    tol_o, tol_lse = (1e-5, 1e-4) if f32 else (2e-2, 2e-2)
    live = ~empty
    if live.any():
        err = np.linalg.norm(o[live] - ref_o[live]) / np.linalg.norm(ref_o[live])
        assert err < tol_o, f"o relative error {err:.2e} >= {tol_o}"
        lse_err = np.max(np.abs(lse[live] - ref_lse[live]))
        assert lse_err < tol_lse, f"lse max abs error {lse_err:.2e} >= {tol_lse}"


# Spec examples A and B (cp=2, P=4, G=4): per-rank bounds that differ from the implicit causal bound
# K-(G-1)+j, including example B's rank-1 rows with bound 0 (R1, R2).
EXAMPLE_BOUNDS = [[4, 4, 5, 6],   # A, rank 0 (implicit [3,4,5,6])
                  [3, 4, 4, 4],   # A, rank 1 (implicit [1,2,3,4]) = B, rank 0
                  [0, 0, 1, 2],   # B, rank 1 (implicit [-1,0,1,2])
                  [0, 0, 0, 0]]   # a sequence this rank owns nothing of


def _implicit(bounds):
    k = bounds.max(1, keepdims=True)
    g = bounds.shape[1]
    return k - (g - 1) + np.arange(g)[None, :]


def test_examples_differ_from_implicit_bound():
    b = np.asarray(EXAMPLE_BOUNDS[:3])
    assert np.all((b != _implicit(b)).any(axis=1))


CPU_BACKENDS = ["reference", "ffi", "pallas"]


@pytest.mark.parametrize("implementation", CPU_BACKENDS)
def test_spec_examples(implementation, rng):
    case = make_case(rng, bounds=EXAMPLE_BOUNDS, H=3, P=4, npp=2)
    check(case, *run(case, implementation))


@pytest.mark.parametrize("implementation", ["reference", "ffi"])
@pytest.mark.parametrize("G", [1, 2, 3, 5, 8])
def test_random_groups(implementation, G, rng):
    """Unbalanced lengths that straddle pages, a zero-bound row and a fully empty sequence."""
    P, npp = 16, 5
    long_ = int(rng.integers(60, npp * P - G)) + np.arange(G)
    short = np.minimum(int(rng.integers(1, 20)) + np.arange(G), npp * P)
    mixed = np.arange(G) * 7
    bounds = np.stack([long_, short, mixed, np.zeros(G, int)]).astype(np.int32)
    case = make_case(rng, bounds=bounds, H=int(rng.integers(2, 5)), P=P, npp=npp)
    check(case, *run(case, implementation))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
def test_ffi_cpu_dtypes(dtype, rng):
    case = make_case(rng, bounds=[[37, 38, 39], [1, 0, 16]], H=2, P=16, npp=3, dtype=dtype)
    check(case, *run(case, "ffi"))


def test_pallas_interpret_random(rng):
    """Pallas in interpret mode on a small unbalanced batch with G=3 (rows straddle a tile)."""
    bounds = np.array([[45, 46, 47], [0, 1, 2], [16, 16, 16]], np.int32)
    case = make_case(rng, bounds=bounds, H=6, P=16, npp=3)
    check(case, *run(case, "pallas"))


def test_pallas_interpret_pages_above_64_tokens(rng):
    """P=128: the kernel walks each page in two 64-token chunks (NaN past every bound stays unread)."""
    bounds = np.array([[0, 63, 64], [129, 191, 256], [200, 128, 65]], np.int32)
    case = make_case(rng, bounds=bounds, H=2, P=128, npp=2)
    check(case, *run(case, "pallas"))


def test_ffi_scale_attribute_reaches_kernel(rng):
    """A different softmax_scale must change the result exactly as the oracle says (attribute wiring)."""
    case = make_case(rng, bounds=[[20, 21]], H=2, P=16, npp=2)
    check(case, *run(case, "ffi", scale=0.31), scale=0.31)


def test_ffi_under_shard_map(rng):
    """The FFI op runs per rank inside shard_map: each rank decodes its own pool and table."""
    from jax.sharding import PartitionSpec as P
    cp = 2
    mesh = jax.make_mesh((cp,), ("cp",), axis_types=(jax.sharding.AxisType.Explicit,), devices=jax.devices()[:cp])
    cases = [make_case(rng, bounds=b, H=2, P=16, npp=2, spare_pages=1) for b in ([[20, 21], [0, 5]], [[3, 4], [31, 32]])]
    shard = jax.sharding.NamedSharding(mesh, P("cp"))
    stack = {k: jax.device_put(jnp.stack([c[k] for c in cases]), shard) for k in cases[0]}

    def body(ql, qr, cl, kr, pt, bd):
        o, lse = mla_decode(ql[0], qr[0], MLAPages(cl[0], kr[0]), pt[0], kv_bounds=bd[0], softmax_scale=SCALE,
                            implementation="ffi")
        return o[None], lse[None]

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("cp"),) * 6, out_specs=(P("cp"), P("cp"))))
    o, lse = f(*(stack[k] for k in ("q_lat", "q_rope", "c_lat", "k_rope", "page_table", "bounds")))
    o = np.asarray(o.astype(jnp.float32), np.float64)
    lse = np.asarray(lse, np.float64)
    for r, c in enumerate(cases):
        check(c, o[r], lse[r])


def test_ffi_cuda_lowering_emits_custom_call(rng):
    """The CUDA lowering (no GPU needed) emits the custom call with its operands and attribute."""
    from helix_jax.ops.mla_decode import ffi as ffi_backend
    case = make_case(rng, bounds=[[64, 65]], H=4, P=64, npp=2)

    def f(ql, qr, cl, kr, pt, bd):
        return ffi_backend.mla_decode(ql, qr, cl, kr, pt, bd, 0.125)

    args = [case[k] for k in ("q_lat", "q_rope", "c_lat", "k_rope", "page_table", "bounds")]
    text = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    lines = [ln for ln in text.splitlines() if "custom_call" in ln and "helix_mla_decode" in ln]
    assert len(lines) == 1, text   # only the CUDA branch of platform_dependent is lowered
    line = lines[0]
    assert "mhlo.backend_config = {softmax_scale = 1.250000e-01 : f32}" in line, line  # typed-FFI attribute
    ws = ffi_backend.workspace_bytes(1, 2 * 4)
    assert "tensor<1x2x4x512xbf16>, tensor<1x2x4x64xbf16>, tensor<5x64x512xbf16>, tensor<5x64x64xbf16>, " \
           f"tensor<1x2xi32>, tensor<1x2xi32>) -> (tensor<1x2x4x512xbf16>, tensor<1x2x4xf32>, tensor<{ws}xui8>)" \
           in line, line


def test_explicit_ffi_without_library_names_build_command(monkeypatch, tmp_path):
    from helix_jax import _ffi
    from helix_jax.ops.mla_decode import ffi as ffi_backend
    monkeypatch.setattr(_ffi, "lib_dirs", lambda: [tmp_path])
    ok, why = ffi_backend.availability("cpu")
    assert not ok and "bash ffi/build.sh" in why
    from helix_jax.ops.mla_decode import api
    with pytest.raises(ValueError, match="bash ffi/build.sh"):
        api._resolve("ffi", "cpu")


# ---------------------------------------------------------------- GPU (run on the H200 with -m gpu)
GPU_CASES = [
    # (B, G, H, P, lengths): lengths per sequence; bounds per token = len - (G-1) + j with some rows cut to 0
    (1, 1, 128, 64, [65536]),
    (1, 1, 16, 64, [131072]),
    (3, 4, 128, 64, [131072, 70, 1]),
    (8, 8, 16, 16, [1000, 64, 63, 65, 4097, 17, 0, 2222]),
    (16, 2, 128, 64, [65536] + [100] * 15),
    (128, 1, 16, 64, list(range(1, 4097, 32))),
    (128, 4, 128, 64, [257] * 127 + [8192]),
    # row-tile counts whose groups do not divide the device's units (session 39): 16 row tiles in 1 x 2 clusters (8 parts
    # of 66 clusters) and 5, an odd count, without clusters (26 parts of 132 SMs)
    (2, 8, 128, 64, [20000, 3000]),
    (4, 5, 64, 64, [5000, 64, 1, 9000]),
    # 132 parts over 490 tiles (up to ~67 segments per sequence) and 256 rows: mla_combine with 8 warps per row
    (4, 4, 16, 64, [8192, 3000, 65, 20000]),
]


def gpu_case(rng, B, G, H, P, lens, dtype=jnp.bfloat16):
    """The pool and bounds of one GPU_CASES entry (also used by benchmarks/mla_decode_repeat.py)."""
    lens = np.asarray(lens)
    bounds = np.maximum(lens[:, None] - (G - 1) + np.arange(G)[None, :], 0)
    bounds[:, 0] = np.where(np.arange(B) % 3 == 2, 0, bounds[:, 0])   # zero-bound rows beside live ones
    bounds = np.minimum(bounds + (np.arange(G)[None, :] % 2), max(lens.max(), 1))  # != implicit bound
    npp = -(-int(bounds.max()) // P)
    return make_case(rng, bounds=bounds, H=H, P=P, npp=max(npp, 1), dtype=dtype, spare_pages=2)


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", ["ffi", "pallas"])
@pytest.mark.parametrize("B,G,H,P,lens", GPU_CASES)
def test_gpu_contract(implementation, B, G, H, P, lens, rng):
    if jax.default_backend() != "gpu":
        pytest.fail("the gpu-marked tests need a GPU backend")
    case = gpu_case(rng, B, G, H, P, lens)
    check(case, *run(case, implementation))


@pytest.mark.gpu
@pytest.mark.parametrize("B,G,H,P,lens", [(3, 4, 128, 64, [131072, 70, 1]), (2, 8, 128, 64, [5000, 127]),
                                           (2, 2, 128, 64, [9000, 130])])
def test_gpu_contract_f16(B, G, H, P, lens, rng):
    """f16 queries and pages at G*H >= 256, where the default runs the multicast seesaw (the f16 instantiations of the
    16-bit seesaw, whose bf16 twins GPU_CASES covers; test_gpu_contract_pair_schedule runs the f16 pair kernels), a
    partial last tile among them."""
    if jax.default_backend() != "gpu":
        pytest.fail("the gpu-marked tests need a GPU backend")
    case = gpu_case(rng, B, G, H, P, lens, dtype=jnp.float16)
    check(case, *run(case, "ffi"))


def rising_case(rng, B, G, H, P, lens, dtype=jnp.bfloat16):
    """gpu_case's pool with logits that climb along each sequence in steps of every size: latent dims 0..63 of token t
    get r(t) = 0.05 t / 64 (a slow ramp) + 2.5 floor(t / 640) (a jump every 10 tiles), and the queries weigh those dims
    with |N(0, 1)| in even heads (a row's max rises by ~0.27 log2 units per tile and ~13 at each jump) and -|N(0, 1)|
    in odd heads (logits that fall). The seesaw's lazy pass (exponentials against the running max, no row max) then
    holds P values far above 1 and must fall back to the exact pass where a tile's sums outgrow its cap."""
    case = gpu_case(rng, B, G, H, P, lens, dtype=dtype)
    c_lat = np.asarray(case["c_lat"].astype(jnp.float32)).copy()
    table = np.asarray(case["page_table"])
    for b in range(B):
        t = np.arange(int(np.asarray(case["bounds"])[b].max()))
        c_lat[table[b, t // P], t % P, :64] += (0.05 * t / 64 + 2.5 * (t // 640))[:, None].astype(np.float32)
    q_lat = np.asarray(case["q_lat"].astype(jnp.float32)).copy()
    sign = np.where(np.arange(H) % 2 == 0, 1.0, -1.0)[None, None, :, None]
    q_lat[..., :64] = sign * np.abs(q_lat[..., :64])
    return dict(case, c_lat=jnp.asarray(c_lat, dtype), q_lat=jnp.asarray(q_lat, dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("B,G,H,P,lens", [(2, 1, 128, 64, [64 * 40 + 17, 64 * 23]), (2, 4, 64, 64, [64 * 40, 1500]),
                                           (3, 4, 16, 64, [64 * 40 + 5, 900, 64])])
def test_gpu_contract_rising_max(B, G, H, P, lens, dtype, rng):
    """The 16-bit seesaws (multicast at H=128, the others at H=64 / 16) on rising_case's logits, against the float64
    oracle with the contract's tolerances."""
    if jax.default_backend() != "gpu":
        pytest.fail("the gpu-marked tests need a GPU backend")
    case = rising_case(rng, B, G, H, P, lens, dtype=dtype)
    o, lse = run(case, "ffi")
    check(case, o, lse)


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8_e4m3", "nvfp4"])
def test_helix_mla_attention_routes_to_ffi(kv_dtype, rng):
    """helix_mla_attention(..., implementation="ffi") runs the CPU handler (float, fp8 or nvfp4 pages) per rank
    inside shard_map and equals the reference path. ("bf16" = unquantized pages in the f32 test dtype.)"""
    import helix_jax as hj
    cp, P, G, H, max_len = 2, 4, 3, 4, 40
    lens = np.array([5, 17])
    mesh = hj.make_cp_mesh(cp)
    kv = jnp.asarray(rng.standard_normal((2, max_len, 576)), jnp.float32)
    q = jnp.asarray(rng.standard_normal((2, G, H, 576)), jnp.float32)
    cache = hj.HelixMLACache.from_global(kv[..., :512], kv[..., 512:], lens, mesh=mesh, page_size=P, max_len=max_len,
                                         kv_dtype=kv_dtype)
    pos = lens[:, None] + np.arange(G)
    new = kv[np.arange(2)[:, None], pos]
    outs = {impl: hj.helix_mla_attention(cache, q[..., :512], q[..., 512:], new[..., :512], new[..., 512:], pos,
                                         softmax_scale=SCALE, implementation=impl)[:2]
            for impl in ("ffi", "reference")}
    for a, b in zip(outs["ffi"], outs["reference"]):
        a, b = np.asarray(a), np.asarray(b)
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


def test_repeat_script_small():
    """benchmarks/mla_decode_repeat.py (oracle + bitwise rerun check) runs and passes on a small case."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("mla_decode_repeat", ROOT / "benchmarks" / "mla_decode_repeat.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--small", "--runs", "2"]) == 0


def test_profile_script_small(capsys):
    """benchmarks/mla_decode_profile.py (the Nsight Compute target) runs the benchmark's call on a small nvfp4 case and
    rejects non-positive sizes by name."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("mla_decode_profile", ROOT / "benchmarks" / "mla_decode_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    backend = "ffi" if jax.default_backend() == "gpu" else "xla"
    assert mod.main(["--backend", backend, "--kv-dtype", "nvfp4", "--B", "2", "--L", "256", "--H", "16", "--G", "2",
                     "--calls", "2"]) == 0
    assert "2 calls of" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        mod.main(["--calls", "0"])
    assert "--calls must be >= 1" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("load", ["tma_evict_first", "cpasync", "tma", "tma_multicast"])
def test_gpu_contract_load_paths(load):
    """Every GPU contract case with each KV load path of the seesaw kernel (HELIX_MLA_DECODE_LOAD is read once
    per process: a subprocess), three calls each, against the oracle and bitwise against the first (a result
    that changes between identical calls is a race)."""
    import subprocess
    env = dict(os.environ, HELIX_MLA_DECODE_LOAD=load)
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mla_decode_repeat.py"), "--runs", "3"],
                         env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]


@pytest.mark.gpu
@pytest.mark.parametrize("sched,load,pair_mc,dtype", [
    ("pair", "auto", "right", "bf16"), ("pair", "tma_evict_first", "right", "bf16"), ("pair", "tma", "right", "bf16"),
    ("pair", "tma_multicast", "right", "bf16"), ("pair", "tma_multicast", "both", "bf16"),
    ("pair", "tma_multicast", "left", "bf16"), ("pair", "auto", "right", "f16"), ("seesaw", "auto", "right", "bf16")])
def test_gpu_contract_pair_schedule(sched, load, pair_mc, dtype):
    """Every GPU contract case under HELIX_MLA_DECODE_SCHED=pair (opt-in since session 38: the default runs the seesaw
    everywhere) with each load path it runs on (auto: multicast issued by producer warps where the row tiles pair, else
    consumer-issued evict-first copies; tma_evict_first: consumer-issued; tma_multicast: multicast where they pair;
    tma: the producer's whole parts), in f16 too (the f16 pair kernels), and under an explicit seesaw;
    HELIX_MLA_DECODE_PAIR_MC right (default) / left: one half loaded by each CTA alone, both: both multicast;
    subprocesses (read once per process), three calls each, against the oracle and bitwise against the first."""
    import subprocess
    env = dict(os.environ, HELIX_MLA_DECODE_SCHED=sched, HELIX_MLA_DECODE_LOAD=load, HELIX_MLA_DECODE_PAIR_MC=pair_mc)
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mla_decode_repeat.py"), "--runs", "3",
                          "--dtype", dtype], env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]


@pytest.mark.gpu
@pytest.mark.parametrize("var,bad,message", [
    ("HELIX_MLA_DECODE_SCHED", "pairs", "HELIX_MLA_DECODE_SCHED must be auto, seesaw or pair"),
    ("HELIX_MLA_DECODE_LOAD", "tma_bogus",
     "HELIX_MLA_DECODE_LOAD must be auto, cpasync, tma_evict_first, tma or tma_multicast"),
    ("HELIX_MLA_DECODE_PAIR_MC", "all", "HELIX_MLA_DECODE_PAIR_MC must be right, both or left"),
], ids=["sched", "load", "pair_mc"])
def test_gpu_bad_env_names_the_variable(var, bad, message):
    """A bad HELIX_MLA_DECODE_SCHED / _LOAD / _PAIR_MC value is an error naming the variable and its values, not a silent
    default (read once per process: a subprocess)."""
    import subprocess
    env = dict(os.environ, **{var: bad})
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mla_decode_repeat.py"), "--small", "--runs", "1"],
                         env=env, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-4000:]
    assert message in out, out[-4000:]


@pytest.mark.gpu
def test_gpu_tma_l2_promotion_256_and_bad_value():
    """HELIX_MLA_DECODE_TMA_L2 (the KV tensor maps' L2 promotion; read once per process: subprocesses): 256 passes
    the GPU contract cases against the oracle and bitwise across calls; a bad value is an error naming the variable."""
    import subprocess
    script = [sys.executable, str(ROOT / "benchmarks" / "mla_decode_repeat.py")]
    res = subprocess.run(script + ["--runs", "2"], env=dict(os.environ, HELIX_MLA_DECODE_TMA_L2="256"),
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    res = subprocess.run(script + ["--small", "--runs", "1"], env=dict(os.environ, HELIX_MLA_DECODE_TMA_L2="512"),
                         capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-4000:]
    assert "HELIX_MLA_DECODE_TMA_L2 must be 128, 256 or none" in out, out[-4000:]


@pytest.mark.gpu
@pytest.mark.parametrize("cost", ["16", "64"])
def test_gpu_seg_cost_contract_and_formats(cost):
    """HELIX_MLA_DECODE_SEG_COST (the split-KV schedule's segment-start cost; read once per process: subprocesses)
    changes which tiles each CTA takes, never the result: the GPU contract cases (bf16) and the fp8 / nvfp4 determinism
    cases pass against the oracle and bitwise across calls under a cost other than the default."""
    import subprocess
    script = [sys.executable, str(ROOT / "benchmarks" / "mla_decode_repeat.py")]
    env = dict(os.environ, HELIX_MLA_DECODE_SEG_COST=cost)
    for extra in (["--runs", "2"], ["--suite", "formats", "--fmt", "fp8_e4m3", "--runs", "2"],
                  ["--suite", "formats", "--fmt", "nvfp4", "--runs", "2"]):
        res = subprocess.run(script + extra, env=env, capture_output=True, text=True, timeout=900)
        assert res.returncode == 0, " ".join(extra) + "\n" + res.stdout[-4000:] + res.stderr[-4000:]


@pytest.mark.gpu
@pytest.mark.parametrize("bad", ["0", "65", "8x"])
def test_gpu_bad_seg_cost_names_the_variable(bad):
    """A HELIX_MLA_DECODE_SEG_COST other than auto or an integer in 1..64 is an error naming the variable and its values."""
    import subprocess
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mla_decode_repeat.py"), "--small", "--runs", "1"],
                         env=dict(os.environ, HELIX_MLA_DECODE_SEG_COST=bad), capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-4000:]
    assert "HELIX_MLA_DECODE_SEG_COST must be auto or an integer from 1 to 64" in out, out[-4000:]
