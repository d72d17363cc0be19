#!/bin/bash
# Session 21, call 6 (the last device minutes): issue 4's memory-bound and compute-bound shapes with the ceilings in the
# same run, on HEAD's library (.carry/lib_base: 654ed86's kernels, as 09f253c's).
export PYTHONPATH=$PWD HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_base
timeout 200 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 64 --hg 16x1,16x4,128x1 \
  --kv-dtypes bf16 --name mla_decode_s21_targets --out $OUT > $OUT/s21f.log 2>&1; echo rc $? >> $OUT/s21f.log
grep -E "ceilings|backend=" $OUT/s21f.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' | cut -c1-220
