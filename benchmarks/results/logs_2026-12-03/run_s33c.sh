#!/bin/bash
# Session 33, third call: where attempt 72's warps wait (.carry/lib_mcp: the pair schedule, multicast issued by producer
# warps 0-1), H=128 G=1 B=64 L=64K, Nsight Compute speed-of-light / warp-state / scheduler / source counters (one launch),
# and the cycle count and tensor-pipe activity at G=4 B=16. Run from a checkout of wip/pair-mcp with carry [".carry"].
export PYTHONPATH=$PWD
L=$OUT/s33c.log
nvidia-smi -L > $L
S="--section WarpStateStats --section SchedulerStats --section SpeedOfLight --section SourceCounters --import-source no --metrics gpc__cycles_elapsed.max,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum"
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_mcp HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_multicast timeout 200 ncu \
  --kernel-name regex:mla_seesaw --launch-skip 1 --launch-count 1 --clock-control none $S -o /tmp/p python3 \
  benchmarks/mla_decode_profile.py --kv-dtype bf16 --B 64 --L 65536 --H 128 --G 1 --calls 2 > /tmp/np.log 2>&1
echo "== ncu mcp G=1 B=64 rc $?" >> $L
tail -3 /tmp/np.log >> $L
ncu -i /tmp/p.ncu-rep --print-summary none > /tmp/np_det.log 2>&1
sed -n '/Section: GPU Speed/,$p' /tmp/np_det.log | grep -vE "^ *-+ *$|^\s*$|OPT|INF|WRN" | cut -c1-150 | head -80 >> $L
ncu -i /tmp/p.ncu-rep --page source --csv --print-source sass > /tmp/p_source.csv 2>&1
python3 benchmarks/ncu_hotspots.py --top 30 /tmp/p_source.csv >> $L 2>&1
gzip -9 -c /tmp/p_source.csv > $OUT/s33c_mcp_source.csv.gz
M="--metrics gpc__cycles_elapsed.max,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum"
for cfg in "mcp HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_mcp HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_multicast" \
           "main HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head"; do
  set -- $cfg; name=$1; shift
  env "$@" timeout 100 ncu --kernel-name regex:mla_seesaw --launch-skip 1 --launch-count 1 --clock-control none $M \
    python3 benchmarks/mla_decode_profile.py --kv-dtype bf16 --B 16 --L 65536 --H 128 --G 4 --calls 2 > /tmp/nm_$name.log 2>&1
  echo "== ncu $name G=4 B=16 rc $?" >> $L
  grep -E "gpc__cycles|tensor_cycles|inst_executed" /tmp/nm_$name.log >> $L
done
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L | cut -c1-220 | head -250
