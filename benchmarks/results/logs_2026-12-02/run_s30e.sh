#!/bin/bash
# Session 30, call 5: HEAD's library as built from 44e5031 (.carry/lib_head; its host code, the fp8 dispatch flags of
# session 29's review, had not run on the GPU as a whole library): the GPU contract file and the default fp8 / nvfp4 / bf16
# format, R2 and determinism cases, verbose, each part under its own limit.
export PYTHONPATH=$PWD HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
L=$OUT/s30e.log
nvidia-smi -L > $L
for part in "tests/test_mla_decode_contract.py::" "tests/test_mla_decode_formats.py::test_gpu_formats or test_gpu_r2_examples or test_gpu_ffi_formats_are_deterministic"; do
  file=${part%%::*}; sel=${part#*::}
  start=$(date +%s)
  if [ -z "$sel" ]; then
    timeout 200 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider $file > /tmp/p.log 2>&1
  else
    timeout 200 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider $file -k "$sel" > /tmp/p.log 2>&1
  fi
  echo "== $file -k \"$sel\" rc $? $(( $(date +%s) - start )) s: $(grep -c PASSED /tmp/p.log) PASSED, $(grep -c FAILED /tmp/p.log) FAILED" >> $L
  grep -E "FAILED|ERROR|[0-9]+ passed|failed" /tmp/p.log | tail -5 | cut -c1-170 >> $L
done
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
