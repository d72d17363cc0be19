#!/bin/bash
# Session 25, call 6: HEAD's library (attempt 56 for the fast chains only; variant 512's kernels byte-identical to
# the library before it): the one-term GPU test and every default fp8 FFI format / determinism / R2 case.
export PYTHONPATH=$PWD
L=$OUT/s25f.log
nvidia-smi -L > $L
timeout 170 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_one_term_q or fp8_q or (fp8_e4m3 and ffi and (test_gpu_formats or deterministic or r2))" >> $L 2>&1
echo "pytest one-term + bad FP8_Q + default fp8 FFI cases (HEAD's library) rc $?" >> $L
tail -3 $L
