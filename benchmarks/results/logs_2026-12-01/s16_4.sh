#!/usr/bin/env bash
# session 16, call 4: a clock64 timeline of mla_mid_q8s (standalone driver built with -DHELIX_SS_TRACE, `s8trace`), then
# the GPU format tests on HEAD's library (call 2's suite ran out of time inside this file).
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 60 .carry/mla_standalone_trace s8trace 2>&1 | tee $OUT/s16_4_s8trace.log
timeout 420 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_formats.py > $OUT/s16_4_formats.log 2>&1
echo "formats rc=$?"; grep -E "passed|failed|FAILED|Error" $OUT/s16_4_formats.log | tail -8
