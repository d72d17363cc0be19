#!/bin/bash
# Session 23, call 6 (the last device minutes): attempt 51 (multicast seesaw: all of S_j before the other WG's PV_{j-1};
# helix_jax/_lib) against HEAD's library (.carry/lib_head2) at the multicast shapes, alternating, two rounds; then the
# standalone driver (.carry/mla_sa51): its checks of every seesaw load path against the double reference and the
# load-path breakdown at H=128 G=1 B=64.
export PYTHONPATH=$PWD
L=$OUT/s23f.log
nvidia-smi -L > $L
bench() {  # name, then env assignments
  local n=$1; shift
  env "$@" timeout 45 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 16,64 \
    --hg 128x1,128x4,64x4 --kv-dtypes bf16 --no-ceilings --name s23f_$n --out /tmp/s23f > /tmp/s23f_$n.log 2>&1
  echo "== bench $n ($*) rc $?" >> $L
  grep -E "backend=" /tmp/s23f_$n.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' -e 's/ frac_roofline.*//' | cut -c1-200 >> $L
}
for r in 1 2; do
  bench a51_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
  bench head_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head2
done
timeout 60 stdbuf -oL .carry/mla_sa51 load 128 tma_multicast > $OUT/s23f_load.log 2>&1; echo "standalone rc $?" >> $L
grep -E "passing|^load|FAIL" $OUT/s23f_load.log | head -20 >> $L
tail -4 $L
