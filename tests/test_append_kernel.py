"""Pallas append-and-quantize kernel (helix_jax.ops.append) against the jnp path of cache.append_kv.

Every pool array is compared bit for bit; the pools start as random codes ("poison") so that a stray or
missing write shows up, and the written rows are also checked against the float64-free numpy oracles
of test_quant. On CPU the kernel runs in Pallas interpret mode; a second test lowers it to Triton IR
for an abstract H200, and a GPU test (``-m gpu``) compiles and compares it on the device.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helix_jax import cache, quant
from helix_jax.cache import FP8Pages, MLAPages, NVFP4Pages
from helix_jax.ops.append import append_rows
from test_quant import E2M1, np_fp8, np_nvfp4

FORMATS = ("bf16", "fp8_e4m3", "nvfp4")
N, P, NPP = 12, 8, 3          # 12-page pool, 8-token pages, 3 pages per sequence: 3 spare pages
F32 = np.float32


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint16) if x.dtype.itemsize == 2 else x.view(np.uint8)


def poisoned_pages(fmt, rng, n=N, p=P, scale=None):
    """A pool of random codes (every byte pattern but NaN) in the pages tuple of ``fmt``."""
    def codes(*shape, dtype=np.uint8):
        c = rng.integers(0, 256, shape).astype(np.uint8)
        if dtype == jnp.float8_e4m3fn:
            c = np.where((c & 0x7F) == 0x7F, c ^ 1, c)   # no NaN codes: compare by bits anyway
        return jnp.asarray(c).view(dtype)
    if fmt == "bf16":
        return MLAPages(jnp.asarray(rng.normal(size=(n, p, 512)), jnp.bfloat16),
                        jnp.asarray(rng.normal(size=(n, p, 64)), jnp.bfloat16))
    if fmt == "fp8_e4m3":
        return FP8Pages(codes(n, p, 512, dtype=jnp.float8_e4m3fn), codes(n, p, 64, dtype=jnp.float8_e4m3fn),
                        jnp.asarray([60.0 if scale is None else scale], jnp.float32))
    return NVFP4Pages(codes(n, p, 256), codes(n, p, 32), codes(n, p, 32, dtype=jnp.float8_e4m3fn),
                      codes(n, p, 4, dtype=jnp.float8_e4m3fn),
                      jnp.asarray([quant.NVFP4_KV_GLOBAL_SCALE if scale is None else scale], jnp.float32))


def new_rows(rng, b, g, dtype):
    """Random rows ``[B, G, 512]`` / ``[B, G, 64]`` with the edge cases of the formats planted in."""
    c = rng.normal(0, 4, (b, g, 512)).astype(F32)
    k = rng.normal(0, 4, (b, g, 64)).astype(F32)
    c[0, 1, 32:48] = 0.0                       # all-zero block (sf = 0)
    k[0, 0, 0:16] = 0.0
    c[b - 1, 0, 64:80] = rng.uniform(-1e-6, 1e-6, 16)   # block scale underflows E4M3 -> 0
    c[b - 1, g - 1, 7] = 1e4                   # beyond every format max (saturates)
    k[b - 1, g - 1, 50] = -3e4
    c[0, 0, 100:104] = -0.0                    # negative zeros keep their sign (code 8 / 0x80)
    c[0, 2, 200:216] = 0.25 * np.arange(16)    # E2M1 ties once scaled by sf (exercised with g=1)
    return jnp.asarray(c, dtype), jnp.asarray(k, dtype)


def slots_and_table(rng, b, g):
    table = rng.permutation(N)[:b * NPP].reshape(b, NPP).astype(np.int32)
    cap = NPP * P
    slots = np.stack([rng.choice(cap, g, replace=False) for _ in range(b)]).astype(np.int32)
    slots[0] = [P - 2, P - 1, P, P + 1][:g]    # one sequence's rows straddle a page boundary
    slots[1, 0] = -1                           # not mine: skipped
    slots[1, 1] = cap                          # past the last page: skipped
    slots[b - 1, 1] = -1
    return jnp.asarray(table), jnp.asarray(slots)


def written(table, slots):
    """Numpy oracle of the (page, offset) each row lands on, ``None`` where skipped."""
    table, slots = np.asarray(table), np.asarray(slots)
    return {(i, j): (None if not 0 <= s < NPP * P else (int(table[i, s // P]), int(s % P)))
            for (i, j), s in np.ndenumerate(slots)}


E2M1_SIGNED = np.concatenate([E2M1, -E2M1]).astype(F32)   # value of each 4-bit code


def check_against_oracle(fmt, before, after, rows, table, slots):
    """Untouched slots keep their poison bits; written ones hold the numpy oracle's quantization (host side)."""
    after = type(after)(*[np.asarray(x) for x in after])
    rows = [np.asarray(r, F32) for r in rows]
    hit = np.zeros(before.c_latent.shape[:2], bool)
    for (i, j), where in written(table, slots).items():
        if where is None:
            continue
        pg, off = where
        hit[pg, off] = True
        for x, q, sf in zip(rows, after[:2], after[2:4] if fmt == "nvfp4" else (None, None)):
            x, q = x[i, j], q[pg, off]
            if fmt == "bf16":
                np.testing.assert_array_equal(_bits(q), _bits(np.asarray(x, jnp.bfloat16)))
            elif fmt == "fp8_e4m3":
                want = np_fp8(x, F32(after.scale[0]))
                np.testing.assert_array_equal(q.astype(np.float64), want)
                np.testing.assert_array_equal(np.signbit(q.astype(np.float64)), np.signbit(want))
            else:
                g = F32(after.global_scale[0])
                deq, want_sf = np_nvfp4(x, g)
                sf = sf[pg, off].astype(F32)
                np.testing.assert_array_equal(sf, want_sf)
                e = E2M1_SIGNED[np.stack([q & 15, q >> 4], -1).reshape(-1)].reshape(-1, 16)
                np.testing.assert_array_equal((((e * sf[:, None]) * (F32(1) / g))).reshape(-1), deq)
    for name, b0, b1 in zip(type(before)._fields, before, after):
        if b0.ndim == 3:
            np.testing.assert_array_equal(_bits(b1)[~hit], _bits(b0)[~hit], err_msg=f"{name} outside the slots")
        else:
            np.testing.assert_array_equal(_bits(b1), _bits(b0), err_msg=f"{name} per-tensor scale")


