#!/bin/bash
# Session 21, call 2: the nvfp4 early raw issue (HELIX_MLA_DECODE_NV4_EARLY, default on in this build): the standalone
# check on the ring-wrapping case (+ memcheck), the JAX benchmark with it on and off (alternating), then the GPU tests.
export PYTHONPATH=$PWD
L=$OUT/s21b.log
nvidia-smi -L > $L
for v in nv4early nv4; do timeout 60 .carry/mla_standalone dschk $v >> $L 2>&1; echo "dschk $v rc $?" >> $L; done
timeout 120 compute-sanitizer --tool memcheck .carry/mla_standalone dschk nv4early 2>&1 | tail -4 >> $L
for r in 1 2; do
  for e in on off; do
    HELIX_MLA_DECODE_NV4_EARLY=$e timeout 150 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 \
      --B 16,64 --hg 16x4,128x1,64x4 --kv-dtypes bf16,nvfp4 --no-ceilings --name s21b_${e}_r$r --out /tmp/s21b > /tmp/s21b_${e}_$r.log 2>&1
    echo "== bench early=$e round $r rc $?" >> $L
    grep -E "backend=" /tmp/s21b_${e}_$r.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' | cut -c1-200 >> $L
  done
done
timeout 240 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -q -x \
  -k "((test_gpu_formats or test_gpu_r2_examples or test_gpu_ffi_formats_are_deterministic or f16_queries) and nvfp4 and (ffi or f16_queries)) or nv4_early" >> $L 2>&1
echo "pytest default+bad rc $?" >> $L
tail -5 $L
