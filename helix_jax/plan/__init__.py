"""Helix planner: a roofline model of Helix decoding (``python -m helix_jax plan``).

Pure Python (no JAX): model presets, hardware profiles as data, the per-layer latency model, layout
enumeration, sweeps with the throughput-interactivity Pareto frontier, and calibration against our
H200 benchmarks.
"""
from .calibrate import apply_measurements, calibration_report, compare_step_measurements, predict_helix_step
from .hardware import HardwareProfile, load_profile, profile_names
from .latency import Layout, StepResult, Workload, max_batch_by_memory, memory_per_rank, step, validate_layout
from .presets import PRESETS, ModelPreset, get_preset
from .sweeps import PAPER, compare, enumerate_layouts, pareto_frontier, plot_frontier, sweep

__all__ = ["apply_measurements", "calibration_report", "compare_step_measurements", "predict_helix_step",
           "HardwareProfile", "load_profile", "profile_names", "Layout", "StepResult", "Workload",
           "max_batch_by_memory", "memory_per_rank", "step", "validate_layout", "PRESETS", "ModelPreset",
           "get_preset", "PAPER", "compare", "enumerate_layouts", "pareto_frontier", "plot_frontier", "sweep"]
