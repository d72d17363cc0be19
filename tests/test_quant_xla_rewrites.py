"""NVFP4 quantization stays bit-exact under the rewrites XLA applies on GPU (checked on CPU).

On the H200 the jnp NVFP4 path disagreed with its numpy oracle because XLA's GPU pipeline runs
``SimplifyFPConversions`` (``xla_allow_excess_precision``, on by default), which deletes every chain of
float casts ``f32 -> e2m1 -> f32`` / ``f32 -> e4m3 -> f32``, i.e. the roundings themselves; it also
lowers f32 division to the approximate ``div.full.f32``, and every backend turns ``v / 6`` into
``v * fl32(1/6)``. These tests (1) evaluate quantize_nvfp4 with that GPU pass applied to its jaxpr
(with the pre-fix formulation as the negative control), (2) check the program handed to XLA, for CPU and
CUDA, holds no float cast chain, no float division and no float4 type, and (3) check the block scale
at its rounding ties, where ``v * fl32(1/6)`` and ``v / 6`` round to different E4M3 values.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jcore

from benchmarks.nvfp4_gpu_diag import formulation as legacy_formulation, planted_ties
from helix_jax import quant
from test_quant import np_nvfp4

F32 = np.float32


def _is_float(dtype):
    return jnp.issubdtype(dtype, jnp.floating)


def eval_with_fp_conversion_folding(closed, *args):
    """Evaluate a jaxpr the way XLA:GPU's SimplifyFPConversions rewrites it: a chain of converts with float
    results ``A -> B -> C`` becomes ``A -> C`` (no convert at all when ``A`` already has type ``C``)."""
    def run(jaxpr, consts, vals, origins):
        env, origin = {}, {}
        read = lambda v: v.val if isinstance(v, jcore.Literal) else env[v]   # noqa: E731
        for v, x in zip(jaxpr.constvars, consts):
            env[v] = x
        for v, x, o in zip(jaxpr.invars, vals, origins):
            env[v], origin[v] = x, o
        for eqn in jaxpr.eqns:
            ins = [read(v) for v in eqn.invars]
            ins_origin = [None if isinstance(v, jcore.Literal) else origin.get(v) for v in eqn.invars]
            sub = eqn.params.get("jaxpr")
            if eqn.primitive.name in ("pjit", "jit", "closed_call") and sub is not None:
                outs, outs_origin = run(sub.jaxpr, sub.consts, ins, ins_origin)
            elif eqn.primitive.name == "convert_element_type" and _is_float(eqn.params["new_dtype"]):
                src = ins[0] if ins_origin[0] is None else ins_origin[0]     # skip the inner converts
                new = eqn.params["new_dtype"]
                outs = [src if jnp.asarray(src).dtype == new else eqn.primitive.bind(src, **eqn.params)]
                outs_origin = [src]
            else:
                outs = eqn.primitive.bind(*ins, **eqn.params)
                outs = list(outs) if eqn.primitive.multiple_results else [outs]
                outs_origin = [None] * len(outs)
            for v, x, o in zip(eqn.outvars, outs, outs_origin):
                env[v], origin[v] = x, o
        return [read(v) for v in jaxpr.outvars], [None if isinstance(v, jcore.Literal) else origin.get(v)
                                                    for v in jaxpr.outvars]
    return run(closed.jaxpr, closed.consts, list(args), [None] * len(args))[0]


def _rows(rng, n, dtype):
    return jnp.asarray(rng.normal(0, 4, (n, 576)).astype(F32), dtype)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_quantize_nvfp4_survives_gpu_conversion_folding(rng, dtype):
    x = _rows(rng, 16, dtype)
    g = F32(quant.NVFP4_KV_GLOBAL_SCALE)
    deq_want, sf_want = np_nvfp4(np.asarray(x, F32), g)
    closed = jax.make_jaxpr(quant.quantize_nvfp4)(x, g)
    packed, sf = eval_with_fp_conversion_folding(closed, x, g)
    np.testing.assert_array_equal(np.asarray(sf, F32), sf_want)
    np.testing.assert_array_equal(np.asarray(quant.dequantize_nvfp4(packed, sf, g)), deq_want)
    # The same pass breaks the pre-fix formulation (the failure seen on the H200): the test can fail.
    legacy = jax.make_jaxpr(lambda a, s: legacy_formulation(a, s)["packed"])(x, g)
    want_packed = np.asarray(quant.quantize_nvfp4(x, g)[0])
    assert np.array_equal(np.asarray(jax.jit(lambda a, s: legacy_formulation(a, s)["packed"])(x, g)), want_packed)
    assert np.mean(np.asarray(eval_with_fp_conversion_folding(legacy, x, g)[0]) != want_packed) > 0.3


def _float_convert_chains(closed):
    """Names of float->float->... convert chains (an XLA-GPU-folded pattern) in a jaxpr, sub-jaxprs included."""
    found = []

    def walk(jaxpr, in_convert):
        made_by_convert = {v for v, c in zip(jaxpr.invars, in_convert) if c}
        for eqn in jaxpr.eqns:
            sub = eqn.params.get("jaxpr")
            if sub is not None:
                walk(sub.jaxpr, [not isinstance(v, jcore.Literal) and v in made_by_convert for v in eqn.invars])
            if eqn.primitive.name == "convert_element_type" and _is_float(eqn.params["new_dtype"]):
                v = eqn.invars[0]
                src_dtype = v.aval.dtype
                if not isinstance(v, jcore.Literal) and v in made_by_convert and src_dtype != eqn.params["new_dtype"]:
                    found.append(f"{src_dtype}->{eqn.params['new_dtype']}")
                made_by_convert.add(eqn.outvars[0])
    walk(closed.jaxpr, [False] * len(closed.jaxpr.invars))
    return found


def _primitives(closed):
    names = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            names.append((eqn.primitive.name, [getattr(v.aval, "dtype", None) for v in eqn.outvars]))
            if eqn.params.get("jaxpr") is not None:
                walk(eqn.params["jaxpr"].jaxpr)
    walk(closed.jaxpr)
    return names


@pytest.mark.parametrize("fn", ["quantize_nvfp4", "nvfp4_block_scales", "dequantize_nvfp4", "roundtrip"])
def test_program_has_no_pattern_xla_gpu_rewrites(fn):
    """No float cast chain, no float division, no float4 value in what XLA gets (jaxpr and StableHLO)."""
    x = jax.ShapeDtypeStruct((8, 576), jnp.bfloat16)
    g = jax.ShapeDtypeStruct((), jnp.float32)
    f = {"quantize_nvfp4": quant.quantize_nvfp4, "nvfp4_block_scales": quant.nvfp4_block_scales,
         "dequantize_nvfp4": lambda x, g: quant.dequantize_nvfp4(*quant.quantize_nvfp4(x, g), g),
         "roundtrip": lambda x, g: quant.dequantize_nvfp4(*quant.quantize_nvfp4(x, g), g).astype(jnp.bfloat16)}[fn]
    closed = jax.make_jaxpr(f)(x, g)
    assert _float_convert_chains(closed) == []
    # Dequantization keeps its one scalar division fl32(1 / global_scale) (documented; ~1 ulp on GPU).
    quantize_only = fn in ("quantize_nvfp4", "nvfp4_block_scales")
    divs = [p for p, dts in _primitives(closed) if p == "div" and any(_is_float(d) for d in dts)]
    assert len(divs) == (0 if quantize_only else 1)
    for platform in ("cpu", "cuda"):
        text = jax.export.export(jax.jit(f), platforms=[platform])(x, g).mlir_module()
        assert "f4E2M1FN" not in text, platform
        assert text.count("stablehlo.divide") == (0 if quantize_only else 1), platform
    # Negative control: the checks see the pre-fix formulation's chains and divisions.
    legacy = jax.make_jaxpr(legacy_formulation)(x, g)
    assert sorted(set(_float_convert_chains(legacy))) == ["float4_e2m1fn->float32", "float8_e4m3fn->float32"]
    assert any(p == "div" for p, _ in _primitives(legacy))


def test_block_scale_rounding_ties_follow_true_division():
    """amax * g = 6 * (E4M3 midpoint) + k ulp, k in -2..2: ``RNE_e4m3(v / 6)`` of the oracle (true division),
    which ``v * fl32(1/6)`` (what XLA makes of ``/ 6``) gets wrong one ulp below several midpoints."""
    x = planted_ties()
    for g in (F32(1), F32(2.0 ** -3), F32(64)):      # powers of two keep amax * g on the planted values
        xs = x / g
        packed, sf = jax.jit(quant.quantize_nvfp4)(jnp.asarray(xs), g)
        deq_want, sf_want = np_nvfp4(xs, g)
        np.testing.assert_array_equal(np.asarray(sf, F32), sf_want)
        np.testing.assert_array_equal(np.asarray(quant.dequantize_nvfp4(packed, sf, g)), deq_want)
        np.testing.assert_array_equal(np.asarray(quant.nvfp4_block_scales(jnp.asarray(xs), g), F32), sf_want)
    v = np.abs(x.reshape(-1, 16)).max(-1)
    assert np.sum(F32(v * F32(1 / 6)).astype(jnp.float8_e4m3fn) != F32(v / F32(6)).astype(jnp.float8_e4m3fn)) >= 10


def test_block_scale_codes_equal_true_division_everywhere(rng):
    """The corrected ``_nvfp4_scale_codes`` vs ``RNE_e4m3(min(fl32(v / 6), 448))`` on +-64 ulp around every
    E4M3 rounding tie (times 6) and on random finite f32 bit patterns (subnormals and huge values too)."""
    from test_quant import E4M3, rne
    t = (((E4M3[:-1] + E4M3[1:]) / 2) * 6).astype(F32)
    near = (t.view(np.int32)[:, None] + np.arange(-64, 65)[None, :]).astype(np.int32).view(F32).ravel()
    anywhere = rng.integers(0, 0x7F800000, 200_000).astype(np.int32).view(F32)
    v = np.concatenate([near, anywhere, F32([0, np.inf, 2688, 2592, 1e-45])])
    got = np.asarray(jax.jit(quant._nvfp4_scale_codes)(v, F32(1)))
    want = F32(rne(np.minimum(v / F32(6), F32(448)), E4M3)).astype(jnp.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(got, want)
