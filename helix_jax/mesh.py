"""Mesh helpers."""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import AxisType, Mesh


def make_cp_mesh(cp: int, *, axis_name: str = "cp", devices=None) -> Mesh:
    """A 1-D mesh of ``cp`` devices (default: the first ``cp`` of ``jax.devices()``), Auto axis type."""
    devices = jax.devices() if devices is None else list(devices)
    if isinstance(cp, bool) or not isinstance(cp, int) or cp < 1:
        raise ValueError(f"cp must be an int >= 1, got {cp!r}")
    if cp > len(devices):
        raise ValueError(f"cp={cp} needs {cp} devices but only {len(devices)} are visible "
                         "(on CPU set XLA_FLAGS=--xla_force_host_platform_device_count=N)")
    return Mesh(np.array(devices[:cp]), (axis_name,), axis_types=(AxisType.Auto,))
