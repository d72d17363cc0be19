#!/bin/bash
# Session 28, call 4: (1) how often the bf16 seesaw's KV crosses HBM at the multi-row-tile shapes: Nsight Compute DRAM
# and L2 read bytes of the main kernel (one launch, clock not locked) at H=128 G=4 B=16 / 64, H=64 G=4 B=64, H=128 G=1
# B=64 (the landed library, .carry/lib_fin); (2) mla_small_q8 without the proxy fence before S on whole TMA tiles
# (.carry/lib_x): its fp8 GPU format cases, and two alternating rounds against .carry/lib_fin at H=16 G=1.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s28d.log
nvidia-smi -L > $L
for shape in "128 4 16" "128 4 64" "64 4 64" "128 1 64"; do
  set -- $shape
  HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_fin timeout 100 ncu --kernel-name regex:mla_seesaw --launch-skip 1 --launch-count 1 \
    --clock-control none --metrics dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_op_read_hit_rate.pct,gpu__time_duration.sum \
    python3 benchmarks/mla_decode_profile.py --kv-dtype bf16 --B $3 --L 65536 --H $1 --G $2 --calls 2 > /tmp/ncu_$1_$2_$3.log 2>&1
  echo "== ncu H=$1 G=$2 B=$3 rc $? (KV bytes $(( $3 * 65536 * 1152 )))" >> $L
  grep -E "dram__bytes|lts__t_sec|hit_rate|gpu__time" /tmp/ncu_$1_$2_$3.log >> $L
done
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_x timeout 120 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py \
  -k "fp8_e4m3 and ffi and (test_gpu_formats or deterministic or r2)" > /tmp/t1.log 2>&1
echo "pytest fp8 FFI formats on lib_x rc $?" >> $L; grep -E "passed|failed|FAILED|Error" /tmp/t1.log | tail -6 >> $L
export AB_TMP=/tmp AB_TIMEOUT=45
B1="--B 16,64 --L 65536 --hg 16x1 --iterations 20 --kv-dtypes fp8_e4m3"
for r in 1 2; do
  ab_bench x_r$r $L $B1 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_x
  ab_bench fin_r$r $L $B1 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_fin
done
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
