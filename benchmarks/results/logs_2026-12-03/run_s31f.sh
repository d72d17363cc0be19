#!/bin/bash
# Session 31, call 6: where the warps stall, per SASS instruction (Nsight Compute source counters, one launch, SM clock not
# locked), in FlashMLA's main kernel and in our seesaw (HEAD's library), H=128 G=1 B=64 L=64K bf16; ranked by
# benchmarks/ncu_hotspots.py. FlashMLA needs 22 % fewer cycles on this shape (calls 2 and 5).
export PYTHONPATH=$PWD
L=$OUT/s31f.log
nvidia-smi -L > $L
S="--section SourceCounters --section WarpStateStats --import-source no"
timeout 200 ncu --kernel-name regex:flash_fwd_splitkv_mla_kernel --launch-skip 3 --launch-count 1 --clock-control none $S \
  -o /tmp/f .carry/flashmla_reference 1 64:1:128:65536 > /tmp/f_ncu.log 2>&1
echo "== ncu flashmla rc $?" >> $L
ncu -i /tmp/f.ncu-rep --page source --csv --print-source sass > /tmp/f_source.csv 2>&1
python3 benchmarks/ncu_hotspots.py --top 40 /tmp/f_source.csv >> $L 2>&1
gzip -9 -c /tmp/f_source.csv > $OUT/s31f_flashmla_source.csv.gz
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head timeout 200 ncu --kernel-name regex:mla_seesaw --launch-skip 1 --launch-count 1 \
  --clock-control none $S -o /tmp/h python3 benchmarks/mla_decode_profile.py --kv-dtype bf16 --B 64 --L 65536 --H 128 --G 1 \
  --calls 2 > /tmp/h_ncu.log 2>&1
echo "== ncu helix seesaw rc $?" >> $L
ncu -i /tmp/h.ncu-rep --page source --csv --print-source sass > /tmp/h_source.csv 2>&1
python3 benchmarks/ncu_hotspots.py --top 40 /tmp/h_source.csv >> $L 2>&1
gzip -9 -c /tmp/h_source.csv > $OUT/s31f_seesaw_source.csv.gz
sed -i "s#$PWD/#\$PWD/#g" $L
head -c 6000 $L