def assert_bit_equal(got, want):
    assert type(got) is type(want)
    for name, a, b in zip(type(want)._fields, got, want):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=name)


xla_append = jax.jit(functools.partial(cache.append_kv, implementation="xla"))   # not the default on GPU
pallas_append = jax.jit(functools.partial(cache.append_kv, implementation="pallas"))


@pytest.mark.parametrize("row_dtype", [jnp.bfloat16, jnp.float32])
@pytest.mark.parametrize("fmt", FORMATS)
def test_kernel_matches_jnp_path_bit_for_bit(fmt, row_dtype, rng):
    b, g = 3, 4
    pages = poisoned_pages(fmt, rng)
    table, slots = slots_and_table(rng, b, g)
    rows = new_rows(rng, b, g, row_dtype)
    want = xla_append(pages, table, slots, *rows)
    got = pallas_append(pages, table, slots, *rows)
    assert_bit_equal(got, want)
    check_against_oracle(fmt, pages, got, rows, table, slots)


@pytest.mark.parametrize("fmt", FORMATS)
def test_negative_and_out_of_pool_page_ids_are_skipped(fmt, rng):
    """A page id < 0 or >= N writes nothing on either path (a jnp scatter would wrap -1 to page N - 1)."""
    b, g = 2, 3
    pages = poisoned_pages(fmt, rng)
    table = jnp.asarray([[-1, 1, N], [2, -3, 4]], jnp.int32)
    slots = jnp.asarray([[1, P + 2, 2 * P + 1], [P + 1, 3, -1]], jnp.int32)   # pages -1, 1, N | -3, 2, skip
    rows = new_rows(rng, b, g, jnp.bfloat16)
    for f in (xla_append, pallas_append):
        got = f(pages, table, slots, *rows)
        hit = np.zeros((N, P), bool)
        hit[1, 2] = hit[2, 3] = True
        for name, b0, b1 in zip(type(pages)._fields, pages, got):
            if b0.ndim == 3:
                np.testing.assert_array_equal(_bits(b1)[~hit], _bits(b0)[~hit], err_msg=name)
                assert not np.array_equal(_bits(b1)[hit], _bits(b0)[hit]), name


