#!/bin/bash
# Session 18, call 7: the new GPU test of the pipe variant for nvfp4 (the subprocess runs every nvfp4 FFI format case
# and the R2 examples under HELIX_MLA_DECODE_DEQUANT=pipe), and the R2 examples on the default (decoding seesaw).
export PYTHONPATH=$PWD
timeout 230 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k "test_gpu_nvfp4_pipe_variant or (test_gpu_r2_examples and nvfp4)" -q > $OUT/s18g.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s18g.log | cut -c1-300 | tail -8
