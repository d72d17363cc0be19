#!/bin/bash
# Session 35, call 1, from branch wip/tma-kv-block (s34_tma_kv_block.patch applied) with carry [".carry"]:
# .carry/lib_tma (this branch's library: one TmaKvBlock helper for the three TMA KV-block issue sites; 104 of 110
# kernels SASS-identical to lib_land, the six multicast kernels reordered) and .carry/lib_land (main 576851f's library).
# (0) the bf16 / E4M3 matmul rates and copy bandwidth; (1) lib_tma: the 7 contract cases twice and the GPU pytest pair-schedule cases (its multicast kernels);
# (2) two alternating rounds tma / land at H=128 G = 1 / 4, B = 16 / 64, L=64K;
# (3) = run_s35a.sh: three alternating rounds of pair (PAIR_MC=right) against auto (the seesaw) at 4 row tiles
#     (H=128 G=2, H=64 G=4; B = 16 / 64) on lib_land, with nvidia-smi sampling the SM clock and power every 50 ms.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s35b.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
# (0) the device's bf16 and E4M3 matmul rates and copy bandwidth (issue 6's nvfp4 bound)
timeout 90 python3 -c "from benchmarks.common import *; print('ceilings: bf16 matmul %.1f, e4m3 matmul %.1f TFLOP/s, copy %.3f TB/s' % (matmul_tflop_per_s(), fp8_matmul_tflop_per_s(), copy_tb_per_s()))" >> $L 2>$OUT/ceil.err
export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_tma
start=$(date +%s)
timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/rep_tma.log 2>&1
echo "== repeat tma rc $? $(( $(date +%s) - start )) s" >> $L
echo "   cases $(grep -c ' runs, ' $OUT/rep_tma.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/rep_tma.log)" >> $L
start=$(date +%s)
timeout 150 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "pair_schedule" > $OUT/s35b_pt.log 2>&1
echo "== pytest tma rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/s35b_pt.log | tail -9 | cut -c1-200 >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4"
for r in 1 2; do
  ab_bench tma_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_tma
  ab_bench land_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_land
done
export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_land
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 50 > $OUT/s35b_smi.csv &
SMI=$!
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x2,64x4"
for r in 1 2 3; do
  echo "== $(date +%T) round $r" >> $L
  ab_bench auto_r$r $L $A
  echo "== $(date +%T)" >> $L
  ab_bench pair_r$r $L $A -- HELIX_MLA_DECODE_SCHED=pair
done
echo "== $(date +%T) end" >> $L
kill $SMI
sed -i "s#$PWD/#\$PWD/#g" $L
sed -i "s#rootdir: /work/main#rootdir: .#; s#$PWD/#\$PWD/#g" $OUT/s35b_pt.log
cat $L
