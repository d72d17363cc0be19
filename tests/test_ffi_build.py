"""The FFI libraries are built and the CUDA source compiles for sm_90a (no GPU needed).

CI builds ``ffi/`` before pytest (scripts/bootstrap.sh); a missing CPU library is a failure here.
The nvcc checks skip only when no nvcc exists on this machine.
"""
import ctypes
import os
import pathlib
import re
import shutil
import subprocess

import jax.ffi
import pytest

from helix_jax import _ffi

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _nvcc():
    found = shutil.which("nvcc")
    if found:
        return found
    for cand in ("/usr/local/bin/nvcc", "/usr/local/cuda/bin/nvcc"):
        if os.access(cand, os.X_OK):
            return cand
    return None


def test_cpu_library_built_with_mla_symbol():
    path = _ffi.find_library("cpu")
    assert path is not None, f"CPU FFI library missing: run `{_ffi.BUILD_COMMAND}`"
    lib = ctypes.CDLL(str(path))
    for sym in ("HelixMlaDecodeCpu", "HelixMlaDecodeFp8Cpu", "HelixMlaDecodeNvfp4Cpu"):
        assert hasattr(lib, sym), sym


@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not installed on this machine")
def test_cuda_library_built_with_mla_symbol():
    path = _ffi.find_library("cuda")
    assert path is not None, f"nvcc is present but the CUDA FFI library is missing: run `{_ffi.BUILD_COMMAND}`"
    # Loading needs no GPU (static cudart resolves the driver lazily).
    lib = ctypes.CDLL(str(path))
    for sym in ("HelixMlaDecodeCuda", "HelixMlaDecodeFp8Cuda", "HelixMlaDecodeNvfp4Cuda"):
        assert hasattr(lib, sym), sym


@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not installed on this machine")
def test_mla_decode_cu_compiles_for_sm90a_and_schedule_is_exact(tmp_path):
    """One nvcc build of tests/mla_decode_schedule_check.cu (it includes ffi/src/mla_decode_cuda.cu):
    the kernels compile for sm_90a without register spills, and the host-side run checks the split-KV
    schedule (exact tile coverage, contiguous balanced parts, each part's own plan) on 3000 random batches and
    the workspace layout against ffi.py's workspace_bytes. No GPU needed."""
    exe = tmp_path / "mla_schedule_check"
    cmd = [_nvcc(), "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "--use_fast_math",
           "-diag-suppress", "940,2473", "-Xcompiler", "-Wno-return-type", "-Xptxas", "-v",
           f"-I{jax.ffi.include_dir()}", f"-I{ROOT / 'ffi' / 'src'}", str(ROOT / "tests" / "mla_decode_schedule_check.cu"),
           "-o", str(exe)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "sm_90a" in res.stderr
    # The main kernel holds a 64x256 fp32 accumulator slice per warpgroup: spilling it would be a silent slowdown.
    found = re.findall(r"Function properties for (\S*mla_split_kv\S*)\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores",
                       res.stderr)
    # {bf16, f16} x ({mma, wgmma} native + {tile, pipe, fp8qk} fp8 + {tile, pipe} nvfp4)
    assert len(found) == 14, res.stderr[-3000:]
    for name, _, spills in found:
        assert spills == "0", f"{name} spills {spills} bytes"
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "schedule ok" in run.stdout, run.stdout + run.stderr
    # ffi.py sizes the workspace XLA allocates; the handler's Layout must need exactly that much.
    from helix_jax.ops.mla_decode import ffi as ffi_backend
    layouts = re.findall(r"^layout (\d+) (\d+) (\d+)$", run.stdout, re.M)
    assert len(layouts) == 24, run.stdout[-2000:]
    for b, gh, total in layouts:
        assert ffi_backend.workspace_bytes(int(b), int(gh)) == int(total), (b, gh, total)


@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("probe", ["tma_stream_probe", "dsmem_exchange_probe"])
def test_probe_compiles_for_sm90a(tmp_path, probe):
    """The single-file GPU probes of benchmarks/ still build for sm_90a with their documented command, so the
    measurements can be repeated: tma_stream_probe.cu (the load patterns behind the KV maps' 128-byte L2 promotion) and
    dsmem_exchange_probe.cu (the distributed-shared-memory exchange the split-dims decode sketch depends on,
    benchmarks/NOTES.md session 23). No GPU needed."""
    exe = tmp_path / probe
    cmd = [_nvcc(), "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a",
           str(ROOT / "benchmarks" / f"{probe}.cu"), "-o", str(exe)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    assert exe.exists()


def _sass_check():
    import importlib.util
    spec = importlib.util.spec_from_file_location("sass_arrive_check", ROOT / "scripts" / "sass_arrive_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sass_check_flags_a_release_with_loads_in_flight():
    """scripts/sass_arrive_check.py on two excerpts of mla_mid_q8s's SASS (the V^T loads, then the ring slot's release):
    before session 17's fix the arrival was issued with LDS.64 results outstanding (flagged); with the fence ptxas waits
    for them at a MEMBAR (clean), and the same excerpt without its MEMBAR is flagged again."""
    chk = _sass_check()
    data = ROOT / "tests" / "data"
    before = chk.functions((data / "sass_mid_q8s_release_unfenced.txt").read_text())
    after_text = (data / "sass_mid_q8s_release_fenced.txt").read_text()
    after = chk.functions(after_text)
    assert len(before) == len(after) == 1
    (hits,) = [chk.arrivals_with_loads_in_flight(v) for v in before.values()]
    assert len(hits) == 1 and "SYNCS.ARRIVE" in hits[0][1] and len(hits[0][2]) >= 3, hits
    assert "LDS" in after_text and all(not chk.arrivals_with_loads_in_flight(v) for v in after.values())
    no_membar = chk.functions("\n".join(l for l in after_text.splitlines() if "MEMBAR" not in l))
    assert all(chk.arrivals_with_loads_in_flight(v) for v in no_membar.values())


@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not installed on this machine")
def test_cuda_library_releases_wait_for_their_shared_loads():
    """No mbarrier arrival in the built CUDA library is issued while a shared-memory load is in flight: a ring slot read
    with ordinary loads goes back to its TMA producer only after a proxy fence (the fp8 race of session 17)."""
    chk = _sass_check()
    path = _ffi.find_library("cuda")
    assert path is not None, f"nvcc is present but the CUDA FFI library is missing: run `{_ffi.BUILD_COMMAND}`"
    assert chk.find_cuobjdump() is not None, "cuobjdump missing: install the test extra (nvidia-cuda-cuobjdump)"
    bad, n = chk.check_library(path)
    assert n > 20 and not bad, {name: hits[:2] for name, hits in bad.items()}
