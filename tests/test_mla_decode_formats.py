"""FP8 / NVFP4 KV pages in every ``mla_decode`` backend that declares them (HELIX_SEMANTICS.md §10, R1, R2).

CPU (CI): ``reference``, ``ffi`` (C++ CPU handlers of ``helix_mla_decode_fp8`` / ``_nvfp4``; a missing
library FAILS) and ``pallas`` (interpret mode). GPU (``-m gpu`` on the H200): the CUDA kernel and Pallas
Triton. The oracle is float64 numpy over the *dequantized* cache (dequantized independently, with the
float32 formulas of ``helix_jax.quant``), so every backend must agree to rounding level. Pages no token
may read (unreferenced pages, slots at or past a sequence's longest bound) hold random bytes, NaN codes
included; the outputs' buffers are poisoned with NaN before each call.
"""
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helix_jax import HelixMLACache, ledger, make_cp_mesh, quant
from helix_jax.cache import FP8Pages, NVFP4Pages
from helix_jax.ops.mla_decode import api, mla_decode
from test_kv_formats import (BUDGET, BUDGET_BOUNDS, R2_BOUNDS, R2_POS, dense_decode, gather_rows,
                             rel_error_vs_unquantized)

SCALE = 1.0 / np.sqrt(192.0)
FORMATS = ("fp8_e4m3", "nvfp4")
CPU_BACKENDS = ("reference", "ffi", "pallas")


def test_backends_declare_the_formats():
    for name in ("ffi", "pallas", "reference"):
        assert set(FORMATS) <= set(api.supported_kv_dtypes(api._backend_module(name))), name


def quantize_pool(fmt, x, s):
    """float ``x [N, P, 576]`` -> pages of ``fmt`` with per-tensor scale ``s``."""
    x = jnp.asarray(x, jnp.float32)
    sc = jnp.full((1,), s, jnp.float32)
    if fmt == "fp8_e4m3":
        q = quant.quantize_fp8(x, s)
        return FP8Pages(q[..., :512], q[..., 512:], sc)
    c, csf = quant.quantize_nvfp4(x[..., :512], s)
    k, ksf = quant.quantize_nvfp4(x[..., 512:], s)
    return NVFP4Pages(c, k, csf, ksf, sc)


def garbage(pages, dead, rng):
    """Random bytes (NaN codes included) in every row field where ``dead [N, P]`` is set."""
    out = {}
    for f, x in zip(pages._fields, pages):
        if x.ndim != 3:
            continue
        a = np.array(x).view(np.uint8).copy()
        junk = rng.integers(0, 256, a.shape, dtype=np.uint8)
        junk[..., 0] = 0x7F                       # at least one E4M3 NaN per dead row
        a[dead] = junk[dead]
        out[f] = jnp.asarray(a.view(x.dtype) if x.dtype != np.uint8 else a)
    return pages._replace(**out)


