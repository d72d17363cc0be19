"""Helix planner (helix_jax.plan): every model term on hand-computed cases, error cases, calibration
fits on planted data, and the CLI JSON contract in-process. Pure Python: no JAX work here."""
import json
import math
from dataclasses import replace

import pytest

from helix_jax.plan import calibrate as cal
from helix_jax.plan import latency as lt
from helix_jax.plan import sweeps as sw
from helix_jax.plan.hardware import HardwareProfile, load_profile, profile_names
from helix_jax.plan.presets import get_preset

# A toy GPU with round numbers so hand arithmetic is easy: 1 TB/s, 100 TFLOP/s bf16, 100 GB/s link.
TOY = dict(name="toy", source="datasheet", num_gpus=8, hbm_gb=80.0, hbm_tb_per_s=1.0,
           matmul_tflop_per_s={"bf16": 100.0, "fp8": 200.0}, link_gb_per_s=100.0,
           efficiency={"attn_memory": 0.5, "attn_compute": 0.5, "gemm_memory": 0.5, "gemm_compute": 0.5,
                       "link": 0.5, "elementwise": 0.5},
           attention_math={"bf16": "bf16", "fp8": "fp8", "nvfp4": "fp8"}, usable_memory_fraction=1.0,
           a2a_latency_us=7.0, allreduce_latency_us=3.0, kernel_launch_us=0.0)


@pytest.fixture
def toy():
    return HardwareProfile.from_dict(dict(TOY))


# ---------------------------------------------------------------------------------------------
# Terms, hand-computed
# ---------------------------------------------------------------------------------------------
def test_kv_bytes_per_value():
    assert lt.kv_bytes_per_value("bf16") == 2.0
    assert lt.kv_bytes_per_value("fp8") == 1.0
    assert lt.kv_bytes_per_value("nvfp4") == 0.5625  # 4 bits + one 8-bit scale per 16 values
    with pytest.raises(ValueError, match="kv_format"):
        lt.kv_bytes_per_value("int4")


def test_exchange_bytes_hand():
    # 8 tokens x 128 heads x (512 bf16 + one fp32 LSE) = 1,052,672 B; half leaves the rank at C = 2.
    assert lt.exchange_bytes(tokens=8, heads_tp=128, cp=2) == 526_336
    assert lt.exchange_bytes(tokens=8, heads_tp=128, cp=4) == 789_504
    assert lt.exchange_bytes(tokens=8, heads_tp=128, cp=1) == 0


def test_a2a_allreduce_combine_hand(toy):
    # 1 MB over a 100 GB/s link at 50 %: 20 us, plus the 7 us latency.
    assert lt.a2a_term(toy, 1e6).seconds == pytest.approx(27e-6)
    assert lt.a2a_term(toy, 0.0).seconds == 0.0
    # Ring all-reduce of 1 MB over 4 ranks moves 1.5 MB: 30 us + 3 us.
    assert lt.allreduce_term(toy, 1e6, 4, name="ar").seconds == pytest.approx(33e-6)
    assert lt.allreduce_term(toy, 1e6, 1, name="ar").seconds == 0.0
    # Combine at T=2, H_tp=8, C=2: reads 2*8*1028 = 16448 B, writes 2*4*1024 = 8192 B, at 0.5 TB/s.
    assert lt.combine_term(toy, tokens=2, heads_tp=8, cp=2).seconds == pytest.approx(24640 / 0.5e12)
    assert lt.combine_term(toy, tokens=2, heads_tp=8, cp=1).seconds == 0.0


