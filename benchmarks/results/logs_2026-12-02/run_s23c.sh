#!/bin/bash
# Session 23, call 3: HEAD's library (attempts 48 + 49-kLoad-2) - issue 4's bf16 shapes with the ceilings in the same run
# (B = 1, 16, 64); the formats (bf16 / fp8 / nvfp4) at H=16 G=1, G=4 and H=128 G=1 with the ceilings; the nvfp4 GPU
# variant test of the plain-tile path (HELIX_MLA_DECODE_NV4_STAGE=off, rebuilt in session 22 after its last GPU run).
export PYTHONPATH=$PWD
L=$OUT/s23c.log
nvidia-smi -L > $L
timeout 150 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 1,16,64 --hg 16x1,16x4,128x1,128x4,64x4 \
  --kv-dtypes bf16 --name mla_decode_s23_targets --out $OUT > /tmp/s23c_targets.log 2>&1; echo "targets rc $?" >> $L
grep -E "ceilings|backend=" /tmp/s23c_targets.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' | cut -c1-220 >> $L
timeout 200 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 16,64 --hg 16x1,16x4,128x1 \
  --kv-dtypes bf16,fp8_e4m3,nvfp4 --name mla_decode_s23_formats --out $OUT > /tmp/s23c_formats.log 2>&1; echo "formats rc $?" >> $L
grep -E "ceilings|backend=" /tmp/s23c_formats.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' | cut -c1-220 >> $L
timeout 150 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -q -k "without_staging_slot" >> $L 2>&1
echo "pytest nvfp4 plain-tile variant rc $?" >> $L
tail -4 $L
