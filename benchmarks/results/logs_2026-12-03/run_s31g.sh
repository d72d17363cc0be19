#!/bin/bash
# Session 31, call 7: attempt 67, the pair schedule with consumer-issued copies (kSelf: each buffer part's TMA issued by
# the warpgroup whose wgmma read it last, the moment it retired; evict-first, no clusters; the producer loads Q only;
# .carry/lib_self): every GPU contract case twice against the float64 oracle and bitwise; alternating rounds against the
# seesaw (multicast, the default) at H=128 G=1 / G=4, B = 16 / 64 (self, seesaw, self: device time was short).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s31g.log
nvidia-smi -L > $L
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self HELIX_MLA_DECODE_SCHED=pair timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > /tmp/rep.log 2>&1
echo "== repeat self rc $? $(( $(date +%s) - start )) s" >> $L
tail -7 /tmp/rep.log | cut -c1-160 >> $L
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --hg 128x1,128x4 --kv-dtypes bf16"
ab_bench self_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self HELIX_MLA_DECODE_SCHED=pair
ab_bench ss_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self
ab_bench self_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self HELIX_MLA_DECODE_SCHED=pair
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
