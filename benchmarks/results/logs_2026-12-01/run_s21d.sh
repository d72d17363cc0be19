#!/bin/bash
# Session 21, call 4: the nvfp4 decode as a rolled loop over the latent blocks (one copy of the block's code instead of
# eight: instruction-fetch stalls). Standalone checks, the JAX benchmark against HEAD's library (.carry/lib_base)
# alternating, two rounds, then the nvfp4 GPU tests on this library.
export PYTHONPATH=$PWD
L=$OUT/s21d.log
nvidia-smi -L > $L
for v in nv4 nv4bf16; do timeout 60 .carry/mla_standalone dschk $v 2>&1 | tail -2 >> $L; echo "dschk $v rc $?" >> $L; done
for r in 1 2; do
  for lib in base roll; do
    if [ $lib = base ]; then export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_base; else unset HELIX_JAX_FFI_LIB_DIR; fi
    timeout 120 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 \
      --B 16,64 --hg 16x4,128x1 --kv-dtypes bf16,nvfp4 --no-ceilings --name s21d_${lib}_r$r --out /tmp/s21d > /tmp/s21d_${lib}_$r.log 2>&1
    echo "== bench lib=$lib round $r rc $?" >> $L
    grep -E "backend=" /tmp/s21d_${lib}_$r.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kv_tb_per_s=.*speedup/speedup/' -e 's/kernel_us=.*//' | cut -c1-160 >> $L
  done
done
unset HELIX_JAX_FFI_LIB_DIR
timeout 230 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -q -x \
  -k "(test_gpu_formats or test_gpu_r2_examples or test_gpu_ffi_formats_are_deterministic or f16_queries) and nvfp4 and (ffi or f16_queries)" >> $L 2>&1
echo "pytest nvfp4 rc $?" >> $L
tail -3 $L
