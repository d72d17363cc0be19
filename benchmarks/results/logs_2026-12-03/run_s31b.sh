#!/bin/bash
# Session 31, call 2: why FlashMLA's dense decode is 12 % faster than ours at H=128 B=64 but slower at B=16 (call 1).
# (1) Nsight Compute, one launch each, clock not locked: time, elapsed cycles, SM clock, DRAM bytes, tensor-pipe
# activity, instructions of FlashMLA's main kernel and of our seesaw at H=128 G=1 B=64 / 16 and H=128 G=4 B=64;
# (2) the same two programs alternating twice at B=64 (G=1, G=4; 40 calls each) with nvidia-smi sampling the SM clock and
# power every 50 ms, to see whether the two kernels run at different clocks under the 700 W cap.
export PYTHONPATH=$PWD
L=$OUT/s31b.log
nvidia-smi -L > $L
M=gpu__time_duration.sum,gpc__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,lts__t_sector_op_read_hit_rate.pct,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
for shape in "128 1 64" "128 1 16" "128 4 64"; do
  set -- $shape
  timeout 100 ncu --kernel-name regex:flash_fwd_splitkv_mla_kernel --launch-skip 3 --launch-count 1 --clock-control none \
    --metrics $M .carry/flashmla_reference 1 $3:$2:$1:65536 > /tmp/nf.log 2>&1
  echo "== ncu flashmla H=$1 G=$2 B=$3 rc $?" >> $L
  grep -E "^ +(gpu__|gpc__|sm__|dram__|lts__|smsp__)|flashmla B" /tmp/nf.log >> $L
  HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head timeout 100 ncu --kernel-name regex:mla_seesaw --launch-skip 1 --launch-count 1 \
    --clock-control none --metrics $M python3 benchmarks/mla_decode_profile.py --kv-dtype bf16 --B $3 --L 65536 --H $1 --G $2 \
    --calls 2 > /tmp/nh.log 2>&1
  echo "== ncu helix H=$1 G=$2 B=$3 rc $?" >> $L
  grep -E "^ +(gpu__|gpc__|sm__|dram__|lts__|smsp__)" /tmp/nh.log >> $L
done
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 50 > $OUT/s31b_smi.csv &
SMI=$!
for r in 1 2; do
  echo "$(date +%T.%N) flashmla round $r" >> $L
  timeout 120 .carry/flashmla_reference 40 64:1:128:65536 64:4:128:65536 >> $L 2>&1
  echo "$(date +%T.%N) helix round $r" >> $L
  HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head timeout 150 python3 benchmarks/mla_decode.py --backends ffi --no-ceilings \
    --iterations 40 --B 64 --L 65536 --hg 128x1,128x4 --kv-dtypes bf16 --name s31b_r$r --out /tmp/b > /tmp/b.log 2>&1
  echo "$(date +%T.%N) helix done rc $?" >> $L
  grep -E "backend=" /tmp/b.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' -e 's/ frac_roofline.*//' >> $L
done
kill $SMI
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
