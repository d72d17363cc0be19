"""Static check of the CUDA library's machine code: no mbarrier arrival while a shared-memory load is in flight.

Why (session 17, benchmarks/NOTES.md): the fp8 raw-tile kernels read TMA-filled ring slots with ordinary loads and then
arrive on the slot's ``empty`` barrier, after which the producer's TMA (an async-proxy write) refills it. Without a
``fence.proxy.async`` in the reading threads ptxas issued the arrival with LDS results still pending, and about one
``mla_mid_q8s`` run in 80 read a refilled slot. With the fence, ptxas waits for the loads first (it lowers the fence to
``MEMBAR.ALL.CTA; FENCE.VIEW.ASYNC.S``), so the rule this script checks is: at every ``SYNCS.ARRIVE`` no scoreboard
set by an ``LDS`` / ``LDSM`` is outstanding since the last ``MEMBAR``.

The scan follows each function's instructions in address order (not its control flow); Hopper SASS keeps the
dependency scoreboards in the second 64-bit word of each instruction (bits 46-48: the scoreboard a variable-latency
result releases, 52-57: the scoreboards an instruction waits for). Usage::

    python scripts/sass_arrive_check.py helix_jax/_lib/libhelix_jax_ffi_cuda.so   # exit 1 and a list if any
"""
import argparse
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

_INSN = re.compile(r"\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]+) \*/")
_WORD = re.compile(r"/\* (0x[0-9a-f]+) \*/")
_SMEM_LOAD = re.compile(r"^(@!?U?P\w+\s+)?LDS(M)?(\.|\s)")


def find_cuobjdump():
    """cuobjdump from PATH, the CUDA toolkit, or the pip packages ``nvidia-cuda-cuobjdump`` / ``nvidia-cuda-nvdisasm``
    (test extra; ``-sass`` runs nvdisasm from the same folder); None if absent."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    for cand in [*site.glob("nvidia/cu*/bin/cuobjdump"), *site.glob("nvidia/cuda_cuobjdump/bin/cuobjdump"),
                 pathlib.Path("/usr/local/cuda/bin/cuobjdump")]:
        if cand.is_file():
            return str(cand)
    return None


def functions(sass):
    """{function name: [(address, text, control bits)]} from ``cuobjdump -sass`` output."""
    out, name, lines = {}, None, sass.splitlines()
    i = 0
    while i < len(lines):
        head = re.search(r"Function : (\S+)", lines[i])
        if head:
            name = head.group(1)
            out[name] = []
        m = _INSN.match(lines[i])
        if m and name is not None and i + 1 < len(lines):
            hi = _WORD.search(lines[i + 1])
            if hi:
                out[name].append((m.group(1), m.group(2), int(hi.group(1), 16) >> 41))
                i += 2
                continue
        i += 1
    return out


def arrivals_with_loads_in_flight(insns):
    """[(address, instruction, outstanding load addresses)] of the arrivals issued while an LDS/LDSM result is pending."""
    pending, found = {}, []
    for addr, text, ctrl in insns:
        wait, wbar = (ctrl >> 11) & 0x3F, (ctrl >> 5) & 7
        for sb in [sb for sb in pending if wait >> sb & 1]:
            del pending[sb]
        if text.startswith("MEMBAR"):
            pending.clear()
        if "SYNCS.ARRIVE" in text and pending:
            found.append((addr, text, sorted(a for loads in pending.values() for a in loads)))
        if _SMEM_LOAD.match(text) and not text.startswith("@!PT") and wbar != 7:
            pending.setdefault(wbar, []).append(addr)
    return found


def check_library(path, cuobjdump=None):
    """{function: findings} for every function of the shared library / cubin at ``path`` with a finding."""
    tool = cuobjdump or find_cuobjdump()
    if tool is None:
        raise FileNotFoundError("cuobjdump not found: install the test extra (pip package nvidia-cuda-cuobjdump) "
                                "or a CUDA toolkit")
    res = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{tool} -sass {path} failed (is nvdisasm beside it?): {res.stderr.strip()[-500:]}")
    sass = res.stdout
    funcs = functions(sass)
    if not funcs:
        raise ValueError(f"{path}: cuobjdump printed no SASS functions")
    return {name: hits for name, insns in funcs.items() if (hits := arrivals_with_loads_in_flight(insns))}, len(funcs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library", help="shared library or cubin with sm_90a SASS")
    args = ap.parse_args(argv)
    bad, n = check_library(args.library)
    for name, hits in bad.items():
        print(name)
        for addr, text, loads in hits[:8]:
            print(f"  {addr}: {text}   (loads in flight from {', '.join(loads[:6])})")
    print(f"{n} functions, {len(bad)} with an mbarrier arrival while shared-memory loads are in flight")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
