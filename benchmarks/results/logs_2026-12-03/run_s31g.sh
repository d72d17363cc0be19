#!/bin/bash
# Prepared in session 31 (not run: no device time left), for the next session's first call. Attempt 67: the pair schedule
# with consumer-issued copies (kSelf: each buffer part's TMA issued by the warpgroup whose wgmma read it last, the moment it
# retired; evict-first, no clusters; the producer loads Q only). Build from branch wip/pair-self: the library into
# .carry/lib_self (cmake, HELIX_OUT_DIR) and the standalone driver into .carry/mla_standalone (its header's nvcc line).
# (1) the standalone driver's double-reference checks: pair (consumer-issued), pairp (producer-fed, attempt 66) and
# pairtail (partial last tiles over the pool's NaN rows), then racecheck on pairtail; (2) every GPU contract case twice
# under JAX, oracle + bitwise; (3) alternating rounds self / seesaw / self at H=128 G=1 / G=4, B = 16 / 64, L=64K.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s31g.log
nvidia-smi -L > $L
for v in pair pairp pairtail; do
  timeout 60 .carry/mla_standalone dschk $v > /tmp/ds_$v.log 2>&1
  echo "== dschk $v rc $?" >> $L; grep -E "dschk|FAIL|err" /tmp/ds_$v.log | head -5 >> $L
done
timeout 200 compute-sanitizer --tool racecheck .carry/mla_standalone dschk pairtail > /tmp/rc.log 2>&1
echo "== racecheck dschk pairtail rc $?" >> $L; tail -4 /tmp/rc.log >> $L
start=$(date +%s)
HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self HELIX_MLA_DECODE_SCHED=pair timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > /tmp/rep.log 2>&1
echo "== repeat self rc $? $(( $(date +%s) - start )) s" >> $L
tail -7 /tmp/rep.log | cut -c1-160 >> $L
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --hg 128x1,128x4 --kv-dtypes bf16"
ab_bench self_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self HELIX_MLA_DECODE_SCHED=pair
ab_bench ss_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self
ab_bench self_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self HELIX_MLA_DECODE_SCHED=pair
ab_bench ss_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_self
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
