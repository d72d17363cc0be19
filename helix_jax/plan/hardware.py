"""Hardware profiles as data: JSON files under ``helix_jax/plan/profiles/`` (or any path you pass).

A profile says what one GPU and its scale-up link can do (ceilings), how close real kernels get to
those ceilings (``efficiency``), and where the numbers come from (``source``: ``"datasheet"`` or
``"measured"``). The H200 profile is ours: its ceilings are measured, and when
``benchmarks/results/`` holds our kernel benchmarks its efficiencies are fitted from them
(:func:`helix_jax.plan.calibrate.apply_measurements`).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = ["HardwareProfile", "load_profile", "profile_names", "PROFILE_DIR", "DEFAULT_RESULTS_DIR",
           "EFFICIENCY_KEYS", "MATMUL_DTYPES"]

PROFILE_DIR = Path(__file__).with_name("profiles")
# benchmarks/results of a source checkout; absent in an installed package (then defaults apply).
DEFAULT_RESULTS_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "results"

EFFICIENCY_KEYS = ("attn_memory", "attn_compute", "gemm_memory", "gemm_compute", "link", "elementwise")
MATMUL_DTYPES = ("bf16", "fp8", "fp4")
_KV_FORMATS = ("bf16", "fp8", "nvfp4")
_REQUIRED = ("name", "source", "num_gpus", "hbm_gb", "hbm_tb_per_s", "matmul_tflop_per_s", "link_gb_per_s",
             "efficiency")


@dataclass(frozen=True)
class HardwareProfile:
    """One GPU kind and its scale-up domain. Units: GB = 1e9 bytes, TB/s = 1e12 bytes/s, TFLOP/s = 1e12.

    ``link_gb_per_s`` is the per-GPU, per-direction bandwidth of the scale-up fabric; the latencies are
    the fixed cost of one collective; ``kernel_launch_us`` is the fixed cost of every modelled kernel and
    ``attn_overhead_us`` an extra fixed cost of each MLA decode call (split-KV scheduling and merge; fitted
    from our benchmarks for the H200).
    """

    name: str
    source: str
    num_gpus: int
    hbm_gb: float
    hbm_tb_per_s: float
    matmul_tflop_per_s: dict
    link_gb_per_s: float
    efficiency: dict
    attention_math: dict = field(default_factory=lambda: {"bf16": "bf16", "fp8": "bf16", "nvfp4": "bf16"})
    usable_memory_fraction: float = 0.9
    a2a_latency_us: float = 10.0
    allreduce_latency_us: float = 10.0
    kernel_launch_us: float = 3.0
    attn_overhead_us: float = 0.0
    description: str = ""
    notes: tuple = ()
    calibrate_from_results: bool = False
    provenance: tuple = ()  # files the measured numbers were read from

    # --- derived, SI units -------------------------------------------------------------------
    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tb_per_s * 1e12

    @property
    def link_bytes_per_s(self) -> float:
        return self.link_gb_per_s * 1e9

    @property
    def usable_bytes(self) -> float:
        return self.hbm_gb * 1e9 * self.usable_memory_fraction

    def matmul_flops_per_s(self, dtype: str) -> float:
        """Peak matmul rate for ``dtype``; a dtype the GPU lacks falls back to the next wider one."""
        if dtype not in MATMUL_DTYPES:
            raise ValueError(f"matmul dtype must be one of {MATMUL_DTYPES}, got {dtype!r}")
        order = MATMUL_DTYPES[:MATMUL_DTYPES.index(dtype) + 1][::-1]  # e.g. fp4 -> fp8 -> bf16
        for d in order:
            if d in self.matmul_tflop_per_s:
                return float(self.matmul_tflop_per_s[d]) * 1e12
        raise ValueError(f"profile {self.name!r} has no matmul rate for {dtype!r} or wider")

    def eff(self, key: str) -> float:
        return float(self.efficiency[key])

    def with_efficiency(self, **updates) -> "HardwareProfile":
        bad = set(updates) - set(EFFICIENCY_KEYS)
        if bad:
            raise ValueError(f"efficiency keys must be among {EFFICIENCY_KEYS}, got {sorted(bad)}")
        return replace(self, efficiency={**self.efficiency, **updates}).validate()

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["notes"], d["provenance"] = list(self.notes), list(self.provenance)
        return d

    # --- validation --------------------------------------------------------------------------
    def validate(self) -> "HardwareProfile":
        where = f"profile {self.name!r}"
        if self.source not in ("datasheet", "measured"):
            raise ValueError(f"{where}: source must be 'datasheet' or 'measured', got {self.source!r}")
        if not isinstance(self.num_gpus, int) or self.num_gpus < 1:
            raise ValueError(f"{where}: num_gpus must be a positive int, got {self.num_gpus!r}")
        for k in ("hbm_gb", "hbm_tb_per_s", "link_gb_per_s"):
            _positive(where, k, getattr(self, k))
        for k in ("a2a_latency_us", "allreduce_latency_us", "kernel_launch_us", "attn_overhead_us"):
            v = getattr(self, k)
            if not _finite(v) or v < 0:
                raise ValueError(f"{where}: {k} must be a finite number >= 0, got {v!r}")
        if not (_finite(self.usable_memory_fraction) and 0 < self.usable_memory_fraction <= 1):
            raise ValueError(f"{where}: usable_memory_fraction must be in (0, 1], got {self.usable_memory_fraction!r}")
        if not isinstance(self.matmul_tflop_per_s, dict) or not self.matmul_tflop_per_s:
            raise ValueError(f"{where}: matmul_tflop_per_s must be a non-empty dict like {{'bf16': 989}}")
        for k, v in self.matmul_tflop_per_s.items():
            if k not in MATMUL_DTYPES:
                raise ValueError(f"{where}: matmul_tflop_per_s keys must be among {MATMUL_DTYPES}, got {k!r}")
            _positive(where, f"matmul_tflop_per_s[{k!r}]", v)
        if "bf16" not in self.matmul_tflop_per_s:
            raise ValueError(f"{where}: matmul_tflop_per_s needs a 'bf16' rate (the fallback of every dtype)")
        missing = [k for k in EFFICIENCY_KEYS if k not in self.efficiency]
        if missing:
            raise ValueError(f"{where}: efficiency is missing {missing} (need all of {EFFICIENCY_KEYS})")
        for k, v in self.efficiency.items():
            if k not in EFFICIENCY_KEYS:
                raise ValueError(f"{where}: unknown efficiency key {k!r} (expected {EFFICIENCY_KEYS})")
            if not (_finite(v) and 0 < v <= 1):
                raise ValueError(f"{where}: efficiency[{k!r}] must be in (0, 1], got {v!r}")
        for kv, d in self.attention_math.items():
            if kv not in _KV_FORMATS or d not in MATMUL_DTYPES:
                raise ValueError(f"{where}: attention_math maps kv formats {_KV_FORMATS} to matmul dtypes "
                                 f"{MATMUL_DTYPES}, got {kv!r} -> {d!r}")
        return self

    @classmethod
    def from_dict(cls, data: dict) -> "HardwareProfile":
        if not isinstance(data, dict):
            raise ValueError(f"a profile must be a JSON object, got {type(data).__name__}")
        missing = [k for k in _REQUIRED if k not in data]
        if missing:
            raise ValueError(f"profile {data.get('name', '?')!r} is missing required keys {missing}")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"profile {data['name']!r} has unknown keys {sorted(unknown)}")
        kw = dict(data)
        kw["notes"] = tuple(kw.get("notes", ()))
        kw["provenance"] = tuple(kw.get("provenance", ()))
        kw["efficiency"] = dict(kw["efficiency"])
        kw["matmul_tflop_per_s"] = dict(kw["matmul_tflop_per_s"])
        if "attention_math" in kw:
            kw["attention_math"] = dict(kw["attention_math"])
        return cls(**kw).validate()


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _positive(where, key, v):
    if not (_finite(v) and v > 0):
        raise ValueError(f"{where}: {key} must be a finite number > 0, got {v!r}")


def profile_names() -> list:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name_or_path, *, results_dir=DEFAULT_RESULTS_DIR) -> HardwareProfile:
    """A built-in profile by name (``'h200'``, ``'gb200-nvl72'``, ...) or a JSON file path.

    Profiles with ``calibrate_from_results`` take ceilings and achieved efficiencies from the newest
    ``mla_decode_*.json`` / ``exchange_*.json`` in ``results_dir`` when those exist (``None``: don't).
    """
    if isinstance(name_or_path, HardwareProfile):
        prof = name_or_path.validate()
    else:
        path = Path(str(name_or_path))
        if path.suffix != ".json":
            path = PROFILE_DIR / f"{name_or_path}.json"
            if not path.is_file():
                raise ValueError(f"profile must be one of {profile_names()} or a .json path, got {name_or_path!r}")
        elif not path.is_file():
            raise ValueError(f"profile file {str(path)!r} does not exist")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"profile file {path.name!r} is not valid JSON: {e}") from None
        prof = HardwareProfile.from_dict(data)
    if prof.calibrate_from_results and results_dir is not None:
        from .calibrate import apply_measurements  # calibrate depends on this module

        prof = apply_measurements(prof, results_dir)
    return prof
