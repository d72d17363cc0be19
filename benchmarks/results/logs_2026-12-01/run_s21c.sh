#!/bin/bash
# Session 21, call 3: one arrival per warp on the seesaw's empty barriers (non-multicast) and on the decoding producers'
# full barriers, instead of one per thread. The standalone checks on the ring-wrapping case, then the JAX benchmark with
# this library and HEAD's (.carry/lib_base), alternating, two rounds.
export PYTHONPATH=$PWD
L=$OUT/s21c.log
nvidia-smi -L > $L
for v in nv4 nv4bf16 fp8 bf16; do timeout 60 .carry/mla_standalone dschk $v 2>&1 | tail -2 >> $L; echo "dschk $v rc $?" >> $L; done
for r in 1 2; do
  for lib in base warp; do
    if [ $lib = base ]; then export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_base; else unset HELIX_JAX_FFI_LIB_DIR; fi
    timeout 120 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 \
      --B 16,64 --hg 16x4,128x1 --kv-dtypes bf16,nvfp4 --no-ceilings --name s21c_${lib}_r$r --out /tmp/s21c > /tmp/s21c_${lib}_$r.log 2>&1
    echo "== bench lib=$lib round $r rc $?" >> $L
    grep -E "backend=" /tmp/s21c_${lib}_$r.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kv_tb_per_s=.*speedup/speedup/' -e 's/kernel_us=.*//' | cut -c1-160 >> $L
  done
done
unset HELIX_JAX_FFI_LIB_DIR
timeout 100 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -q -x -k "deterministic and ffi" >> $L 2>&1
echo "pytest determinism rc $?" >> $L
tail -3 $L
