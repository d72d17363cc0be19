"""benchmarks/ncu_hotspots.py on a small synthetic Nsight Compute source page (no GPU, no ncu)."""
import csv
import gzip
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _mod():
    spec = importlib.util.spec_from_file_location("ncu_hotspots", ROOT / "benchmarks" / "ncu_hotspots.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


HDR = ["Address", "Source", "Warp Stall Sampling (All Samples)", "stall_barrier", "stall_long_sb", "stall_wait",
       "stall_long_sb (Not Issued)"]
ROWS = [
    ["0x0", "  USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8", "2", "0", "0", "2", "0"],
    ["0x10", "  SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR38+0x36600], R179", "10", "0", "0", "10", "0"],
    ["0x20", "  @!P0  BRA 0x7f00", "700", "0", "690", "10", "690"],
    ["0x30", "  HGMMA.64x64x16.F32.BF16 R152, gdesc[UR20], R152", "50", "0", "0", "50", "0"],
    ["0x40", "  WARPGROUP.DEPBAR.LE gsb0, 0x0", "238", "230", "0", "8", "0"],
]


def _write(path, rows, gz=False):
    opener = gzip.open if gz else open
    with opener(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "void k()"])
        w.writerow(HDR)
        w.writerows(rows)


@pytest.mark.parametrize("gz", [False, True])
def test_hotspots_ranks_instructions_and_regions(tmp_path, capsys, gz):
    p = tmp_path / ("s.csv.gz" if gz else "s.csv")
    _write(p, ROWS, gz)
    assert _mod().main([str(p), "--top", "2", "--split", "3"]) == 0
    out = capsys.readouterr().out
    assert "instructions 5, samples 1000" in out
    assert "region [0, 3): 712 (71.2 %)" in out and "region [3, 5): 288 (28.8 %)" in out
    assert "BRA 70.0 %" in out
    top = [l for l in out.splitlines() if l.startswith("  ") and "%  " in l]
    assert len(top) == 2 and "BRA 0x7f00" in top[0] and "690 long_sb" in top[0]
    assert "DEPBAR" in top[1] and "230 barrier" in top[1] and "HGMMA" not in out.split("top 2")[1]


def test_hotspots_bad_input_is_a_clear_error(tmp_path, capsys):
    mod = _mod()
    p = tmp_path / "nohdr.csv"
    p.write_text("a,b\n1,2\n")
    assert mod.main([str(p)]) == 2
    assert "no header row with 'Address' and 'Source'" in capsys.readouterr().err
    q = tmp_path / "ok.csv"
    _write(q, ROWS)
    with pytest.raises(SystemExit):
        mod.main([str(q), "--split", "9"])
    assert "--split indices must lie in (0, 5)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        mod.main([str(q), "--split", "x"])
    assert "--split must be comma-separated integers" in capsys.readouterr().err
