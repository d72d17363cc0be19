#!/bin/bash
# Session 40, call 4, carry ["helix_jax/_lib"]: the GPU test session 39 left unrun on the GPU_CASES it added (16 row tiles
# in clusters, 5 without): test_gpu_seg_cost_contract_and_formats (every contract case and the fp8 / nvfp4 determinism
# cases under a segment cost other than the default, oracle + bitwise) and the bad-value rows, main's library.
export PYTHONPATH=$PWD
L=$OUT/s40d.log
nvidia-smi -L > $L
HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib timeout 560 python3 -m pytest -m gpu -rA -q -p no:cacheprovider \
  tests/test_mla_decode_contract.py -k "seg_cost" > /tmp/seg.log 2>&1
echo "== pytest seg_cost rc $?" >> $L
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" /tmp/seg.log | tail -12 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
