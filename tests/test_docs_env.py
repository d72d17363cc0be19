"""README's table of environment variables matches the FFI sources: every variable the C++ code reads is listed, and
for the ones with a fixed set of names (EnvChoice) the table lists exactly those names, the default first."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _readme_table():
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        m = re.match(r"\|\s*`(HELIX_\w+)`\s*\|([^|]*)\|", line)
        if m:
            rows[m.group(1)] = re.findall(r"`([^`]+)`", m.group(2))
    return rows


def _sources():
    return {p.name: p.read_text() for p in sorted((ROOT / "ffi" / "src").iterdir()) if p.suffix in (".cu", ".cc", ".h")}


def test_every_variable_the_ffi_code_reads_is_in_the_readme():
    rows = _readme_table()
    read = set()
    for text in _sources().values():
        read |= set(re.findall(r'(?:getenv|EnvChoice|EnvInt)\(\s*"(HELIX_\w+)"', text))
    assert read, "no environment variable found in ffi/src: the pattern is stale"
    assert not read - rows.keys(), f"read by ffi/src but not in README's table: {sorted(read - rows.keys())}"
    for var in ("HELIX_JAX_FFI_LIB_DIR", "HELIX_BENCH_RESULTS"):   # read by helix_jax/_ffi.py and notebook 03
        assert var in rows, var


def test_choice_variables_list_exactly_their_names_default_first():
    rows = _readme_table()
    choices = {}
    for text in _sources().values():
        for var, body in re.findall(r'EnvChoice\(\s*"(HELIX_\w+)",\s*\{(.*?)\}\);', text, flags=re.S):
            choices[var] = re.findall(r'\{"([^"]+)",', body)
    assert len(choices) >= 6, choices
    for var, names in choices.items():
        listed = rows[var]
        assert set(listed) == set(names), f"{var}: README lists {listed}, the code accepts {names}"
        assert listed[0] == names[0], f"{var}: README's first (default) {listed[0]!r}, the code's {names[0]!r}"
