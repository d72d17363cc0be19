#!/bin/bash
# Prepared in session 32 (not run: the device budget was spent), for the next session's first call. Attempt 69 (branch
# wip/pair-fill): attempt 67's pair schedule with consumer-issued copies, plus FlashMLA's order in WG0: S_{t+2}'s first four
# blocks go into the tensor pipe behind P_{t+1} V_{t+1} before anything waits for that PV, and the wgmma descriptors move on
# by DescAdd. Build from the branch: the library into .carry/lib_pf (cmake with HELIX_OUT_DIR=$PWD/.carry/lib_pf, target
# helix_jax_ffi_cuda; copy helix_jax/_lib/libhelix_jax_ffi_cpu.so beside it) and the standalone driver into
# .carry/mla_standalone_pf (benchmarks/mla_decode_standalone.cu's header has the nvcc line); .carry/lib_head = main's library.
# Run it from a checkout of wip/pair-fill (its pytest cases and standalone modes live on the branch).
# (1) standalone dschk pair / pairtail against the double reference; (2) every GPU contract case twice under JAX with
# SCHED=pair (oracle + bitwise), then the pair-schedule pytest cases; (3) alternating rounds pair / seesaw at H=128 G=1 / G=4,
# B = 16 / 64, L=64K, with the evict-first seesaw once for the like-for-like comparison.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s32g.log
nvidia-smi -L > $L
for v in pair pairtail; do
  timeout 60 .carry/mla_standalone_pf dschk $v > $OUT/ds_$v.log 2>&1
  echo "== dschk $v rc $?" >> $L; grep -E "dschk|FAIL|err" $OUT/ds_$v.log | head -5 >> $L
done
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pf HELIX_MLA_DECODE_SCHED=pair timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/rep.log 2>&1
echo "== repeat pair rc $? $(( $(date +%s) - start )) s" >> $L
tail -7 $OUT/rep.log | cut -c1-160 >> $L
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --hg 128x1,128x4 --kv-dtypes bf16"
for r in 1 2; do
  ab_bench pf_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pf HELIX_MLA_DECODE_SCHED=pair
  ab_bench ss_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
done
ab_bench ss_ef $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head HELIX_MLA_DECODE_LOAD=tma_evict_first
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pf timeout 150 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider \
  tests/test_mla_decode_contract.py -k "pair_schedule or bad_sched" > $OUT/pt_pair.log 2>&1
echo "== pytest pair-schedule cases rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pt_pair.log | tail -6 | cut -c1-200 >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