def test_mla_decode_term_memory_and_compute_bound(toy):
    # B=2, G=3, H=16, 1000 cached tokens, bf16: KV 2*1000*576*2 = 2,304,000 B; Q/O 96 rows * 1088 * 2
    # = 208,896 B; FLOPs 96 * 1000 * 2176 = 208,896,000.
    t = lt.mla_decode_term(toy, batch=2, group=3, heads=16, tokens_per_rank=1000, kv_format="bf16")
    assert (t.bytes, t.flops) == (2_512_896, 208_896_000)
    assert t.bound == "memory" and t.seconds == pytest.approx(2_512_896 / 0.5e12)
    # 128 heads, G=4: 1024 rows per sequence -> compute-bound at the bf16 rate (50 TFLOP/s effective).
    t = lt.mla_decode_term(toy, batch=1, group=4, heads=128, tokens_per_rank=1000, kv_format="bf16")
    assert t.bound == "compute" and t.seconds == pytest.approx(512 * 1000 * 2176 / 50e12)
    # fp8 KV: half the KV bytes and the fp8 rate for the math (attention_math maps fp8 -> fp8).
    t8 = lt.mla_decode_term(toy, batch=1, group=4, heads=128, tokens_per_rank=1000, kv_format="fp8")
    assert t8.seconds == pytest.approx(t.seconds / 2)


def test_gemm_and_roofline(toy):
    t = lt.gemm_term(toy, params=1e6, tokens=4, weight_format="fp8", name="g")
    assert (t.bytes, t.flops, t.bound) == (1e6, 8e6, "memory")
    assert t.seconds == pytest.approx(1e6 / 0.5e12)
    t = lt.gemm_term(toy, params=1e6, tokens=10_000, weight_format="bf16", name="g")
    assert t.bound == "compute" and t.seconds == pytest.approx(2e10 / 50e12)
    s, bound = lt.roofline(bytes_=10.0, flops=30.0, bw=1.0, peak=2.0, eff_mem=1.0, eff_math=0.5, fixed=4.0)
    assert (s, bound) == (34.0, "compute")


def test_hopb_overlap_hand(toy):
    # Attention 80 us; exchange of 4 MB: 7 + 80 = 87 us un-overlapped. k=2: a = 40, x = 7 + 40 = 47 ->
    # 40 + 47 + 47 = 134; k=4: a = 20, x = 27 -> 20 + 27 + 3*27 = 128; k=8 not allowed (batch 4).
    off, k_off = lt.hopb_exposed(attn_s=80e-6, fixed_s=0.0, a2a_bytes=4e6, profile=toy, batch=4, enabled=False)
    on, k_on = lt.hopb_exposed(attn_s=80e-6, fixed_s=0.0, a2a_bytes=4e6, profile=toy, batch=4, enabled=True)
    assert (k_off, k_on) == (1, 4)
    assert off == pytest.approx(167e-6) and on == pytest.approx(128e-6)
    # Latency-dominated exchange: splitting only adds latencies, so no split is chosen.
    on, k = lt.hopb_exposed(attn_s=10e-6, fixed_s=0.0, a2a_bytes=1e3, profile=toy, batch=64, enabled=True)
    assert k == 1 and on == pytest.approx(10e-6 + 7e-6 + 1e3 / 50e9)


def test_expected_active_experts():
    # One token, top-8 of 256, 32 local experts: 32 * 8/256 = 1 expected.
    assert lt.expected_active_experts(local_experts=32, n_experts=256, top_k=8, tokens=1) == pytest.approx(1.0)
    assert lt.expected_active_experts(local_experts=32, n_experts=256, top_k=8, tokens=4096) == pytest.approx(32.0)
    one = lt.expected_active_experts(local_experts=4, n_experts=256, top_k=8, tokens=1, ep=64)
    # Busiest of 64 ranks: mean 0.125 + sqrt(2 * 4 * p (1-p) * ln 64), p = 1/32.
    p = 1 / 32
    assert one == pytest.approx(0.125 + math.sqrt(8 * p * (1 - p) * math.log(64)))
    assert lt.busiest_routed_tokens(tokens=1, top_k=8, ep=64, local_experts=4) <= 4


