#!/bin/bash
# Prepared in session 32 (not run: the device budget was spent), for the next session's first call; supersedes run_s32g.sh.
# Attempts 69 and 70 of the pair schedule with consumer-issued copies (HELIX_MLA_DECODE_SCHED=pair):
#   69 (branch wip/pair-fill, .carry/lib_pf, .carry/mla_standalone_pf): FlashMLA's order in WG0, S_{t+2}'s first four
#      blocks issued behind P_{t+1} V_{t+1} before waiting for it; DescAdd descriptors;
#   70 (branch wip/pair-sp0 = 69 + one commit, .carry/lib_p0, .carry/mla_standalone_p0): also WG0's P in a block of its
#      own (FlashMLA's sP0, 227 KB of shared memory), so each tile's rope block is refilled with its left half.
# .carry/lib_head = main's library (attempt 68). Build each library with cmake (HELIX_OUT_DIR=$PWD/.carry/lib_X, target
# helix_jax_ffi_cuda, helix_jax/_lib/libhelix_jax_ffi_cpu.so copied beside it) and each standalone driver with the nvcc line
# in benchmarks/mla_decode_standalone.cu's header, from a checkout of the branch. Run this from a checkout of wip/pair-sp0
# (the pair-schedule pytest cases and the standalone dschk pair modes live on the branches).
# (1) dschk pair / pairtail on both drivers; (2) the GPU contract cases twice under SCHED=pair on both libraries;
# (3) alternating rounds 69 / 70 / main at H=128 G=1 / G=4, B = 16 / 64, L=64K; (4) the pair pytest cases on the faster.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s32h.log
nvidia-smi -L > $L
for x in pf p0; do
  for v in pair pairtail; do
    timeout 60 .carry/mla_standalone_$x dschk $v > $OUT/ds_${x}_$v.log 2>&1
    echo "== $x dschk $v rc $?" >> $L; grep -E "dschk|FAIL|err" $OUT/ds_${x}_$v.log | head -4 >> $L
  done
  start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_$x HELIX_MLA_DECODE_SCHED=pair timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 \
    > $OUT/rep_$x.log 2>&1
  echo "== $x repeat rc $? $(( $(date +%s) - start )) s" >> $L
  tail -7 $OUT/rep_$x.log | cut -c1-160 >> $L
done
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --hg 128x1,128x4 --kv-dtypes bf16"
for r in 1 2; do
  ab_bench pf_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pf HELIX_MLA_DECODE_SCHED=pair
  ab_bench p0_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_p0 HELIX_MLA_DECODE_SCHED=pair
  ab_bench main_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
done
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_p0 timeout 150 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider \
  tests/test_mla_decode_contract.py -k "pair_schedule or bad_sched" > $OUT/pt_pair.log 2>&1
echo "== pytest pair-schedule cases (lib_p0) rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pt_pair.log | tail -6 | cut -c1-200 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
