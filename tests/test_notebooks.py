"""Execute every notebook headless (nbclient) with a kernel from this interpreter; any error fails.

The kernel is defined here (a temporary kernelspec whose argv is ``sys.executable``), so the run
does not depend on whatever ``python3`` kernel a user or system Jupyter installation provides:
in a fresh ``.venv`` from scripts/bootstrap.sh it is that venv's Python with its ipykernel.
The kernel gets 8 virtual CPU devices and the Agg matplotlib backend.
"""
import json
import os
import sys
from pathlib import Path

import pytest

# The test extra provides these (CI installs it); the GPU machine's image does not, where `pytest -m gpu tests/` would
# otherwise stop at collection: there this module is reported as skipped, with the reason.
nbformat = pytest.importorskip("nbformat", reason="the notebook tests need the test extra: pip install -e '.[test]'")
from jupyter_client import KernelManager  # noqa: E402
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 120


def _kernel(tmp_path: Path, **env) -> KernelManager:
    spec_dir = tmp_path / "kernels" / "helix_jax_test"
    spec_dir.mkdir(parents=True, exist_ok=True)
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "helix_jax (test)", "language": "python",
            "env": {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "MPLBACKEND": "Agg",
                    "PYTHONPATH": pythonpath, "JAX_PLATFORMS": "cpu", **env}}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    ksm = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    return KernelManager(kernel_name="helix_jax_test", kernel_spec_manager=ksm)


def _run(path: Path, tmp_path: Path, **env):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, km=_kernel(tmp_path, **env), timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()   # raises CellExecutionError on the first failing cell
    return nb


def _text(nb) -> str:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", "") if o.get("output_type") == "stream" else "")
    return "".join(out)


def test_notebooks_exist_and_are_stored_without_outputs():
    assert [p.name for p in NOTEBOOKS] == ["01_ledger_explorer.ipynb", "02_spec_verify_walkthrough.ipynb",
                                           "03_performance.ipynb"]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: stored with outputs"


@pytest.mark.parametrize("name", ["01_ledger_explorer.ipynb", "02_spec_verify_walkthrough.ipynb"])
def test_notebook_runs(name, tmp_path):
    nb = _run(ROOT / "notebooks" / name, tmp_path)
    text = _text(nb)
    if name.startswith("01"):
        assert text.count("matches the spec") == 4
    else:
        assert "max |helix trace - dense attention|" in text and "identical to greedy decoding" in text


def _synthetic_results(folder: Path):
    """Results in the two schemas the benchmarks write (decode rooflines; exchange share)."""
    folder.mkdir()
    recs = []
    for backend in ("xla", "ffi"):
        for fmt in ("bf16", "fp8_e4m3"):
            for g in (1, 4):
                ms = 0.4 + g / 10
                recs.append(dict(backend=backend, kv_dtype=fmt, B=8, L=65536, G=g, H=128, page_size=64, ms=ms,
                                 kv_tb_per_s=8 * 65536 * 1152 / (ms * 1e-3) / 1e12,
                                 tflop_per_s=2 * 8 * g * 128 * 65536 * 1088 / (ms * 1e-3) / 1e12, frac_roofline=0.5))
    (folder / "mla_decode_synthetic.json").write_text(json.dumps(
        {"device": "synthetic", "date": "2026-01-01", "ceilings": {"copy_tb_per_s": 4.2, "matmul_tflop_per_s": 800.0},
         "records": recs}))
    (folder / "exchange_synthetic.json").write_text(json.dumps(
        {"device": "synthetic", "date": "2026-01-01", "records": [
            {"cp": 2, "T": t, "exchange_ms": 0.01 * t, "step_ms": 0.1 * t + 0.05, "exchange_share": 0.1 * t / (0.1 * t + 0.05),
             "step_parts_ms": {"decode": 0.09 * t, "a2a": 0.01 * t}} for t in (1, 8)]}))
    (folder / "broken.json").write_text("{not json")


@pytest.mark.parametrize("which", ["repository", "synthetic", "none"])
def test_performance_notebook(which, tmp_path):
    env = {}
    if which == "synthetic":
        _synthetic_results(tmp_path / "results")
        env["HELIX_BENCH_RESULTS"] = str(tmp_path / "results")
    elif which == "none":
        env["HELIX_BENCH_RESULTS"] = str(tmp_path / "missing")
    text = _text(_run(ROOT / "notebooks" / "03_performance.ipynb", tmp_path, **env))
    if which == "synthetic":
        assert "8 decode records" in text and "2 exchange-share records" in text
        assert "skipping broken.json" in text and "exchange share 66.7%" in text
    elif which == "none":
        assert "No benchmark results yet" in text
    else:
        assert "results folder:" in text