# ---------------------------------------------------------------------------------------------
# Whole step, memory, layouts
# ---------------------------------------------------------------------------------------------
def test_step_tp_baseline_kv_term_and_spec_ttl():
    m, p = get_preset("deepseek-r1"), load_profile("gb200-nvl72")
    wl = lt.Workload(context=1 << 20, kv_format="fp8", weight_format="nvfp4")
    r = lt.step(m, p, lt.Layout(kvp=1, tpa=8), wl)
    # TP duplicates the latent KV: every rank reads 1M x 576 B (fp8) per layer at 8 TB/s x 0.8, plus its
    # 16 heads' Q in / O out (16 x 1088 x 2 B) and a 2 us launch, 61 layers.
    per_layer = 2e-6 + ((1 << 20) * 576 + 16 * 1088 * 2) / 6.4e12
    assert r.breakdown_ms()["mla_decode"] == pytest.approx(1e3 * 61 * per_layer, rel=1e-9)
    assert r.step_s == pytest.approx(sum(r.breakdown_ms().values()) / 1e3)
    # Helix over 8 KV ranks reads 1/8 of it.
    h = lt.step(m, p, lt.Layout(kvp=8, tpa=1), wl)
    per_layer = 2e-6 + ((1 << 20) / 8 * 576 + 128 * 1088 * 2) / 6.4e12
    assert h.breakdown_ms()["mla_decode"] == pytest.approx(1e3 * 61 * per_layer, rel=1e-9)
    assert h.breakdown_ms()["helix_a2a"] > 0 and "helix_a2a" not in r.breakdown_ms()
    # Without re-provisioning every rank all-gathers all 8 partials (8x Helix's bytes), and o_proj is unsliced.
    k = lt.step(m, p, lt.Layout(kvp=8, tpa=1, reprovision=False), wl, check_memory=False)  # 378 GB of weights
    a2a = [t for t in h.terms if t.name == "helix_a2a"][0]
    ag = [t for t in k.terms if t.name == "kvp_allgather"][0]
    assert ag.bytes == 8 * a2a.bytes == 8 * lt.exchange_bytes(tokens=1, heads_tp=128, cp=8)
    out_h, out_k = ([t for t in r.terms if t.name == "attn_out_proj"][0].bytes for r in (h, k))
    assert out_k == pytest.approx(8 * out_h)
    # HOP-B at 16 sequences x 4 tokens hides part of the all-to-all; off, all of it is exposed. (At 16 x 1
    # token the bandwidth part, ~2.7 us, is below the 2 us launch each extra chunk costs: no gain.)
    on, off = (lt.step(m, p, lt.Layout(kvp=8, tpa=1), replace(wl, batch=16, draft_len=3, hopb=x))
               for x in (True, False))
    assert on.breakdown_ms()["helix_a2a"] < off.breakdown_ms()["helix_a2a"]
    assert off.breakdown_ms()["helix_a2a"] == pytest.approx(1e3 * 61 * lt.a2a_term(p, lt.exchange_bytes(
        tokens=64, heads_tp=128, cp=8)).seconds)
    # Speculation: 4 tokens verified, 2.5 committed per step -> TTL = step / 2.5.
    s = lt.step(m, p, lt.Layout(kvp=8, tpa=1), replace(wl, draft_len=3, accept_len=2.5))
    assert s.ttl_ms == pytest.approx(1e3 * s.step_s / 2.5)
    assert s.tokens_per_s_gpu == pytest.approx(2.5 / s.step_s / 8)


def test_memory_per_rank_tiny_hand():
    m = get_preset("tiny")  # 2 layers, 8 heads, hidden 256, dense FFN 512, vocab 1024, no q_lora
    wl = lt.Workload(context=1000, batch=3, kv_format="bf16", weight_format="bf16", page_size=64)
    mem = lt.memory_per_rank(m, lt.Layout(kvp=2, tpa=2), wl)
    attn = 256 * 576 + (256 * 8 * 96 + 8 * 32 * 512) / 2 + (8 * 512 * 32 + 8 * 32 * 256) / 4
    params = 2 * attn + 2 * 3 * 256 * 512 / 4 + 2 * 1024 * 256 / 4
    assert mem["weights"] == pytest.approx(2 * params)
    # (1000 + 1) tokens in super-blocks of 128: 8 blocks -> 512 rows per rank, 2 layers, 576 bf16 values.
    assert mem["kv_per_seq"] == 2 * 512 * 576 * 2
    assert mem["total"] == pytest.approx(mem["weights"] + 3 * mem["kv_per_seq"])


