"""benchmarks/ab_bench.sh's ab_winner: the library with the lowest summed time over the steady rows of an A/B log."""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def rows(b16_h128, b64_g1, b64_g4, h16):
    return [f"backend=ffi kv_dtype=bf16 B=16 L=65536 G=4 H=128 ms={b16_h128} kv_tb_per_s=1 tflop_per_s=1",
            f"backend=ffi kv_dtype=bf16 B=64 L=65536 G=1 H=128 ms={b64_g1} kv_tb_per_s=1 tflop_per_s=1",
            f"backend=ffi kv_dtype=bf16 B=64 L=65536 G=4 H=128 ms={b64_g4} kv_tb_per_s=1 tflop_per_s=1",
            f"backend=ffi kv_dtype=bf16 B=16 L=65536 G=4 H=16 ms={h16} kv_tb_per_s=1 tflop_per_s=1"]


def winner(tmp_path, lines):
    log = tmp_path / "ab.log"
    log.write_text("\n".join(lines) + "\n")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))  # its python3
    res = subprocess.run(["bash", "-c", f". {ROOT / 'benchmarks' / 'ab_bench.sh'}; ab_winner {log}"],
                         capture_output=True, text=True, check=True, env=env)
    return res.stdout.strip()


def test_ab_winner_counts_steady_rows_only(tmp_path):
    # new wins on the steady rows (B=16 H=128, G=1 B=64); old's B=64 G=4 (power cap) and H=16 rows are far lower
    lines = (["GPU 0: NVIDIA H200", "== bench old_r1 (X=1) rc 0"] + rows(1.70, 1.80, 7.0, 0.20)
             + ["== bench new_r1 (X=2) rc 0"] + rows(1.66, 1.79, 7.9, 0.40)
             + ["== bench new_r2 (X=2) rc 0"] + rows(1.66, 1.79, 7.9, 0.40)
             + ["== bench old_r2 (X=1) rc 0"] + rows(1.70, 1.80, 7.0, 0.20))
    assert winner(tmp_path, lines) == "new"
    # rows after another section (a final run's table) belong to no library, however fast
    assert winner(tmp_path, lines + ["== bench final [old] rc 0"] + rows(0.1, 0.1, 0.1, 0.1)) == "new"
    assert winner(tmp_path, lines[:1]) == ""
