#!/bin/bash
# Session 29, call 4: the 10 cases of tests/test_mla_decode_formats.py that call 3 left (its limit), on .carry/lib_f,
# verbose: the bad kernel-env values first (quick), then the nvfp4 bf16-math / no-staging variants and the fp8 decoding seesaw.
export PYTHONPATH=$PWD HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_f
L=$OUT/s29d.log
nvidia-smi -L > $L
for sel in "bad_kernel_env" "nvfp4_bf16_math or without_staging or fp8_decode_variant"; do
  start=$(date +%s)
  timeout 160 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_formats.py -k "$sel" > /tmp/d.log 2>&1
  echo "== -k \"$sel\" rc $? $(( $(date +%s) - start )) s" >> $L
  grep -E "PASSED|FAILED|ERROR|passed|failed" /tmp/d.log | sed -e 's/^tests\/test_mla_decode_formats.py:://' | cut -c1-150 >> $L
done
sed -i "s#$PWD/#\$PWD/#g" $L
tail -20 $L