def test_layout_errors(toy):
    m = get_preset("tiny")
    with pytest.raises(ValueError, match="more ranks than"):
        lt.validate_layout(m, toy, lt.Layout(kvp=4, tpa=4))
    with pytest.raises(ValueError, match="must divide the 8 heads"):
        lt.validate_layout(m, toy, lt.Layout(kvp=1, tpa=3))
    with pytest.raises(ValueError, match="H_tp % C"):  # 6 heads cannot split over 4 KV ranks
        lt.validate_layout(get_preset("tiny", n_heads=6), toy, lt.Layout(kvp=4, tpa=1))
    with pytest.raises(ValueError, match="number of experts"):
        lt.validate_layout(m, toy, lt.Layout(kvp=2, tpa=1, ep=2))  # tiny is dense
    with pytest.raises(ValueError, match="positive int"):
        lt.validate_layout(m, toy, lt.Layout(kvp=0, tpa=1))
    ds = get_preset("deepseek-r1")
    with pytest.raises(ValueError, match="KV not fitting"):
        lt.step(ds, load_profile("gb200-nvl72"), lt.Layout(kvp=1, tpa=8),
                lt.Workload(context=1 << 20, batch=64, kv_format="bf16", weight_format="nvfp4"))


def test_workload_errors():
    with pytest.raises(ValueError, match="accept_len"):
        lt.Workload(context=10, draft_len=3, accept_len=5.0).validate()
    with pytest.raises(ValueError, match="fit one page"):
        lt.Workload(context=10, draft_len=8, page_size=8).validate()
    with pytest.raises(ValueError, match="context"):
        lt.Workload(context=0).validate()
    with pytest.raises(ValueError, match="weight_format"):
        lt.Workload(context=10, weight_format="int8").validate()
    with pytest.raises(ValueError, match="model must be one of"):
        get_preset("llama")


def test_profile_errors(tmp_path):
    with pytest.raises(ValueError, match="efficiency\\['link'\\] must be in"):
        HardwareProfile.from_dict({**TOY, "efficiency": {**TOY["efficiency"], "link": 1.5}})
    with pytest.raises(ValueError, match="missing required keys"):
        HardwareProfile.from_dict({k: v for k, v in TOY.items() if k != "hbm_tb_per_s"})
    with pytest.raises(ValueError, match="source must be"):
        HardwareProfile.from_dict({**TOY, "source": "guess"})
    with pytest.raises(ValueError, match="link_gb_per_s must be a finite number > 0"):
        HardwareProfile.from_dict({**TOY, "link_gb_per_s": -1})
    with pytest.raises(ValueError, match="unknown keys"):
        HardwareProfile.from_dict({**TOY, "hbm_speed": 3})
    with pytest.raises(ValueError, match="profile must be one of"):
        load_profile("tpu-v9")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_profile(bad)
    good = tmp_path / "mine.json"
    good.write_text(json.dumps(TOY))
    assert load_profile(good).link_gb_per_s == 100.0


def test_matmul_rate_falls_back_to_wider_dtype(toy):
    assert toy.matmul_flops_per_s("fp4") == 200e12  # no fp4 units: the fp8 rate
    h200 = load_profile("h200", results_dir=None)
    assert h200.matmul_flops_per_s("fp4") == h200.matmul_flops_per_s("bf16") == 825e12
    with pytest.raises(ValueError, match="matmul dtype"):
        toy.matmul_flops_per_s("fp16")


def test_builtin_profiles_and_sources(tmp_path):
    assert {"h100", "h200", "b200", "gb200-nvl72"} <= set(profile_names())
    for name in ("h100", "b200", "gb200-nvl72"):
        assert load_profile(name).source == "datasheet"
    h = load_profile("h200", results_dir=tmp_path)  # empty results: documented defaults
    assert h.source == "measured" and h.hbm_tb_per_s == 4.22 and h.provenance == ()


