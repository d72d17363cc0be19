#!/usr/bin/env bash
# session 14, calls 1-3 and 6 (run inline, recorded here): the standalone driver built from the kernel as it stood at
# each call, then the GPU format tests with the library of call 5.
#   calls 1-3: .carry/mla_standalone s8 > $OUT/s14_N_s8.log   (N = 1, 2, 3; see README for what each build held)
#   call 6:    XLA_PYTHON_CLIENT_PREALLOCATE=false python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_formats.py
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 300 .carry/mla_standalone s8 > $OUT/s14_1_s8.log 2>&1
