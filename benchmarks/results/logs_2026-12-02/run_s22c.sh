#!/bin/bash
# Session 22, call 3: the final library of the session (attempt 44 rescale skip + the staging slot by default + attempt 45
# softmax; helix_jax/_lib): issue 4's and issue 6's shapes with the ceilings in the same run, then the nvfp4 GPU format
# cases on the default path (staging slot) and the fp8 decoding-seesaw variant test (its consumers run the new softmax).
export PYTHONPATH=$PWD
L=$OUT/s22c.log
nvidia-smi -L > $L
timeout 200 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 16,64 --hg 16x1,16x4,128x1,64x4 \
  --kv-dtypes bf16,fp8_e4m3,nvfp4 --name mla_decode_s22_final --out $OUT > /tmp/s22c_bench.log 2>&1; echo "bench rc $?" >> $L
grep -E "ceilings|backend=" /tmp/s22c_bench.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' | cut -c1-220 >> $L
timeout 60 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 1 --hg 128x1 --kv-dtypes bf16 \
  --no-ceilings --name s22c_b1 --out /tmp/s22c > /tmp/s22c_b1.log 2>&1; echo "bench B=1 rc $?" >> $L
grep -E "backend=" /tmp/s22c_b1.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' | cut -c1-260 >> $L
timeout 200 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -q -x \
  -k "((test_gpu_formats or test_gpu_r2_examples or test_gpu_ffi_formats_are_deterministic or f16_queries) and nvfp4 and (ffi or f16_queries)) or (bad_kernel_env and nv4_stage)" >> $L 2>&1
echo "pytest nvfp4 formats rc $?" >> $L
timeout 150 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -q -x -k "fp8_decode_variant" >> $L 2>&1
echo "pytest fp8 decode variant rc $?" >> $L
tail -3 $L
