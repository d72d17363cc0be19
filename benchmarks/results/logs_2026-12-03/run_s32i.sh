#!/bin/bash
# Prepared in session 32 (not run: the device budget was spent), for the next session's first call; supersedes run_s32g.sh
# and run_s32h.sh. Three forms of the pair schedule with consumer-issued copies (HELIX_MLA_DECODE_SCHED=pair), each on its
# own library and standalone driver in .carry, against main's seesaw (.carry/lib_head = main's library, attempt 68):
#   pf = attempt 69 (branch wip/pair-fill): FlashMLA's WG0 order (S_{t+2}'s first blocks behind P_{t+1} V_{t+1});
#   p0 = attempt 70 (wip/pair-sp0): + WG0's P in a block of its own (FlashMLA's sP0), rope refilled with the left half;
#   mc = attempt 71 (wip/pair-mc): + multicast over the two row tiles (HELIX_MLA_DECODE_LOAD=tma_multicast; each CTA's
#        issuing thread trades a remote arrival with the peer per V half and fill, then multicasts every other block).
# Build each library with cmake (HELIX_OUT_DIR=$PWD/.carry/lib_X, target helix_jax_ffi_cuda, helix_jax/_lib's CPU library
# copied beside it) and each driver (.carry/mla_standalone_X) with the nvcc line in benchmarks/mla_decode_standalone.cu's
# header, from a checkout of its branch. Run this from a checkout of wip/pair-mc (its pytest cases and dschk modes).
# (1) dschk on each driver (mc: G=8, two row tiles); (2) the GPU contract cases twice under each; (3) two alternating
# rounds pf / p0 / mc / main at H=128 G=1 / G=4, B = 16 / 64, L=64K; (4) the pair pytest cases on lib_mc (all four loads).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s32i.log
nvidia-smi -L > $L
chk() {  # driver variant...
  local x=$1; shift
  for v in "$@"; do
    timeout 60 .carry/mla_standalone_$x dschk $v > $OUT/ds_${x}_$v.log 2>&1
    echo "== $x dschk $v rc $?" >> $L; grep -E "dschk|FAIL|err" $OUT/ds_${x}_$v.log | head -4 >> $L
  done
}
chk pf pair pairtail
chk p0 pair pairtail
chk mc pairmc pairmctail pair
rep() {  # name lib load
  local start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_$2 HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=$3 timeout 100 \
    python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/rep_$1.log 2>&1
  echo "== repeat $1 rc $? $(( $(date +%s) - start )) s" >> $L
  tail -7 $OUT/rep_$1.log | cut -c1-160 >> $L
}
rep pf pf auto
rep p0 p0 auto
rep mc mc tma_multicast
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --hg 128x1,128x4 --kv-dtypes bf16"
for r in 1 2; do
  ab_bench pf_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pf HELIX_MLA_DECODE_SCHED=pair
  ab_bench p0_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_p0 HELIX_MLA_DECODE_SCHED=pair
  ab_bench mc_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_mc HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_multicast
  ab_bench main_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
done
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_mc timeout 200 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider \
  tests/test_mla_decode_contract.py -k "pair_schedule or bad_sched" > $OUT/pt_pair.log 2>&1
echo "== pytest pair-schedule cases (lib_mc) rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pt_pair.log | tail -8 | cut -c1-200 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
