"""``python -m helix_jax <command>``: demo, plan-memory, plan, attention-check.

Each command lives in ``helix_jax/cli/<name>.py`` with ``add_arguments(parser)`` and ``run(args) -> int``.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMANDS = {
    "demo": ("demo", "speculative decoding with Helix CP on the tiny model (the main job)"),
    "attention-check": ("attention_check", "one Helix attention step vs a dense float64 reference"),
    "plan-memory": ("plan_memory", "KV/draft/state memory split per rank"),
    "plan": ("plan", "roofline planner for Helix layouts"),
}


def _ensure_cpu_devices():
    # Must happen before jax initialises its backends: gives CPU-only machines a virtual mesh.
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=8").strip()


def main(argv=None) -> int:
    _ensure_cpu_devices()
    parser = argparse.ArgumentParser(prog="python -m helix_jax", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    mods = {}
    for name, (mod, helptext) in COMMANDS.items():
        try:
            m = importlib.import_module(f"helix_jax.cli.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"helix_jax.cli.{mod}":
                raise
            continue
        p = sub.add_parser(name, help=helptext, description=helptext)
        m.add_arguments(p)
        mods[name] = m
    args = parser.parse_args(argv)
    return int(mods[args.command].run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
