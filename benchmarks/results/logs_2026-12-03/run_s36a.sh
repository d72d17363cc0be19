#!/bin/bash
# Session 36, call 1, from main + the HELIX_MBAR_SUSPEND_NS switch in MbarWait, carry [".carry"]:
# .carry/lib_hint (every mbarrier wait with a 10 ms suspend-time hint: NANOSLEEP.SYNCS until the phase completes, as
# CUTLASS / FlashMLA wait) and .carry/lib_base (the same source without it: SASS-identical to main's kernels).
# (1) lib_hint: the 7 bf16 contract cases and the fp8 determinism cases twice (oracle + bitwise);
# (2) two alternating rounds hint / base, bf16 H=128 G=1 / 4, H=64 G=4, H=16 G=4 at B = 16 / 64, fp8 H=16 G=4 and H=128 G=1;
# (3) sustained load (1000 calls each, nvidia-smi every 20 ms): H=128 G=1 B=64 hint / base / FlashMLA / hint, then
#     H=128 G=4 B=64 (250 calls) hint / base.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s36a.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
HINT=$PWD/.carry/lib_hint BASE=$PWD/.carry/lib_base
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$HINT timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/s36a_rep_hint.log 2>&1
echo "== repeat hint rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' $OUT/s36a_rep_hint.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/s36a_rep_hint.log)" >> $L
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$HINT timeout 80 python3 benchmarks/mla_decode_repeat.py --suite formats --fmt fp8_e4m3 --runs 2 > $OUT/s36a_rep_hint_fp8.log 2>&1
echo "== repeat hint fp8 rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' $OUT/s36a_rep_hint_fp8.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/s36a_rep_hint_fp8.log)" >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4,16x4"
F="--B 64 --L 65536 --iterations 20 --kv-dtypes fp8_e4m3 --hg 16x4,128x1"
for r in 1 2; do
  ab_bench hint_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$HINT
  ab_bench base_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$BASE
  ab_bench hint_fp8_r$r $L $F -- HELIX_JAX_FFI_LIB_DIR=$HINT
  ab_bench base_fp8_r$r $L $F -- HELIX_JAX_FFI_LIB_DIR=$BASE
done
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader -lms 20 > $OUT/s36a_smi.csv &
SMI=$!
S="--B 64 --L 65536 --iterations 1000 --kv-dtypes bf16 --hg 128x1"
for v in hint base fm hint2; do
  echo "== $(date +%T.%N | cut -c1-12) sustained $v" >> $L
  case $v in
    fm) timeout 60 .carry/flashmla_reference 1000 64:1:128:65536 >> $L 2>&1 ;;
    base) ab_bench sus_$v $L $S -- HELIX_JAX_FFI_LIB_DIR=$BASE ;;
    *) ab_bench sus_$v $L $S -- HELIX_JAX_FFI_LIB_DIR=$HINT ;;
  esac
done
S="--B 64 --L 65536 --iterations 250 --kv-dtypes bf16 --hg 128x4"
for v in hint base; do
  echo "== $(date +%T.%N | cut -c1-12) sustained g4 $v" >> $L
  ab_bench sus_g4_$v $L $S -- HELIX_JAX_FFI_LIB_DIR=$([ $v = hint ] && echo $HINT || echo $BASE)
done
echo "== $(date +%T.%N | cut -c1-12) end" >> $L
kill $SMI
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