def test_enumerate_and_pareto(toy):
    m = get_preset("deepseek-r1")
    p = load_profile("gb200-nvl72")
    lays = sw.enumerate_layouts(m, p, max_gpus=16)
    fams = {lay.family for lay in lays}
    assert fams == {"baseline", "helix", "kvp"} and max(lay.n for lay in lays) == 16
    assert any(lay.family == "helix" and lay.ep > 1 for lay in lays)  # Helix with EP
    for lay in lays:
        lt.validate_layout(m, p, lay)
    with pytest.raises(ValueError, match="more ranks than"):
        sw.enumerate_layouts(m, p, max_gpus=128)
    lay = lt.Layout(1, 1)
    pts = [sw.Point(lay, 1, 1.0, 1000.0, 5.0, 0), sw.Point(lay, 2, 2.0, 500.0, 9.0, 0),
           sw.Point(lay, 3, 3.0, 333.0, 8.0, 0), sw.Point(lay, 4, 4.0, 250.0, 12.0, 0)]
    assert [q.batch for q in sw.pareto_frontier(pts)] == [1, 2, 4]
    assert sw.batch_grid(13) == [1, 2, 3, 4, 6, 8, 12, 13]


def test_max_batch_within_is_the_largest(toy):
    m = get_preset("tiny")
    wl = lt.Workload(context=4096)
    lay = lt.Layout(kvp=2, tpa=1)
    budget = lt.step(m, toy, lay, replace(wl, batch=37)).ttl_ms
    b = sw.max_batch_within(m, toy, lay, wl, budget)
    assert b >= 37
    assert lt.step(m, toy, lay, replace(wl, batch=b + 1)).ttl_ms > budget


def test_kimi_hybrid_runs():
    m, p = get_preset("kimi-hybrid"), load_profile("gb200-nvl72")
    r = lt.step(m, p, lt.Layout(kvp=8, tpa=1), lt.Workload(context=1 << 18, batch=4, weight_format="nvfp4"))
    bd = r.breakdown_ms()
    assert bd["kda_recurrence"] > 0 and bd["mla_decode"] > 0


# ---------------------------------------------------------------------------------------------
# Calibration on planted measurements
# ---------------------------------------------------------------------------------------------
def _write(path, obj):
    path.write_text(json.dumps(obj))


