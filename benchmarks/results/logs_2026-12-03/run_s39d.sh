#!/bin/bash
# Session 39, call 4, carry ["helix_jax/_lib"]: the tree that lands (attempt 81 not kept: main's kernels, the library
# unchanged) with GPU_CASES' two new cases (16 row tiles in clusters, 5 row tiles without): the GPU contract test for
# both backends (ffi, pallas), every KV load path of the seesaw (three calls each, bitwise) and the f16 cases.
export PYTHONPATH=$PWD
L=$OUT/s39d.log
nvidia-smi -L > $L
timeout 420 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "test_gpu_contract or load_paths" --deselect "tests/test_mla_decode_contract.py::test_gpu_contract_pair_schedule" \
  > /tmp/pt.log 2>&1
echo "== pytest rc $?" >> $L
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" /tmp/pt.log | cut -c1-160 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
