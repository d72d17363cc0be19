#!/bin/bash
# Prepared in session 19 (no device lent), for branch wip/nv4-l2-f16; call 2 of 3: GPU tests of what the branch
# changes (run_s19c.sh: the env-selected variants).
#  - nvfp4 FFI format tests and the f16-query tests of both formats (the nvfp4 decoding seesaw's f16 form, the prefetch)
#  - the contract tests and the small-G*H format cases (SmColumnSums / SmMergeConsumers changed mla_small_gh and the
#    raw-tile kernels' machine code)
export PYTHONPATH=$PWD
nvidia-smi -L
echo "== nvfp4 ffi + f16 queries"
timeout 260 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k "(nvfp4 and ffi) or f16_queries" -q > $OUT/s19b_nv4.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s19b_nv4.log | cut -c1-300 | tail -12
echo "== contract"
timeout 150 python3 -m pytest -m gpu tests/test_mla_decode_contract.py -q > $OUT/s19b_contract.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s19b_contract.log | cut -c1-300 | tail -8
