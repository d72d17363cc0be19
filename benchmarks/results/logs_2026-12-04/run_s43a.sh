#!/bin/bash
# Session 43, call 1, carry [".carry/lib_sync"]: attempt 90, step sync of the multicast seesaw's row-tile pairs
# (HELIX_MLA_DECODE_SS_SYNC = off | 4 | 16 | 64; off runs main's kernels, SASS-identical). (1) DRAM bytes under Nsight
# Compute, off vs 16, H=128 G=4 B=64 and H=64 G=4 B=64; (2) GPU contract cases and the bf16 repeat cases under SYNC=4;
# (3) two alternating timing rounds of off / 4 / 16 / 64.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s43a.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
export HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_sync
for shape in "128 4 64" "64 4 64"; do
  set -- $shape
  for sy in off 16; do
    HELIX_MLA_DECODE_SS_SYNC=$sy timeout 100 ncu --kernel-name regex:mla_seesaw --launch-skip 1 --launch-count 1 \
      --clock-control none --metrics dram__bytes_read.sum,lts__t_sector_op_read_hit_rate.pct,gpu__time_duration.sum \
      python3 benchmarks/mla_decode_profile.py --kv-dtype bf16 --B $3 --L 65536 --H $1 --G $2 --calls 2 > /tmp/ncu.log 2>&1
    echo "== ncu SYNC=$sy H=$1 G=$2 B=$3 rc $? (KV bytes $(( $3 * 65536 * 1152 )))" >> $L
    grep -E "dram__bytes|hit_rate|gpu__time|rror" /tmp/ncu.log | head -5 >> $L
  done
done
HELIX_MLA_DECODE_SS_SYNC=4 timeout 100 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "(test_gpu_contract and ffi) or rising_max" > /tmp/pt.log 2>&1
echo "== pytest [SYNC=4] rc $?" >> $L
grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt.log | cut -c1-200 | head -20 >> $L
start=$(date +%s)
HELIX_MLA_DECODE_SS_SYNC=4 timeout 60 python3 benchmarks/mla_decode_repeat.py --runs 2 --dtype bf16 > /tmp/rep.log 2>&1
echo "== repeat [SYNC=4 bf16] rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' /tmp/rep.log), clean $(grep -c ' 0 oracle failures, 0 differ' /tmp/rep.log)" >> $L
grep -iE "fail|differ|error" /tmp/rep.log | grep -v " 0 oracle failures, 0 differ" | head -5 >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x4,64x4"
for r in 1 2; do
  for sy in off 4 16 64; do
    ab_bench s${sy}_r$r $L $A -- HELIX_MLA_DECODE_SS_SYNC=$sy
  done
done
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
