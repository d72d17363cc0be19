#!/bin/bash
# Session 32, call 2: attempt 67 (branch wip/pair-self, .carry/lib_self, .carry/mla_standalone). Call 1 (s32a = run_s31g.sh)
# found it correct but 10 % slower than the seesaw, and racecheck on `dschk pairtail` printed "6 hazards" without detail.
# (1) racecheck with the hazards shown, on pair (consumer-issued), pairp (producer-fed) and bf16 (the default seesaw);
# (2) Nsight Compute speed-of-light / warp-state / scheduler / source counters of the pair kernel, H=128 G=1 B=64 L=64K;
# (3) one round: seesaw with evict-first TMA (no multicast) against the pair form, H=128 G=1 / G=4 B=64.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s32b.log
nvidia-smi -L > $L
for v in pairtail pair pairp bf16; do
  timeout 120 compute-sanitizer --tool racecheck --racecheck-report hazard .carry/mla_standalone dschk $v > /tmp/rc_$v.log 2>&1
  echo "== racecheck dschk $v rc $?" >> $L
  grep -E "SUMMARY|dschk" /tmp/rc_$v.log >> $L
  grep -vE "^\s*$" /tmp/rc_$v.log | grep -E "=====" | grep -vE "SUMMARY" | head -40 | cut -c1-220 >> $L
done
S="--section WarpStateStats --section SchedulerStats --section SpeedOfLight --section SourceCounters --import-source no --metrics gpc__cycles_elapsed.max,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum"
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self HELIX_MLA_DECODE_SCHED=pair timeout 150 ncu --kernel-name regex:mla_seesaw --launch-skip 1 \
  --launch-count 1 --clock-control none $S -o /tmp/p python3 benchmarks/mla_decode_profile.py --kv-dtype bf16 --B 64 --L 65536 \
  --H 128 --G 1 --calls 2 > /tmp/np.log 2>&1
echo "== ncu pair (consumer-issued) rc $?" >> $L
ncu -i /tmp/p.ncu-rep --print-summary none > /tmp/np_det.log 2>&1
sed -n '/Section: GPU Speed/,$p' /tmp/np_det.log | grep -vE "^ *-+ *$|^\s*$|OPT|INF|WRN" | cut -c1-150 | head -80 >> $L
ncu -i /tmp/p.ncu-rep --page source --csv --print-source sass > /tmp/p_source.csv 2>&1
python3 benchmarks/ncu_hotspots.py --top 30 /tmp/p_source.csv >> $L 2>&1
gzip -9 -c /tmp/p_source.csv > $OUT/s32b_pair_source.csv.gz
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 64 --L 65536 --iterations 20 --hg 128x1,128x4 --kv-dtypes bf16"
ab_bench ss_ef $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self HELIX_MLA_DECODE_LOAD=tma_evict_first
ab_bench pair_self $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self HELIX_MLA_DECODE_SCHED=pair
ab_bench ss_auto $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L | cut -c1-220 | head -250
