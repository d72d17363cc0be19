"""Shared benchmark helpers: ceilings (copy bandwidth, bf16 matmul), device line, timing, writers.

Timing on GPU uses ``jax.experimental.mosaic.gpu.profiler.measure`` (CUPTI kernel time, all kernels of
one call summed); on CPU it falls back to wall clock around ``block_until_ready``.
"""
from __future__ import annotations

import datetime as _dt
import json
import pathlib
import platform
import re
import statistics
import subprocess
import time

import jax
import jax.numpy as jnp

__all__ = ["device_line", "today", "time_ms", "time_kernels_ms", "kernel_summary", "copy_tb_per_s", "matmul_tflop_per_s", "fp8_matmul_tflop_per_s", "ceilings",
           "write_results", "markdown_table"]


def device_line() -> str:
    """One line naming the accelerator (or the CPU) and the software stack."""
    d = jax.devices()[0]
    name = getattr(d, "device_kind", d.platform)
    if d.platform == "gpu":
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
            name = f"{smi}"
        except Exception:  # noqa: BLE001 - nvidia-smi is optional
            pass
    else:
        name = f"{platform.processor() or platform.machine()} CPU"
    return f"{name}; jax {jax.__version__}; {len(jax.devices())} {d.platform} device(s)"


def today() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")


def time_ms(f, *args, iterations: int = 20) -> float:
    """Median per-call time of ``f(*args)`` in ms (``f`` should be jitted and already compiled)."""
    return time_kernels_ms(f, *args, iterations=iterations)[0]


