#!/bin/bash
# Session 38, call 1, carry ["helix_jax/_lib", ".carry"]: attempt 80 (the owner's PV in two column groups; blocks 0-1 of
# its V half go back as soon as their group retires, so S_{j+2}'s first blocks refill half a PV earlier).
#   .carry/lib_blk  = attempt 80 (this tree's library);  .carry/lib_half = the same PV halves, no early release
#   .carry/lib_land = main (session 37's landed library);  .carry/mla_trace(_blk) = the standalone driver with
#   -DHELIX_SS_TRACE built from main / from this tree.
# (1) lib_blk: the 7 bf16 contract cases twice under the default, LOAD=tma_evict_first, LOAD=tma and SCHED=seesaw
#     (oracle + bitwise), then f16 / bf16 cases at G*H = 64 and 128 (the changed seesaw kernels) against the oracle;
# (2) two alternating 20-call rounds blk / land / half at H=128 G=1 and H=16 G=4, B = 16, 64;
# (3) 400 back-to-back calls blk / land at H=128 G=1 B=64;
# (4) the seesaw timeline (tiles 40..47 of CTA (0, 0)) and load-path breakdown at H=128, main and attempt 80.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s38a.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=80
BLK=$PWD/.carry/lib_blk LAND=$PWD/.carry/lib_land HALF=$PWD/.carry/lib_half
rep() {  # name, env...
  local n=$1; shift
  local start=$(date +%s)
  env HELIX_JAX_FFI_LIB_DIR=$BLK "$@" timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/s38a_rep_$n.log 2>&1
  echo "== repeat $n ($*) rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' $OUT/s38a_rep_$n.log), clean $(grep -c ' 0 oracle failures, 0 differ' $OUT/s38a_rep_$n.log)" >> $L
}
rep default
rep evict HELIX_MLA_DECODE_LOAD=tma_evict_first
rep tma HELIX_MLA_DECODE_LOAD=tma
rep seesaw HELIX_MLA_DECODE_SCHED=seesaw
HELIX_JAX_FFI_LIB_DIR=$BLK timeout 120 python3 - >> $L 2>&1 <<'PY'
import sys, numpy as np, jax.numpy as jnp
sys.path[:0] = ["tests", "."]
import test_mla_decode_contract as c
for dt in (jnp.float16, jnp.bfloat16):
    for (B, G, H, P, lens) in [(2, 1, 128, 64, [9000, 130]), (1, 1, 128, 64, [70000]), (4, 4, 16, 64, [70000, 65, 64, 1]),
                               (3, 1, 64, 64, [4097, 200, 64])]:
        case = c.gpu_case(np.random.default_rng(B * 1000 + G * 100 + H), B, G, H, P, lens, dtype=dt)
        try:
            c.check(case, *c.run(case, "ffi")); r = "ok"
        except AssertionError as e:
            r = "FAIL " + str(e)[:300]
        print(f"extra case {jnp.dtype(dt).name} B={B} G={G} H={H} lens={lens}: {r}", flush=True)
PY
echo "== extra cases rc $?" >> $L
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,16x4"
for r in 1 2; do
  ab_bench blk_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$BLK
  ab_bench land_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$LAND
  ab_bench half_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$HALF
done
S="--B 64 --L 65536 --iterations 400 --kv-dtypes bf16 --hg 128x1"
ab_bench sus_blk $L $S -- HELIX_JAX_FFI_LIB_DIR=$BLK
ab_bench sus_land $L $S -- HELIX_JAX_FFI_LIB_DIR=$LAND
for t in mla_trace mla_trace_blk; do
  timeout 90 .carry/$t load 128 tma_multicast > $OUT/s38a_$t.log 2>&1; echo "== trace $t rc $?" >> $L
  grep -E "passing|^trace|^tile|^ *[0-9]+ |^load|period|alone" $OUT/s38a_$t.log | head -40 >> $L
done
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
