#!/usr/bin/env bash
# session 16, call 9 (the last device minutes): the new GPU test of bitwise-identical FFI calls on fp8 / nvfp4 pages
# (tests/test_mla_decode_formats.py::test_gpu_ffi_formats_are_deterministic) on the session's final library.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_formats.py -k deterministic -rA 2>&1 | grep -E "PASSED|FAILED|passed|failed|Error" | tail -10
