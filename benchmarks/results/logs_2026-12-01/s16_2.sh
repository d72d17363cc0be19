#!/usr/bin/env bash
# (the probe bits 128 / 256 and driver mode `pf` were removed after this call; see benchmarks/NOTES.md session 16, attempt 33)
# session 16, call 2: the bf16 seesaw's L2 prefetch probes (kVar 128 / 256: the whole tile 1 / 2 ahead): standalone
# checks and alternating timings; then `pytest -m gpu` (append + contract + formats) on HEAD's library (session 15's
# last three commits had not run on a GPU).
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 200 .carry/mla_standalone pf > $OUT/s16_2_pf.log 2>&1
echo "pf rc=$?"; grep -E "^pf|FAIL" $OUT/s16_2_pf.log | grep -v "^pf case"
timeout 370 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_append_kernel.py tests/test_mla_decode_contract.py \
  tests/test_mla_decode_formats.py > $OUT/s16_2_gpu_suite.log 2>&1
echo "suite rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/s16_2_gpu_suite.log | tail -8