def make_case(fmt, rng, *, bounds, H, P, npp, spare=2, qdtype=jnp.float32, ramp=0.0):
    """Random queries and a quantized pool in random page order; garbage wherever nothing may be read. ``ramp`` > 0:
    smaller noise (0.5 N(0, 1)) plus ``ramp`` x token / 64 in latent dims 0..63, and queries positive there, so every
    row's logits rise along the sequence (its running max keeps moving)."""
    bounds = np.asarray(bounds, np.int32)
    B, G = bounds.shape
    need = [-(-int(bounds[b].max()) // P) for b in range(B)]
    N = sum(need) + spare
    perm = rng.permutation(N).astype(np.int32)
    table = rng.choice(perm[sum(need):], size=(B, npp)).astype(np.int32)
    start = 0
    for b in range(B):
        table[b, :need[b]] = perm[start:start + need[b]]
        start += need[b]
    live = np.zeros((N, P), bool)
    for b in range(B):
        slots = np.arange(int(bounds[b].max()))
        live[table[b, slots // P], slots % P] = True
    x = rng.standard_normal((N, P, 576)).astype(np.float32) * (0.5 if ramp else 2)
    if ramp:
        for b in range(B):
            t = np.arange(int(bounds[b].max()))
            x[table[b, t // P], t % P, :64] += (ramp * t / 64).astype(np.float32)[:, None]
    s = (448.0 if fmt == "fp8_e4m3" else 2688.0) / float(np.abs(x[live]).max() if live.any() else 1.0)
    pages = garbage(quantize_pool(fmt, x, s), ~live, rng)
    q = rng.standard_normal((B, G, H, 576)).astype(np.float32)
    if ramp:
        q[..., :64] = np.abs(q[..., :64])
    return dict(q_lat=jnp.asarray(q[..., :512], qdtype), q_rope=jnp.asarray(q[..., 512:], qdtype), pages=pages,
                table=jnp.asarray(table), bounds=jnp.asarray(bounds))


def run(case, implementation):
    """Jitted call after filling the allocator with NaN buffers of the output sizes (poison)."""
    b, g, h, dl = case["q_lat"].shape
    poison = [jnp.full((b, g, h, dl), jnp.nan, case["q_lat"].dtype), jnp.full((b, g, h), jnp.nan, jnp.float32)]
    jax.block_until_ready(poison)
    del poison
    f = jax.jit(functools.partial(mla_decode, softmax_scale=SCALE, implementation=implementation))
    o, lse = f(case["q_lat"], case["q_rope"], case["pages"], case["table"], kv_bounds=case["bounds"])
    return np.asarray(o.astype(jnp.float32), np.float64), np.asarray(lse, np.float64)


def case_queries(case):
    """The case's queries as one float32 array [B, G, H, 576]."""
    return np.concatenate([np.asarray(case["q_lat"].astype(jnp.float32)),
                           np.asarray(case["q_rope"].astype(jnp.float32))], -1)


def oracle(case, bounds=None):
    q = case_queries(case)
    bounds = np.asarray(case["bounds"] if bounds is None else bounds)
    rows = gather_rows(case["pages"], np.asarray(case["table"]))
    live = np.arange(rows.shape[1])[None, :] < bounds.max(1)[:, None]
    rows = np.where(live[..., None], rows, 0.0)      # the oracle never touches garbage either
    return dense_decode(q, rows, bounds)


def errors(case, o, lse, ref):
    """(o relative error, lse max abs error) over the rows with a nonzero bound, against ``ref = oracle(case)``."""
    ref_o, ref_lse = ref
    live = np.broadcast_to((np.asarray(case["bounds"]) > 0)[:, :, None], lse.shape)
    return (np.linalg.norm(o[live] - ref_o[live]) / np.linalg.norm(ref_o[live]),
            np.max(np.abs(lse[live] - ref_lse[live])))


def check(case, o, lse, *, tol_o, tol_lse, ref=None):
    """The outputs against the oracle (``ref``: ``oracle(case)`` computed once by a caller checking many calls)."""
    empty = np.broadcast_to((np.asarray(case["bounds"]) == 0)[:, :, None], lse.shape)
    assert not np.isnan(o).any() and not np.isnan(lse).any(), "NaN in the outputs"
    assert np.all(lse[empty] == -np.inf) and np.all(o[empty] == 0.0), "bound-0 rows must give (0, -inf)"
    assert np.all(np.isfinite(lse[~empty]))
    err, lse_err = errors(case, o, lse, oracle(case) if ref is None else ref)
    assert err < tol_o, f"o relative error {err:.2e} >= {tol_o}"
    assert lse_err < tol_lse, f"lse max abs error {lse_err:.2e} >= {tol_lse}"


# -- CPU: every backend vs the float64 oracle on the dequantized cache --------------------------
@pytest.mark.parametrize("implementation", CPU_BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_cpu_backend_vs_float64_oracle(fmt, implementation, rng):
    cap = 3 * 8
    bounds = [[0, 5, 9], [cap - 2, cap - 1, cap], [8, 8, 13], [0, 0, 0]]
    case = make_case(fmt, rng, bounds=bounds, H=4, P=8, npp=3)
    o, lse = run(case, implementation)
    check(case, o, lse, tol_o=2e-6, tol_lse=1e-5)    # float32 rounding level


@pytest.mark.parametrize("fmt", FORMATS)
def test_pallas_cpu_pages_above_64_tokens(fmt, rng):
    """P=128: the Pallas kernels walk a page in two 64-token chunks; bounds inside either chunk, on the chunk
    and page edges, and a zero-bound row."""
    bounds = [[0, 63, 64], [129, 191, 256], [200, 128, 65]]
    case = make_case(fmt, rng, bounds=bounds, H=2, P=128, npp=2)
    o, lse = run(case, "pallas")
    check(case, o, lse, tol_o=2e-6, tol_lse=1e-5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_ffi_cpu_bf16_queries(fmt, rng):
    case = make_case(fmt, rng, bounds=[[3, 17], [1, 0]], H=3, P=8, npp=3, qdtype=jnp.bfloat16)
    o, lse = run(case, "ffi")
    check(case, o, lse, tol_o=8e-3, tol_lse=1e-4)    # bf16 output rounding


# -- R2: bounds that differ from the implicit causal bound, per format and backend ----------------
@pytest.mark.parametrize("implementation", CPU_BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_r2_examples_change_the_result_exactly_as_the_reference(fmt, implementation, rng):
    """Examples A and B (cp=2, P=4, G=4): the true per-token bounds and the buggy implicit ones
    ``K-(G-1)+j`` each give the oracle's result for those bounds, and differ exactly where the bounds do."""
    mesh = make_cp_mesh(2)
    kv = rng.standard_normal((2, 16, 576)).astype(np.float32)
    q = rng.standard_normal((2, 4, 4, 576)).astype(np.float32)
    cache = HelixMLACache.from_global(kv[..., :512], kv[..., 512:], R2_POS[:, -1] + 1, mesh=mesh,
                                      page_size=4, max_len=16, kv_dtype=fmt)
    for r in (0, 1):
        pages, table = cache.rank_pages(r)
        bounds = np.asarray(ledger.kv_bounds(R2_POS, r, page_size=4, cp_size=2))
        np.testing.assert_array_equal(bounds, R2_BOUNDS[r])
        implicit = np.maximum(bounds[:, -1:] - 3 + np.arange(4), 0).astype(np.int32)
        outs = {}
        for name, bd in (("true", bounds), ("implicit", implicit)):
            case = dict(q_lat=jnp.asarray(q[..., :512]), q_rope=jnp.asarray(q[..., 512:]), pages=pages,
                        table=jnp.asarray(table), bounds=jnp.asarray(bd, jnp.int32))
            outs[name], lse = run(case, implementation)
            check(case, outs[name], lse, tol_o=2e-6, tol_lse=1e-5)
        differ = bounds != implicit
        assert differ.any()
        gap = np.abs(outs["true"] - outs["implicit"]).max(axis=(-1, -2))
        assert np.all(gap[differ] > 1e-3) and np.all(gap[~differ] == 0)


# -- lowering for CUDA from this CPU host ---------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_ffi_quantized_cuda_lowering_emits_custom_call(fmt, rng):
    from helix_jax.ops.mla_decode import ffi as ffi_backend
    case = make_case(fmt, rng, bounds=[[64, 65]], H=4, P=64, npp=2, qdtype=jnp.bfloat16)

    def f(ql, qr, pages, pt, bd):
        return ffi_backend.mla_decode_quantized(ql, qr, pages, pt, bd, 0.125)

    args = (case["q_lat"], case["q_rope"], case["pages"], case["table"], case["bounds"])
    text = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    target = ffi_backend.QUANT_TARGETS[fmt][0]
    lines = [ln for ln in text.splitlines() if "custom_call" in ln and f"@{target}" in ln]
    assert len(lines) == 1, text
    n = case["pages"].c_latent.shape[0]
    pools = ("tensor<{n}x64x512xf8E4M3FN>, tensor<{n}x64x64xf8E4M3FN>" if fmt == "fp8_e4m3" else
             "tensor<{n}x64x256xui8>, tensor<{n}x64x32xui8>, tensor<{n}x64x32xf8E4M3FN>, tensor<{n}x64x4xf8E4M3FN>")
    ws = ffi_backend.workspace_bytes(1, 2 * 4)
    want = (f"tensor<1x2x4x512xbf16>, tensor<1x2x4x64xbf16>, {pools.format(n=n)}, tensor<1xf32>, tensor<1x2xi32>, "
            f"tensor<1x2xi32>) -> (tensor<1x2x4x512xbf16>, tensor<1x2x4xf32>, tensor<{ws}xui8>)")
    assert want in lines[0], lines[0]
    assert "softmax_scale = 1.250000e-01 : f32" in lines[0]


@pytest.mark.parametrize("P", [64, 128])
@pytest.mark.parametrize("fmt", FORMATS)
def test_pallas_quantized_lowers_to_triton_for_h200(fmt, P, rng, monkeypatch):
    """The Triton lowering of the quantized Pallas kernel (not interpret mode) succeeds from this CPU host
    for an H200 target: catches ops Triton cannot lower (e.g. an int fill splatted into float8)."""
    from jax._src.pallas.triton import gpu_info
    from helix_jax.ops.mla_decode import pallas as pallas_backend
    h200 = gpu_info.get_gpu_info_from_version(gpu_info.GpuVersion.H200)
    monkeypatch.setattr(gpu_info, "get_gpu_info", lambda: h200)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")       # selects the Triton path
    case = make_case(fmt, rng, bounds=[[64, P + 1]], H=16, P=P, npp=2, qdtype=jnp.bfloat16)

    def f(ql, qr, pages, pt, bd):
        return pallas_backend.mla_decode_quantized(ql, qr, pages, pt, bd, 0.1)

    args = (case["q_lat"], case["q_rope"], case["pages"], case["table"], case["bounds"])
    text = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "stablehlo.custom_call @__gpu$xla.gpu.triton" in text


def test_ffi_handler_rejects_wrong_block_scale_dtype(rng):
    """The handler checks dtypes itself (a caller bypassing the API gets an error, not garbage)."""
    from helix_jax.ops.mla_decode import ffi as ffi_backend
    case = make_case("nvfp4", rng, bounds=[[5]], H=2, P=8, npp=1)
    bad = case["pages"]._replace(c_latent_sf=case["pages"].c_latent_sf.view(jnp.uint8))
    with pytest.raises(Exception, match="float8_e4m3fn"):
        jax.block_until_ready(ffi_backend.mla_decode_quantized(case["q_lat"], case["q_rope"], bad, case["table"],
                                                               case["bounds"], SCALE))


# -- GPU (run on the H200 with -m gpu) --------------------------------------------------------------
GPU_CASES = [
    # (B, G, H, P, lengths); bounds per token = len - (G-1) + j, some rows cut to 0, +1 on odd tokens
    (2, 4, 16, 64, [4097, 63]),
    (3, 1, 128, 64, [65536, 70, 1]),
    (8, 4, 16, 16, [1000, 64, 63, 65, 4097, 17, 0, 2222]),
    (16, 1, 128, 64, [257] * 15 + [8192]),
    # G*H <= 16: the CUDA raw-tile kernels (fp8: mla_small_q8, nvfp4: mla_small_q4; TMA loads where
    # P % 64 == 0, else cp.async), a 16-token verify group at H = 1 among them
    (4, 1, 16, 64, [65536, 70, 1, 3000]),
    (5, 2, 5, 16, [1000, 64, 0, 65, 4097]),
    (2, 16, 1, 64, [5000, 64]),
    # TMA loads inside a 128-token page (a tile at page offset 0 or 64); the Pallas kernels walk such pages in
    # 64-token chunks (an fp8 page of 128 tokens in one step asked Triton for 280 KB of shared memory)
    (3, 4, 4, 128, [4097, 65, 2]),
    # 16 < G*H <= 64 (fp8: mla_mid_q8s; the two cases above with G*H = 64 run it too, TMA and cp.async tiles):
    # 32 rows (consumer 1's S rows all padding), 40 rows in 128-token pages
    (3, 2, 16, 64, [4097, 65, 2]),
    (2, 5, 8, 128, [5000, 64]),
]
# G*H > 64 on fp8 pages: mla_mid_q8s / mla_mid_q8 run one CTA per 64 query rows (the H = 128 cases above too): 80 rows
# (the second row tile holds 16) on 16-token pages (cp.async tiles), 256 rows (four row tiles) in 128-token pages
GPU_CASES_FFI_ONLY = [
    (2, 5, 16, 16, [3000, 70]),
    (2, 4, 64, 128, [2500, 129]),
]
GPU_PARAMS = ([(impl,) + c for impl in ("ffi", "pallas") for c in GPU_CASES]
              + [("ffi",) + c for c in GPU_CASES_FFI_ONLY])


def gpu_lse_tol(fmt, implementation):
    """lse tolerance of the GPU format cases (natural log, absolute). 2e-2 (bf16 P and output rounding, as the bf16
    kernel) except the CUDA kernels on fp8 pages, whose S runs on fp8 tensor cores: Q as E4M3 terms and the tensor cores'
    short accumulator (~14 bits of a chain's largest product; mla_decode_cuda.cu, Fp8SFromEnv) put the lse up to
    2.0e-2 off on these cases (H200, session 17: 1.1-2.0e-2 over six seeds of the G*H = 64 and G*H = 16 ring cases,
    0.4-0.7e-2 where G*H > 64 takes the f32 chains) and up to 2.8e-2 on full-range codes (standalone driver): 3e-2."""
    return 3e-2 if fmt == "fp8_e4m3" and implementation == "ffi" else 2e-2


def gpu_formats_case(fmt, rng, B, G, H, P, lens, qdtype=jnp.bfloat16):
    """A GPU case: bounds per token = len - (G-1) + j, some rows cut to 0, +1 on odd tokens; bf16 queries by default."""
    if jax.default_backend() != "gpu":
        pytest.fail("the gpu-marked tests need a GPU backend")
    lens = np.asarray(lens)
    bounds = np.maximum(lens[:, None] - (G - 1) + np.arange(G)[None, :], 0)
    bounds[:, 0] = np.where(np.arange(B) % 3 == 2, 0, bounds[:, 0])
    bounds = np.minimum(bounds + (np.arange(G)[None, :] % 2), max(lens.max(), 1))
    npp = max(-(-int(bounds.max()) // P), 1)
    return make_case(fmt, rng, bounds=bounds, H=H, P=P, npp=npp, qdtype=qdtype)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("implementation,B,G,H,P,lens", GPU_PARAMS)
def test_gpu_formats(fmt, implementation, B, G, H, P, lens, rng):
    case = gpu_formats_case(fmt, rng, B, G, H, P, lens)
    o, lse = run(case, implementation)
    check(case, o, lse, tol_o=1e-2, tol_lse=gpu_lse_tol(fmt, implementation))


# f16 activations on quantized pages (every CUDA kernel has an f16 instantiation; the cases above use bf16 queries):
# G*H = 64 (fp8: mla_mid_q8s, nvfp4: pipe, the decoding seesaw once enabled for f16), G*H = 16 (mla_small_q8 /
# mla_small_q4), two row tiles.
F16_CASES = [
    (2, 4, 16, 64, [4097, 63]),
    (4, 1, 16, 64, [65536, 70, 1, 3000]),
    (3, 1, 128, 64, [65536, 70, 1]),
]


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("B,G,H,P,lens", F16_CASES)
def test_gpu_formats_f16_queries(fmt, B, G, H, P, lens, rng):
    case = gpu_formats_case(fmt, rng, B, G, H, P, lens, qdtype=jnp.float16)
    o, lse = run(case, "ffi")
    check(case, o, lse, tol_o=1e-2, tol_lse=gpu_lse_tol(fmt, "ffi"))


# Ring-wrapping (16 x 8192 tokens, G*H = 64), two row tiles (H = 128), a 16-row second tile on cp.async tiles, and the
# small-G*H raw-tile kernels (G*H = 16: mla_small_q8 / mla_small_q4, TMA tiles read by every consumer thread).
DETERMINISM_CASES = [
    (16, 4, 16, 64, [8192] * 16),
    (3, 1, 128, 64, [65536, 70, 1]),
    (2, 5, 16, 16, [3000, 70]),
    (16, 1, 16, 64, [8192] * 16),
]


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("B,G,H,P,lens", DETERMINISM_CASES)
def test_gpu_ffi_formats_are_deterministic(fmt, B, G, H, P, lens, rng):
    """Identical FFI calls on quantized pages give bitwise-identical outputs. A result that changes between calls is a
    race; compute-sanitizer's racecheck does not see TMA (async-proxy) writes, so a ring slot released while still read
    shows up here (session 16: an earlier release in mla_mid_q8s changed 30 of 30 reruns, racecheck reported none).
    It found the fp8 ring-wrapping case's race (session 17: generic loads of a ring slot still in flight when the slot
    went back to the TMA producer; fixed by a proxy fence, benchmarks/NOTES.md)."""
    case = gpu_formats_case(fmt, rng, B, G, H, P, lens)
    o0, lse0 = run(case, "ffi")
    tol_lse, ref = gpu_lse_tol(fmt, "ffi"), oracle(case)   # one float64 oracle for the five calls
    check(case, o0, lse0, tol_o=1e-2, tol_lse=tol_lse, ref=ref)
    # each call against the oracle too: how wrong a differing call is, not only whether it differs
    differ = rerun_differences(case, o0, lse0, lambda o, lse: check(case, o, lse, tol_o=1e-2, tol_lse=tol_lse, ref=ref))
    assert not differ, "; ".join(differ)


def rerun_differences(case, o0, lse0, also=None):
    """Calls 2..5 of the FFI op on ``case`` against the first call's (o0, lse0): one message per call whose outputs are not
    bitwise identical, and per call that ``also(o, lse)`` rejects (AssertionError)."""
    differ = []
    for call in range(2, 6):
        o, lse = run(case, "ffi")
        if not (np.array_equal(o, o0) and np.array_equal(lse, lse0)):
            rows = np.unique(np.argwhere(np.any(o != o0, axis=-1) | (lse != lse0))[:, :2], axis=0)
            differ.append(f"call {call}: {len(rows)} (sequence, token) pairs differ, max |o - o_1| "
                          f"{np.nanmax(np.abs(o - o0)):.3g}")
        if also is not None:
            try:
                also(o, lse)
            except AssertionError as e:
                differ.append(f"call {call} vs the oracle: {e}".splitlines()[0])
    return differ


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", ["ffi", "pallas"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("H", [16, 4, 32])  # G*H = 64, 16 (small-G*H kernels) and 128 (two 64-row tiles)
def test_gpu_r2_examples(fmt, implementation, H, rng):
    """R2 on the GPU kernels: page size 16 (the CUDA kernel's minimum), examples A/B bounds."""
    if jax.default_backend() != "gpu":
        pytest.fail("the gpu-marked tests need a GPU backend")
    for r in (0, 1):
        bounds = np.asarray(R2_BOUNDS[r], np.int32)
        implicit = np.maximum(bounds[:, -1:] - 3 + np.arange(4), 0).astype(np.int32)
        case = make_case(fmt, rng, bounds=bounds, H=H, P=16, npp=1, qdtype=jnp.bfloat16)
        outs = {}
        for name, bd in (("true", bounds), ("implicit", implicit)):
            c = dict(case, bounds=jnp.asarray(bd))
            outs[name], lse = run(c, implementation)
            check(c, outs[name], lse, tol_o=1e-2, tol_lse=gpu_lse_tol(fmt, implementation))
        differ = bounds != implicit
        gap = np.abs(outs["true"] - outs["implicit"]).max(axis=(-1, -2))
        assert np.all(gap[differ] > 1e-2) and np.all(gap[~differ] == 0)


def _formats_subprocess(env_update, select, *, stop_first=False):
    """Runs this file's GPU tests selected by ``-k select`` in a subprocess with ``env_update`` in its environment (the
    CUDA handler reads its HELIX_MLA_DECODE_* variables once per process); returns (returncode, stdout, stderr)."""
    import pathlib
    import subprocess
    import sys
    here = pathlib.Path(__file__).resolve().parent
    cmd = [sys.executable, "-m", "pytest", "-q"] + (["-x"] if stop_first else []) + [
        "-m", "gpu", str(here / "test_mla_decode_formats.py"), "-k", select]
    res = subprocess.run(cmd, env=dict(os.environ, **env_update), capture_output=True, text=True, timeout=900,
                         cwd=here.parent)
    return res.returncode, res.stdout, res.stderr


@pytest.mark.gpu
def test_gpu_fp8_s_f32_accumulation():
    """HELIX_MLA_DECODE_FP8_S=f32 (the fp8 raw-tile kernels' S as shorter fp8 chains added in f32; the default only where
    G*H > 64) passes every fp8 FFI GPU format case."""
    rc, out, err = _formats_subprocess({"HELIX_MLA_DECODE_FP8_S": "f32"}, "test_gpu_formats and fp8_e4m3 and ffi")
    assert rc == 0 and " passed" in out, out[-4000:] + err[-4000:]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["seesaw", "lockstep"])
def test_gpu_fp8_mid_kernel_variants(variant):
    """HELIX_MLA_DECODE_MID8 (fp8 pages at G*H > 16: mla_mid_q8s or mla_mid_q8) passes every fp8 FFI GPU format case
    (one to four row tiles) and the R2 examples."""
    rc, out, err = _formats_subprocess({"HELIX_MLA_DECODE_MID8": variant},
                                       "(test_gpu_formats or test_gpu_r2_examples) and fp8_e4m3 and ffi")
    assert rc == 0 and " passed" in out, out[-4000:] + err[-4000:]


@pytest.mark.gpu
def test_gpu_nvfp4_pipe_variant():
    """HELIX_MLA_DECODE_DEQUANT=pipe keeps nvfp4 pages at G*H > 16 on the 64-row dequantizing kernel (the default there
    is the seesaw kernel with a decoding producer where the page size is a multiple of 64, session 18); it passes
    every nvfp4 FFI GPU format case and the R2 examples."""
    rc, out, err = _formats_subprocess({"HELIX_MLA_DECODE_DEQUANT": "pipe"},
                                       "(test_gpu_formats or test_gpu_r2_examples) and nvfp4 and ffi")
    assert rc == 0 and " passed" in out, out[-4000:] + err[-4000:]


@pytest.mark.gpu
def test_gpu_nvfp4_bf16_math_variant():
    """HELIX_MLA_DECODE_NV4_MATH=bf16 runs the nvfp4 decoding seesaw with bf16 math for bf16 queries (codes decoded into
    bf16 tiles; the default rewrites Q as f16 and decodes into f16 tiles, 1.08x faster, session 20): it passes every
    nvfp4 FFI GPU format case, the R2 examples and the determinism reruns."""
    rc, out, err = _formats_subprocess({"HELIX_MLA_DECODE_NV4_MATH": "bf16"},
                                       "(test_gpu_formats or test_gpu_r2_examples or test_gpu_ffi_formats_are_deterministic)"
                                       " and nvfp4 and ffi")
    assert rc == 0 and " passed" in out, out[-4000:] + err[-4000:]


@pytest.mark.gpu
@pytest.mark.parametrize("math", ["f16", "bf16"])
def test_gpu_nvfp4_without_staging_slot_variant(math):
    """HELIX_MLA_DECODE_NV4_STAGE=off runs the nvfp4 decoding seesaw without its staging slot (the default loads the
    next tile's scales and first codes during this tile's decode, 1.06x faster, session 22) under either math: it passes
    every nvfp4 FFI GPU format case, the R2 examples, the determinism reruns and the f16-query cases."""
    rc, out, err = _formats_subprocess({"HELIX_MLA_DECODE_NV4_STAGE": "off", "HELIX_MLA_DECODE_NV4_MATH": math},
                                       "(test_gpu_formats or test_gpu_r2_examples or "
                                       "test_gpu_ffi_formats_are_deterministic or f16_queries) and nvfp4 and "
                                       "(ffi or f16_queries)")
    assert rc == 0 and " passed" in out, out[-4000:] + err[-4000:]


@pytest.mark.gpu
def test_gpu_fp8_decode_variant():
    """HELIX_MLA_DECODE_MID8=decode runs fp8 pages at G*H > 16 on the seesaw kernel with a decoding producer (E4M3 tiles
    converted in place to f16, f16 math; bf16 queries rewritten as f16) where the page size is a multiple of 64: it
    passes every fp8 FFI GPU format case, the R2 examples and the f16-query cases. (Slower than the default
    mla_mid_q8s, session 20; kept for experiments.)"""
    rc, out, err = _formats_subprocess({"HELIX_MLA_DECODE_MID8": "decode"},
                                       "(test_gpu_formats or test_gpu_r2_examples or test_gpu_ffi_formats_are_deterministic)"
                                       " and fp8_e4m3 and (ffi or f16_queries)")
    assert rc == 0 and " passed" in out, out[-4000:] + err[-4000:]


@pytest.mark.gpu
@pytest.mark.parametrize("fmt,var,value,message", [
    ("fp8_e4m3", "HELIX_MLA_DECODE_FP8_S", "bf16", "HELIX_MLA_DECODE_FP8_S must be auto, fast or f32"),
    ("fp8_e4m3", "HELIX_MLA_DECODE_FP8_Q", "three", "HELIX_MLA_DECODE_FP8_Q must be two or one"),
    ("fp8_e4m3", "HELIX_MLA_DECODE_MID8", "fast", "HELIX_MLA_DECODE_MID8 must be auto, seesaw, lockstep or decode"),
    ("nvfp4", "HELIX_MLA_DECODE_NV4_MATH", "fp8", "HELIX_MLA_DECODE_NV4_MATH must be auto, f16 or bf16"),
    ("nvfp4", "HELIX_MLA_DECODE_NV4_L2", "yes", "HELIX_MLA_DECODE_NV4_L2 must be on or off"),
    ("nvfp4", "HELIX_MLA_DECODE_NV4_STAGE", "yes", "HELIX_MLA_DECODE_NV4_STAGE must be auto, on or off"),
], ids=["fp8_s", "fp8_q", "mid8", "nv4_math", "nv4_l2", "nv4_stage"])
def test_gpu_bad_kernel_env_names_the_variable(fmt, var, value, message):
    """A bad value of a quantized-page kernel variable is an error naming the variable and its values, not a silent
    default (run on a format whose calls read it)."""
    rc, out, err = _formats_subprocess({var: value}, f"test_gpu_formats and {fmt} and ffi", stop_first=True)
    assert rc != 0, (out + err)[-4000:]
    assert message in out + err, (out + err)[-4000:]


def q_one_term(q):
    """Queries [..., 576] as mla_mid_q8s's one-term E4M3 form (HELIX_MLA_DECODE_FP8_Q=one): per row, s = 448 / amax in
    float32, codes = RNE E4M3 of q * s, value codes / s (float64)."""
    import ml_dtypes
    q = np.asarray(q, np.float32)
    amax = np.abs(q).max(-1, keepdims=True)
    s = np.where(amax > 0, np.float32(448.0) / np.where(amax > 0, amax, 1), np.float32(1.0)).astype(np.float32)
    codes = (q * s).astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return codes / s.astype(np.float64)


# fp8 pages at G*H > 16 (mla_mid_q8s): one and four row tiles, TMA and cp.async tiles
Q_TERMS_CASES = [(4, 4, 16, 64, [4097, 63, 1, 700]), (3, 1, 128, 64, [65536, 70, 1]), (2, 5, 16, 16, [3000, 70]),
                 (2, 4, 64, 128, [2500, 129])]


@pytest.mark.gpu
@pytest.mark.parametrize("B,G,H,P,lens", Q_TERMS_CASES)
def test_gpu_fp8_q_terms(B, G, H, P, lens, rng):
    """fp8 pages at G*H > 16 under this process's HELIX_MLA_DECODE_FP8_Q: ``two`` (default) against the oracle of the
    queries as given; ``one`` against the oracle of the queries rounded as the kernel rounds them (``q_one_term``), and
    farther from the unrounded oracle than from that one (the mode took effect)."""
    one = os.environ.get("HELIX_MLA_DECODE_FP8_Q", "two") == "one"
    case = gpu_formats_case("fp8_e4m3", rng, B, G, H, P, lens)
    o, lse = run(case, "ffi")
    exact = oracle(case)
    if not one:
        check(case, o, lse, tol_o=1e-2, tol_lse=3e-2, ref=exact)
        return
    q1 = q_one_term(case_queries(case))
    rounded = oracle(dict(case, q_lat=jnp.asarray(q1[..., :512], jnp.float32), q_rope=jnp.asarray(q1[..., 512:], jnp.float32)))
    check(case, o, lse, tol_o=1e-2, tol_lse=3e-2, ref=rounded)
    e_round, e_exact = errors(case, o, lse, rounded), errors(case, o, lse, exact)
    print(f"\none-term Q, B={B} G={G} H={H} P={P}: vs rounded-Q oracle o {e_round[0]:.2e} lse {e_round[1]:.2e}; "
          f"vs unrounded o {e_exact[0]:.2e} lse {e_exact[1]:.2e}")
    assert e_round[0] < e_exact[0]


@pytest.mark.gpu
@pytest.mark.parametrize("G,H", [(4, 16), (1, 128)])
def test_gpu_fp8_q_terms_rising_max(G, H, rng):
    """Logits that rise along the sequence (a ramp in 64 latent dims that every query row weighs positively), so the
    running max keeps moving by less and by more than mla_mid_q8s's slack (kS8MaxSlack: the max is only moved past it)
    and its E4M3 weights reach the top of their range: against the oracle, under this process's
    HELIX_MLA_DECODE_FP8_Q (one: the rounded-Q oracle), with the same tolerances as test_gpu_fp8_q_terms."""
    if jax.default_backend() != "gpu":
        pytest.fail("the gpu-marked tests need a GPU backend")
    B, P, L = 2, 64, 64 * 40 + 17
    bounds = np.maximum(np.array([[L] * G, [L - 700] * G]) - np.arange(G)[::-1][None, :], 0)
    case = make_case("fp8_e4m3", rng, bounds=bounds, H=H, P=P, npp=-(-L // P), ramp=0.075, qdtype=jnp.bfloat16)
    one = os.environ.get("HELIX_MLA_DECODE_FP8_Q", "two") == "one"
    ref = oracle(case)
    if one:
        q1 = q_one_term(case_queries(case))
        ref = oracle(dict(case, q_lat=jnp.asarray(q1[..., :512], jnp.float32), q_rope=jnp.asarray(q1[..., 512:], jnp.float32)))
    o, lse = run(case, "ffi")
    check(case, o, lse, tol_o=1e-2, tol_lse=3e-2, ref=ref)
    e = errors(case, o, lse, ref)
    print(f"\nrising max, G={G} H={H} FP8_Q={'one' if one else 'two'}: o {e[0]:.2e} lse {e[1]:.2e}")


@pytest.mark.gpu
@pytest.mark.parametrize("G,H", [(4, 16), (1, 128)])
def test_gpu_fp8_error_budget_vs_unquantized(G, H, rng):
    """The CUDA kernel on fp8 pages at G*H > 16 against the float64 decode of the *unquantized* KV (test_kv_formats'
    budget and data: N(0, 1), data-derived scale), under this process's HELIX_MLA_DECODE_FP8_Q; bf16 queries, whose
    rounding both sides share."""
    if jax.default_backend() != "gpu":
        pytest.fail("the gpu-marked tests need a GPU backend")
    b, p, npp = 2, 64, 8
    kv = rng.standard_normal((b * npp, p, 576)).astype(np.float32)
    pages = quantize_pool("fp8_e4m3", kv, float(quant.fp8_scale_from_amax(np.abs(kv).max())))
    table = jnp.asarray(np.arange(b * npp, dtype=np.int32).reshape(b, npp))
    bounds = BUDGET_BOUNDS[:, :G]
    q = jnp.asarray(rng.standard_normal((b, G, H, 576)), jnp.bfloat16)
    f = jax.jit(functools.partial(mla_decode, softmax_scale=SCALE, implementation="ffi"))
    o, _ = f(q[..., :512], q[..., 512:], pages, table, kv_bounds=jnp.asarray(bounds))
    rel = rel_error_vs_unquantized(o.astype(jnp.float32), np.asarray(q.astype(jnp.float32)),
                                   kv.reshape(b, npp * p, 576), bounds)
    print(f"\nfp8 FFI G={G} H={H} FP8_Q={os.environ.get('HELIX_MLA_DECODE_FP8_Q', 'two')}: rel error vs unquantized "
          f"mean {rel.mean():.4f} max {rel.max():.4f}")
    mean_budget, max_budget = BUDGET["fp8_e4m3"]
    assert rel.mean() <= mean_budget and rel.max() <= max_budget


@pytest.mark.gpu
@pytest.mark.parametrize("B,G,H,P,lens", Q_TERMS_CASES + [(1, 4, 16, 64, [64 * 7 + 5])])
def test_gpu_fp8_q_terms_deterministic(B, G, H, P, lens, rng):
    """Five identical calls under this process's HELIX_MLA_DECODE_FP8_Q give bitwise-identical outputs: the race check of
    test_gpu_ffi_formats_are_deterministic for the one-term form too, whose oracle (the rounded queries') that test does
    not use (the last case: one CTA, eight tiles through the three-slot ring, a partial last tile)."""
    case = gpu_formats_case("fp8_e4m3", rng, B, G, H, P, lens)
    o0, lse0 = run(case, "ffi")
    assert np.all(np.isfinite(o0)) and not np.any(np.isnan(lse0))
    differ = rerun_differences(case, o0, lse0)
    assert not differ, "; ".join(differ)


@pytest.mark.gpu
def test_gpu_fp8_one_term_q():
    """HELIX_MLA_DECODE_FP8_Q=one (mla_mid_q8s's S on the hi E4M3 term of Q alone) agrees with the oracle of the rounded
    queries on every case of test_gpu_fp8_q_terms, is deterministic and keeps the error budget, with the default S
    accumulation (the fast chain under one) and with f32 chains."""
    for s in ("auto", "f32"):
        rc, out, err = _formats_subprocess({"HELIX_MLA_DECODE_FP8_Q": "one", "HELIX_MLA_DECODE_FP8_S": s},
                                           "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget")
        want = 2 * len(Q_TERMS_CASES) + 1 + 2 + 2  # rounded-Q oracle, determinism (+ one case), rising max, budget
        assert rc == 0 and f"{want} passed" in out, f"FP8_S={s}\n" + out[-4000:] + err[-4000:]