def test_calibration_fits_planted_efficiencies(tmp_path):
    base = load_profile("h200", results_dir=None)
    recs = []
    for B, G, eff in ((8, 1, 0.6), (64, 1, 0.6), (16, 4, 0.75), (32, 4, 0.75)):
        t = lt.mla_decode_term(base, batch=B, group=G, heads=128 if G > 1 else 16, tokens_per_rank=65536,
                               kv_format="bf16")
        t_mem = t.bytes / 4.0e12
        t_math = t.flops / 800e12
        ms = 1e3 * (40e-6 + max(t_mem, t_math) / eff)  # 40 us fixed per call: 3 us launch + 37 us overhead
        recs.append({"backend": "ffi", "kv_dtype": "bf16", "B": B, "L": 65536, "G": G,
                     "H": 128 if G > 1 else 16, "page_size": 64, "ms": ms})
        recs.append({**recs[-1], "backend": "reference", "ms": ms * 3})  # slower backend must be ignored
    _write(tmp_path / "mla_decode_2026-11-30.json", {"device": "H200", "date": "2026-11-30", "ceilings":
           {"copy_tb_per_s": 4.0, "matmul_tflop_per_s": 800.0}, "records": recs})
    # Exchange planted with 12 us latency and 300 GB/s achieved.
    ex = []
    prof = load_profile("h200", results_dir=tmp_path)
    for T in (1, 8, 64, 512):
        parts = cal.our_exchange_parts(prof, T=T, H=128, cp=2)
        assert parts["a2a_bytes"] == T * 128 * 1040 / 2  # 512 bf16 + LSE padded to 16 B, half leaves
        ex_ms = 1e3 * (12e-6 + parts["a2a_bytes"] / 300e9 + parts["pack"] + parts["combine"])
        ex.append({"cp": 2, "T": T, "H": 128, "L": 65536, "exchange_ms": ex_ms, "step_ms": 1.0})
    ex.append({"cp": 1, "T": 8, "H": 128, "L": 65536, "exchange_ms": 0.0, "step_ms": 0.5})
    ex.append({"cp": 2, "T": 8, "H": 128, "L": 65536, "exchange_ms": None, "step_ms": None})  # not measured
    _write(tmp_path / "exchange_2026-11-30.json", {"device": "H200", "date": "2026-11-30", "records": ex})
    # A GPU-timed side experiment with another name must not be picked over the canonical file.
    _write(tmp_path / "exchange_zz_side_2026-12-05.json", {"device": "H200", "records": [{**ex[0], "step_ms": 9e9}]})
    prof = load_profile("h200", results_dir=tmp_path)  # the exchange fit reads exchange_ms only
    # The step comparison predicts the exchange from the link defaults (out of sample): plant 10 % above that.
    dec_only = cal.apply_measurements(load_profile("h200", results_dir=None), tmp_path, use_exchange=False)
    for r in ex[:4]:
        r["step_ms"] = 1.1e3 * cal.predict_helix_step(dec_only, cp=2, T=r["T"], H=128, L=65536)["step"]
    _write(tmp_path / "exchange_2026-11-30.json", {"device": "H200", "date": "2026-11-30", "records": ex})

    assert prof.hbm_tb_per_s == 4.0 and prof.matmul_tflop_per_s["bf16"] == 800.0
    assert prof.eff("attn_memory") == pytest.approx(0.6) and prof.eff("attn_compute") == pytest.approx(0.75)
    assert prof.attn_overhead_us == pytest.approx(37.0)
    assert prof.a2a_latency_us == pytest.approx(12.0, rel=1e-6)
    assert prof.eff("link") * prof.link_gb_per_s == pytest.approx(300.0, rel=1e-6)
    assert len(prof.provenance) == 2 and dec_only.a2a_latency_us == 10.0

    rep = cal.calibration_report(tmp_path)
    c = rep["comparison"]
    assert c["file"] == "exchange_2026-11-30.json" and c["steps"] == 5  # the unmeasured record is skipped
    rows = c["rows"]
    assert [r["rel_err"] for r in rows[:4]] == pytest.approx([1 / 1.1 - 1] * 4, rel=1e-6)
    assert c["within_target"] is False  # the cp=1 row is far off on purpose
    cp1 = cal.predict_helix_step(dec_only, cp=1, T=8, H=128, L=65536)
    assert cp1["helix_a2a"] == 0 and rows[4]["rel_err"] == pytest.approx(1e3 * cp1["step"] / 0.5 - 1)
    # cp=1 step = metadata + decode of the whole 64K + pack + combine (3 us launches, 0.8 elementwise).
    dec = lt.mla_decode_term(prof, batch=8, group=1, heads=128, tokens_per_rank=65536, kv_format="bf16").seconds
    pack_comb = (8 * 128 * (1028 + 1040) + 8 * 128 * (1040 + 1028)) / (4.0e12 * 0.8)
    assert cp1["step"] == pytest.approx(3e-6 * 3 + dec + pack_comb)
    # The exchange model: planted latency 12 us vs the 10 us default -> the fitted profile differs.
    assert rep["with_exchange_fit"]["median_abs_rel_err"] != pytest.approx(c["median_abs_rel_err"])

    # A step composed by the benchmark from a named decode run is checked against that run's calibration.
    old = [{**r, "ms": r["ms"] * 2} for r in recs]
    _write(tmp_path / "mla_decode_2026-11-29_old.json", {"device": "H200", "records": old})
    _write(tmp_path / "exchange_2026-11-30.json", {"device": "H200", "records": ex,
                                                   "sources": {"decode": "mla_decode_2026-11-29_old.json"}})
    c2 = cal.calibration_report(tmp_path)["comparison"]
    assert c2["decode_calibrated_from"] == "mla_decode_2026-11-29_old.json"
    assert c2["rows"][3]["predicted_decode_ms"] == pytest.approx(2 * rows[3]["predicted_decode_ms"], rel=0.05)


