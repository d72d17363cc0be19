#!/bin/bash
# Session 31, call 4: attempt 66b, the pair schedule with tile t + 1's non-owner half and P block released before WG0
# issues S_{t+2} (.carry/lib_pair2): the GPU contract cases twice (oracle + bitwise), then alternating rounds against the
# seesaw and call 3's form (.carry/lib_pair) at H=128 G=1 / G=4, B = 16 / 64, L=64K, bf16.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s31d.log
nvidia-smi -L > $L
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pair2 HELIX_MLA_DECODE_SCHED=pair timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > /tmp/rep.log 2>&1
echo "== repeat pair2 rc $? $(( $(date +%s) - start )) s" >> $L
tail -7 /tmp/rep.log | cut -c1-160 >> $L
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --hg 128x1,128x4 --kv-dtypes bf16"
for r in 1 2; do
  ab_bench pair2_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pair2 HELIX_MLA_DECODE_SCHED=pair
  ab_bench ss_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pair2
done
ab_bench pair1 $L --B 64 --L 65536 --iterations 20 --hg 128x1 --kv-dtypes bf16 -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pair HELIX_MLA_DECODE_SCHED=pair
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