def _wall_ms(f, *args, iterations: int) -> float:
    """Median wall-clock ms of ``f(*args)`` around ``block_until_ready`` (no GPU: no CUPTI)."""
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(max(3, iterations // 4)):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append((time.perf_counter() - t0) * 1e3)
    return float(statistics.median(ts))


def _short_kernel_name(name: str) -> str:
    """A CUDA kernel name, mangled or not -> its identifier (``mla_small_q8``), else its first 40 characters."""
    if name.startswith("_Z"):  # Itanium mangling: a nested name is a run of length-prefixed identifiers
        pos = 3 if name.startswith("_ZN") else 2
        while (m := re.match(r"\d+", name[pos:])) is not None:
            n = int(m.group(0))
            ident = name[pos + m.end():pos + m.end() + n]
            if ident.startswith("mla_"):
                return ident
            pos += m.end() + n
    m = re.search(r"\b(mla_[A-Za-z0-9_]+)", name)
    return m.group(1) if m else name[:40]


def time_kernels_ms(f, *args, iterations: int = 20) -> tuple[float, dict[str, float]]:
    """``(median total ms, {kernel: median ms})`` of ``f(*args)`` on GPU (CUPTI, one entry per launch name;
    repeated names are summed within an iteration). Elsewhere: ``(median wall-clock ms, {})``."""
    if jax.default_backend() != "gpu":
        return _wall_ms(f, *args, iterations=iterations), {}
    from jax.experimental.mosaic.gpu import profiler
    _, per_iter = profiler.measure(f, aggregate=False, iterations=iterations)(*args)
    per_iter = per_iter if iterations > 1 else [per_iter]
    totals, by_name = [], {}
    for it in per_iter:
        totals.append(sum(t for _, t in it))
        seen: dict[str, float] = {}
        for name, t in it:
            k = _short_kernel_name(name)
            seen[k] = seen.get(k, 0.0) + t
        for k, t in seen.items():
            by_name.setdefault(k, []).append(t)
    return float(statistics.median(totals)), {k: float(statistics.median(v)) for k, v in by_name.items()}


def kernel_summary(kernels: dict[str, float]) -> str:
    """``{"mla_schedule": 0.0042, ...}`` -> ``"mla_schedule 4.2 / ..."`` in microseconds, launch order."""
    return " / ".join(f"{k} {v * 1e3:.1f}" for k, v in kernels.items())


def _torch_cuda():
    """torch if it is installed and sees a CUDA device (the GPU image has it), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _torch_median_ms(torch, make, iterations: int = 10) -> float:
    """Median CUDA-event time in ms of the call that ``make()`` returns, after three warm-up calls; its tensors are
    freed (and torch's cache emptied) before JAX runs again."""
    fn = make()
    for _ in range(3):
        fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(iterations):
        s.record(); fn(); e.record(); e.synchronize()
        ms.append(s.elapsed_time(e))
    del fn
    torch.cuda.empty_cache()
    return statistics.median(ms)


def _copy_call(torch, nbytes):
    a = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    return lambda: b.copy_(a)


def _matmul_call(torch, n):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return lambda: a @ b


def _fp8_matmul_call(torch, n):
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
    one = torch.ones((), device="cuda")
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def copy_tb_per_s(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy bandwidth in TB/s counting bytes read + written (torch on CUDA if present)."""
    if (torch := _torch_cuda()) is not None:
        ms = _torch_median_ms(torch, lambda: _copy_call(torch, nbytes))
        return 2 * nbytes / (ms * 1e-3) / 1e12
    n = nbytes // 4
    x = jax.random.normal(jax.random.key(0), (n,), jnp.float32)
    f = jax.jit(lambda v: v * 1.0001)
    ms = time_ms(f, x, iterations=10)
    return 2 * n * 4 / (ms * 1e-3) / 1e12


def matmul_tflop_per_s(n: int = 8192) -> float:
    """bf16 n^3 matrix product rate in TFLOP/s on random data (torch on CUDA if present, else XLA)."""
    if (torch := _torch_cuda()) is not None:
        ms = _torch_median_ms(torch, lambda: _matmul_call(torch, n))
        return 2 * n ** 3 / (ms * 1e-3) / 1e12
    ka, kb = jax.random.split(jax.random.key(1))
    a = jax.random.normal(ka, (n, n), jnp.bfloat16)
    b = jax.random.normal(kb, (n, n), jnp.bfloat16)
    ms = time_ms(jax.jit(lambda x, y: x @ y), a, b, iterations=10)
    return 2 * n ** 3 / (ms * 1e-3) / 1e12


def fp8_matmul_tflop_per_s(n: int = 8192) -> float:
    """E4M3 x E4M3 -> bf16 n^3 matrix product rate in TFLOP/s (torch's ``_scaled_mm`` on CUDA if present, else XLA).

    Not one of the results JSON's ceilings: it bounds what fp8 tensor-core math can buy (issue 6's nvfp4 bound).
    """
    if (torch := _torch_cuda()) is not None:
        ms = _torch_median_ms(torch, lambda: _fp8_matmul_call(torch, n))
        return 2 * n ** 3 / (ms * 1e-3) / 1e12
    ka, kb = jax.random.split(jax.random.key(2))
    a = jax.random.normal(ka, (n, n), jnp.float32).astype(jnp.float8_e4m3fn)
    b = jax.random.normal(kb, (n, n), jnp.float32).astype(jnp.float8_e4m3fn)
    f = jax.jit(lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.bfloat16))
    ms = time_ms(f, a, b, iterations=10)
    return 2 * n ** 3 / (ms * 1e-3) / 1e12


def ceilings(*, small: bool = False) -> dict:
    """Measured ``{"copy_tb_per_s", "matmul_tflop_per_s"}`` of this device (``small`` for CPU smoke runs)."""
    if small:
        return {"copy_tb_per_s": copy_tb_per_s(64 << 20), "matmul_tflop_per_s": matmul_tflop_per_s(512)}
    return {"copy_tb_per_s": copy_tb_per_s(), "matmul_tflop_per_s": matmul_tflop_per_s()}


def markdown_table(records: list[dict], columns: list[str]) -> str:
    def fmt(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in records]
    return "\n".join(lines)


def write_results(out_dir, name: str, payload: dict, columns: list[str], notes: list[str] = ()) -> tuple[pathlib.Path, pathlib.Path]:
    """Write ``<name>_<date>.json`` (payload as is) and a Markdown table of ``payload["records"]`` beside it."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{name}_{payload['date']}"
    jp, mp = out / f"{stem}.json", out / f"{stem}.md"
    jp.write_text(json.dumps(payload, indent=1) + "\n")
    c = payload.get("ceilings", {})
    head = [f"# {name} ({payload['date']})", "", f"Device: {payload['device']}", "",
            f"Ceilings: copy {c.get('copy_tb_per_s', 0):.3g} TB/s, bf16 matmul {c.get('matmul_tflop_per_s', 0):.4g} TFLOP/s", ""]
    body = [markdown_table(payload["records"], columns)]
    tail = ["", *[f"- {n}" for n in notes]] if notes else []
    mp.write_text("\n".join(head + body + tail) + "\n")
    return jp, mp
