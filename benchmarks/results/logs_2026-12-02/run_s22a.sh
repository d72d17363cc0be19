#!/bin/bash
# Session 22, call 1: the nvfp4 staging slot (branch wip/nv4-stage rebased as s22-stage; HELIX_MLA_DECODE_NV4_STAGE,
# auto = off in this build): standalone checks (+ memcheck) and ss4 timings; attempt 44 (the seesaw skips the O rescale
# where no row of a warp moved its max; branch s22-skip, .carry/lib_skip) against HEAD's library (.carry/lib_base) under
# JAX, alternating, two rounds; the JAX benchmark with the staging slot on and off (one round).
export PYTHONPATH=$PWD
L=$OUT/s22a.log
nvidia-smi -L > $L
bench() {  # name, then env assignments
  local n=$1; shift
  env "$@" timeout 100 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 16,64 \
    --hg 16x4,128x1,64x4 --no-ceilings --name s22a_$n --out /tmp/s22a $BENCH_ARGS > /tmp/s22a_$n.log 2>&1
  echo "== bench $n ($*) rc $?" >> $L
  grep -E "backend=" /tmp/s22a_$n.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' | cut -c1-200 >> $L
}
for v in nv4stage nv4stagebf16 nv4; do timeout 90 .carry/mla_standalone_stage dschk $v >> $L 2>&1; echo "dschk $v rc $?" >> $L; done
BENCH_ARGS="--kv-dtypes bf16"
for r in 1 2; do
  bench skip_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_skip
  bench base_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_base
done
BENCH_ARGS="--kv-dtypes nvfp4"
bench stage_on HELIX_MLA_DECODE_NV4_STAGE=on
bench stage_off HELIX_MLA_DECODE_NV4_STAGE=off
timeout 100 .carry/mla_standalone_stage ss4 >> $L 2>&1; echo "ss4 rc $?" >> $L
timeout 100 compute-sanitizer --tool memcheck .carry/mla_standalone_stage dschk nv4stage 2>&1 | tail -4 >> $L
echo "memcheck done" >> $L
tail -3 $L
