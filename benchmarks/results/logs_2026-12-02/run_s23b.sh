#!/bin/bash
# Session 23, call 2: attempt 49 (the bf16 seesaws take the other WG's tile j-1 first where S_j's first block has not
# landed; helix_jax/_lib, built from the working tree with attempt 48) against the library before it (.carry/lib_head,
# HEAD 7ba759f) on bf16, alternating, two rounds; the standalone checks + timeline + load-path breakdown at H=128 on the
# new kernels (.carry/mla_trace49); then the GPU contract tests on the new library.
export PYTHONPATH=$PWD
L=$OUT/s23b.log
nvidia-smi -L > $L
bench() {  # name, then env assignments
  local n=$1; shift
  env "$@" timeout 80 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 20 --B 16,64 \
    --hg 16x4,128x1,128x4,64x4 --kv-dtypes bf16 --no-ceilings --name s23b_$n --out /tmp/s23b > /tmp/s23b_$n.log 2>&1
  echo "== bench $n ($*) rc $?" >> $L
  grep -E "backend=" /tmp/s23b_$n.log | sed -e 's/ L=65536//' -e 's/page_size=64 //' -e 's/kernel_us=.*//' -e 's/ frac_roofline.*//' | cut -c1-200 >> $L
}
for r in 1 2; do
  bench a49_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
  bench head_r$r HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
done
timeout 150 .carry/mla_trace49 load 128 tma_multicast > $OUT/s23b_trace.log 2>&1; echo "trace rc $?" >> $L
grep -E "passing|^trace|^tile|^ *[0-9]+ |^load" $OUT/s23b_trace.log >> $L
timeout 200 python3 -m pytest -m gpu tests/test_mla_decode_contract.py -q -x >> $L 2>&1
echo "pytest contract (a49) rc $?" >> $L
tail -4 $L
