#!/bin/bash
# Session 27, call 6: the SM clock and power while the FFI decode runs under JAX (nvidia-smi sampled every 20 ms into
# s27f_smi.csv; each run's start / end marked in s27f.log): fp8 one term at H=16 G=4 and H=128 G=1, bf16 at both, B=64
# L=64K, enough iterations for ~1.5-2 s of kernels each.
export PYTHONPATH=$PWD
L=$OUT/s27f.log
nvidia-smi -L > $L
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader -lms 20 > $OUT/s27f_smi.csv &
smi=$!
run() {  # name hg dtype iterations [env]
  local name=$1 hg=$2 dt=$3 it=$4; shift 4
  echo "== $name start $(date +%Y/%m/%d\ %H:%M:%S.%3N)" >> $L
  env "$@" timeout 90 python3 benchmarks/mla_decode.py --backends ffi --no-ceilings --B 64 --L 65536 --hg $hg --kv-dtypes $dt \
    --iterations $it --name s27f_$name --out /tmp/s27f > /tmp/s27f_$name.log 2>&1
  echo "== $name end $(date +%Y/%m/%d\ %H:%M:%S.%3N) rc $?" >> $L
  grep "backend=" /tmp/s27f_$name.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-160 >> $L
}
run one16x4 16x4 fp8_e4m3 2500 HELIX_MLA_DECODE_FP8_Q=one
run bf16_16x4 16x4 bf16 1500
run one128 128x1 fp8_e4m3 1200 HELIX_MLA_DECODE_FP8_Q=one
run bf16_128 128x1 bf16 900
kill $smi
sed -i "s#$PWD/#\$PWD/#g" $L
tail -3 $L
