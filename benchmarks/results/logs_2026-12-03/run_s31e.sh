#!/bin/bash
# Session 31, call 5: where the warps of FlashMLA's main kernel, our seesaw and attempt 66's pair schedule wait, at H=128
# G=1 B=64 L=64K bf16: Nsight Compute's warp-state and scheduler sections (one launch each, clock not locked).
export PYTHONPATH=$PWD
L=$OUT/s31e.log
nvidia-smi -L > $L
S="--section WarpStateStats --section SchedulerStats --section SpeedOfLight --metrics gpc__cycles_elapsed.max,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
timeout 120 ncu --kernel-name regex:flash_fwd_splitkv_mla_kernel --launch-skip 3 --launch-count 1 --clock-control none $S \
  .carry/flashmla_reference 1 64:1:128:65536 > /tmp/nf.log 2>&1
echo "== ncu flashmla rc $?" >> $L; sed -n '/Section: GPU Speed/,$p' /tmp/nf.log | grep -vE "^ *-+ *$|^\s*$|OPT|INF|WRN" | cut -c1-150 >> $L
for v in seesaw pair; do
  HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pair2 HELIX_MLA_DECODE_SCHED=$v timeout 120 ncu --kernel-name regex:mla_seesaw --launch-skip 1 \
    --launch-count 1 --clock-control none $S python3 benchmarks/mla_decode_profile.py --kv-dtype bf16 --B 64 --L 65536 --H 128 --G 1 \
    --calls 2 > /tmp/nh.log 2>&1
  echo "== ncu helix $v rc $?" >> $L; sed -n '/Section: GPU Speed/,$p' /tmp/nh.log | grep -vE "^ *-+ *$|^\s*$|OPT|INF|WRN" | cut -c1-150 >> $L
done
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