def test_nvfp4_rounding_ties_and_signs(rng):
    """global_scale 1: block units are the raw values, so every E2M1 tie and signed zero is hit exactly."""
    pages = poisoned_pages("nvfp4", rng, scale=1.0)
    table, slots = slots_and_table(rng, 2, 4)
    # One 16-value block: amax 6 -> sf = 1 exactly, so y = x and every RNE midpoint of E2M1 is hit.
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -6.0, 0.0, -0.0, -0.25, -0.75, -2.5, -5.0, 6.0])
    c = np.tile(ties, 32)[None, None, :] * np.ones((2, 4, 1))
    k = -np.tile(ties, 4)[None, None, :] * np.ones((2, 4, 1))
    rows = (jnp.asarray(c, jnp.float32), jnp.asarray(k, jnp.float32))
    got = pallas_append(pages, table, slots, *rows)
    assert_bit_equal(got, xla_append(pages, table, slots, *rows))
    check_against_oracle("nvfp4", pages, got, rows, table, slots)
    pg, off = next(w for w in written(table, slots).values() if w is not None)
    packed = np.asarray(got.c_latent[pg, off, :8])
    codes = np.stack([packed & 15, packed >> 4], -1).reshape(-1)
    assert codes.tolist() == [0, 2, 2, 4, 4, 6, 6, 7, 15, 0, 8, 8, 10, 12, 14, 7]
    assert np.asarray(got.c_latent_sf[pg, off]).astype(F32).tolist() == [1.0] * 32


def test_bad_arguments_raise():
    pages = MLAPages(jnp.zeros((4, 8, 512)), jnp.zeros((4, 8, 64)))
    rows = jnp.zeros((2, 3, 512)), jnp.zeros((2, 3, 64))
    table = jnp.zeros((2, 2), jnp.int32)
    with pytest.raises(ValueError, match="local_slots"):
        append_rows(pages, table, jnp.zeros((2,), jnp.int32), *rows)
    with pytest.raises(ValueError, match="page_table"):
        append_rows(pages, table[:1], jnp.zeros((2, 3), jnp.int32), *rows)
    with pytest.raises(ValueError, match="c_latent_new"):
        append_rows(pages, table, jnp.zeros((2, 3), jnp.int32), rows[0][:, :2], rows[1])
    with pytest.raises(ValueError, match="integer"):
        append_rows(pages, table.astype(jnp.float32), jnp.zeros((2, 3), jnp.int32), *rows)
    with pytest.raises(ValueError, match="implementation"):
        cache.append_kv(pages, table, jnp.zeros((2, 3), jnp.int32), *rows, implementation="triton")


def _abstract_specs(fmt, b, g, n=64, p=64):
    s = jax.ShapeDtypeStruct
    e4 = jnp.float8_e4m3fn
    pages = {"bf16": lambda: MLAPages(s((n, p, 512), jnp.bfloat16), s((n, p, 64), jnp.bfloat16)),
             "fp8_e4m3": lambda: FP8Pages(s((n, p, 512), e4), s((n, p, 64), e4), s((1,), jnp.float32)),
             "nvfp4": lambda: NVFP4Pages(s((n, p, 256), jnp.uint8), s((n, p, 32), jnp.uint8), s((n, p, 32), e4),
                                         s((n, p, 4), e4), s((1,), jnp.float32))}[fmt]()
    return pages, s((b, 4), jnp.int32), s((b, g), jnp.int32), s((b, g, 512), jnp.bfloat16), s((b, g, 64), jnp.bfloat16)


@pytest.mark.filterwarnings("ignore:.*Pallas Triton backend is deprecated")
@pytest.mark.parametrize("fmt", FORMATS)
def test_triton_lowering_for_h200(fmt):
    """The GPU path (no interpret) lowers to one in-place Triton custom call for an abstract H200."""
    h200 = jax.sharding.AbstractDevice(device_kind="NVIDIA H200", num_cores=None, platform="cuda")
    f = jax.jit(functools.partial(append_rows, interpret=False))
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("x",), abstract_device=h200)):
        exp = jax.export.export(f, platforms=["cuda"], disabled_checks=[
            jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(*_abstract_specs(fmt, 4, 4))
    text = exp.mlir_module()
    assert text.count("__gpu$xla.gpu.triton") == 1
    n_pools = {"bf16": 2, "fp8_e4m3": 2, "nvfp4": 4}[fmt]
    assert text.count("output_operand_alias<") == n_pools
    assert ("div.rn.f32" in text) == (fmt == "nvfp4")


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FORMATS)
def test_kernel_matches_jnp_path_on_gpu(fmt, rng):
    b, g = 64, 4
    pages = poisoned_pages(fmt, rng, n=b * NPP + 5)
    table = jnp.asarray(rng.permutation(b * NPP + 5)[:b * NPP].reshape(b, NPP).astype(np.int32))
    slots = np.stack([rng.choice(NPP * P, g, replace=False) for _ in range(b)]).astype(np.int32)
    slots[::3, 1] = -1
    rows = new_rows(rng, b, g, jnp.bfloat16)
    want = xla_append(pages, table, jnp.asarray(slots), *rows)
    got = pallas_append(pages, table, jnp.asarray(slots), *rows)
    check_against_oracle(fmt, pages, got, rows, table, slots)   # first: says which side is right
    assert_bit_equal(got, want)