def test_calibration_ignores_nan_ceilings(tmp_path):
    rec = {"backend": "ffi", "kv_dtype": "bf16", "B": 4, "L": 4096, "G": 1, "H": 128, "page_size": 64, "ms": 0.05}
    (tmp_path / "mla_decode_2026-11-30.json").write_text(
        '{"ceilings": {"copy_tb_per_s": NaN, "matmul_tflop_per_s": NaN}, "records": [%s]}' % json.dumps(rec))
    prof = load_profile("h200", results_dir=tmp_path)
    assert prof.hbm_tb_per_s == 4.22 and prof.matmul_tflop_per_s["bf16"] == 825.0
    assert len(prof.provenance) == 1


def test_calibration_skips_cpu_timed_results(tmp_path):
    rec = {"cp": 2, "T": 8, "H": 128, "L": 1024, "exchange_ms": 3.0, "step_ms": 9.0, "B": 2, "G": 4}
    _write(tmp_path / "exchange_2026-12-01.json", {"device": "x86_64 CPU; jax 0.11.2; 8 cpu device(s)",
                                                   "timing": "wall ms", "records": [rec]})
    assert cal.latest_result(tmp_path, "exchange") is None
    assert cal.calibration_report(tmp_path)["comparison"] is None
    _write(tmp_path / "exchange_2026-11-30.json", {"device": "NVIDIA H200; 2 gpu device(s)", "records": [rec]})
    assert cal.latest_result(tmp_path, "exchange").name == "exchange_2026-11-30.json"
    row = cal.calibration_report(tmp_path)["comparison"]["rows"][0]
    # B and G are taken from the record: 2 sequences x 4 tokens (no decode results: profile defaults).
    pred = cal.predict_helix_step(load_profile("h200", results_dir=None), cp=2, T=8, H=128, L=1024, B=2, G=4)
    assert row["predicted_ms"] == pytest.approx(1e3 * pred["step"])


def test_calibration_bad_results(tmp_path):
    _write(tmp_path / "mla_decode_2026-11-30.json", {"records": [{"backend": "ffi"}]})
    with pytest.raises(ValueError, match="missing"):
        load_profile("h200", results_dir=tmp_path)
    with pytest.raises(ValueError, match="B \\* G"):
        cal.predict_helix_step(load_profile("h200", results_dir=None), cp=2, T=10, H=128, L=1024, G=4)


# ---------------------------------------------------------------------------------------------
# CLI contract and the paper's qualitative result
# ---------------------------------------------------------------------------------------------
def test_cli_json_contract_and_paper_shape(capsys, tmp_path):
    from helix_jax.__main__ import main

    plot = tmp_path / "frontier.png"
    rc = main(["plan", "--model", "deepseek-r1", "--context", "1048576", "--profile", "gb200-nvl72", "--json",
               "--plot", str(plot)])
    assert rc == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("best_helix", "best_baseline"):
        assert {"layout", "ttl_ms", "batch"} <= set(res[key])
    assert res["best_helix"]["layout"]["family"] == "helix"
    assert res["best_baseline"]["layout"]["family"] == "baseline"
    # Paper, qualitatively: Helix's best TTL is lower, and at equal latency it sustains several times the batch.
    assert res["best_helix"]["ttl_ms"] < res["best_baseline"]["ttl_ms"]
    assert res["ttl_ratio"] == pytest.approx(res["best_baseline"]["ttl_ms"] / res["best_helix"]["ttl_ms"], rel=1e-3)
    assert res["batch_ratio"] >= 4
    assert plot.stat().st_size > 10_000


def test_cli_reports_infeasible_plan(capsys):
    from helix_jax.__main__ import main

    # DeepSeek-R1 in fp8 (~671 GB) cannot fit 8 H100s of 80 GB: a clear error, exit code 2.
    assert main(["plan", "--profile", "h100", "--weight-format", "fp8", "--json"]) == 2
    assert "no helix layout fits deepseek-r1" in capsys.readouterr().err


def test_cli_calibrate_without_measurements(capsys, tmp_path):
    from helix_jax.__main__ import main

    assert main(["plan", "--calibrate", "--results-dir", str(tmp_path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rep["comparison"] is None and "nothing measured" in rep["status"]
