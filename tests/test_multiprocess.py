"""Helix across two processes: jax.distributed on 127.0.0.1, CPU devices, gloo collectives.

The test starts two bounded worker processes (this file run as a script), each with 2 virtual CPU
devices; the workers build one cp=4 mesh spanning both processes and run ``helix_mla_attention``
(so the all-to-all crosses the process boundary through gloo). Process 0 writes the gathered
result; the test compares it with the same step run in this single process on a cp=4 mesh and
with the float64 dense reference.
"""
from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import numpy as np

CP, LOCAL_DEVICES, NUM_PROCESSES = 4, 2, 2
B, G, H, PAGE, MAX_LEN, SEED = 2, 4, 8, 8, 96, 7
TIMEOUT_S = 50


def make_inputs():
    """Deterministic inputs (identical in every process): KV, lens, queries, positions."""
    rng = np.random.default_rng(SEED)
    kv = rng.standard_normal((B, MAX_LEN, 576)).astype(np.float32)
    q = rng.standard_normal((B, G, H, 576)).astype(np.float32)
    lens = np.array([13, 60])                       # groups straddle pages and ranks
    pos = (lens[:, None] + np.arange(G)).astype(np.int32)
    return kv, q, lens, pos


def run_step(mesh, *, implementation, replicate=None):
    """One helix_mla_attention step on ``mesh``; returns (out, lse) as global jax Arrays."""
    import helix_jax as hj

    kv, q, lens, pos = make_inputs()
    cache = hj.HelixMLACache.from_global(kv[..., :512], kv[..., 512:], lens, mesh=mesh, page_size=PAGE,
                                         max_len=MAX_LEN)
    new = kv[np.arange(B)[:, None], pos]
    args = (q[..., :512], q[..., 512:], new[..., :512], new[..., 512:], pos)
    if replicate is not None:
        args = tuple(replicate(a) for a in args)
    out, lse, _ = hj.helix_mla_attention(cache, *args, softmax_scale=1 / np.sqrt(192.0),
                                         implementation=implementation)
    return out, lse


def _worker(pid: int, port: int, out_path: str) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=NUM_PROCESSES,
                               process_id=pid, initialization_timeout=TIMEOUT_S)
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding, PartitionSpec as P

    import helix_jax as hj

    assert jax.process_count() == NUM_PROCESSES and len(jax.devices()) == CP, jax.devices()
    mesh = hj.make_cp_mesh(CP)                       # global devices, ordered by process
    assert {d.process_index for d in mesh.devices.flat} == set(range(NUM_PROCESSES))

    def replicate(x):
        return jax.make_array_from_callback(x.shape, NamedSharding(mesh, P()), lambda idx: x[idx])

    results = {}
    for impl in ("reference", "ffi"):
        out, lse = run_step(mesh, implementation=impl, replicate=replicate)
        results[f"out_{impl}"] = np.asarray(multihost_utils.process_allgather(out, tiled=True))
        results[f"lse_{impl}"] = np.asarray(multihost_utils.process_allgather(lse, tiled=True))
    if pid == 0:
        np.savez(out_path, **results)
    multihost_utils.sync_global_devices("helix_mp_done")
    jax.distributed.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_helix_across_two_processes_equals_single_process(tmp_path):
    import jax

    import helix_jax as hj
    from helix_jax.cli.attention_check import dense_reference

    out_path = tmp_path / "mp.npz"
    port = _free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={LOCAL_DEVICES}")
    root = pathlib.Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + [p for p in [env.get("PYTHONPATH")] if p])
    procs = [subprocess.Popen([sys.executable, __file__, str(pid), str(port), str(out_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for pid in range(NUM_PROCESSES)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=TIMEOUT_S)[0])
    finally:
        for p in procs:                               # bounded: never leave a worker behind
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = [p.returncode for p in procs]
    assert codes == [0, 0], f"workers exited with {codes}:\n" + "\n---\n".join(l[-3000:] for l in logs)
    got = np.load(out_path)

    single_out, single_lse = run_step(hj.make_cp_mesh(CP, devices=jax.devices("cpu")), implementation="reference")
    kv, q, _, pos = make_inputs()
    dense = dense_reference(q, kv, pos, 1 / np.sqrt(192.0))
    for impl in ("reference", "ffi"):
        # float32 rounding only: XLA:CPU splits its dots differently with 2 vs 8 local devices
        np.testing.assert_allclose(got[f"out_{impl}"], np.asarray(single_out), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[f"lse_{impl}"], np.asarray(single_lse), rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(got[f"out_{impl}"], dense, rtol=2e-5, atol=2e-5)


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
