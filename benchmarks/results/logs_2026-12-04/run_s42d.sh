#!/bin/bash
# Session 42, call 5, carry ["helix_jax/_lib", ".carry/lib_direct"]: attempt 89 (`lib_direct` = main at e29d41b + the
# 16-bit seesaws writing a sequence covered by one segment straight into o / lse, the combine skipping it) against
# e29d41b's library (helix_jax/_lib = .carry/lib_lazy3). (1) pytest under lib_direct: GPU contract cases (ffi), f16
# cases, rising-max cases; (2) the 9 bf16 contract cases twice under lib_direct, default and SCHED=pair; (3) two
# alternating timing rounds; (4) the issue shapes with the ceilings in one run under the faster library (summed ms of
# the H=128 / H=64 rows at B=16 and H=128 G=1 B=64).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s42d.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
L1=$PWD/helix_jax/_lib L2=$PWD/.carry/lib_direct
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4,16x4"
ab_bench head_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench direct_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
HELIX_JAX_FFI_LIB_DIR=$L2 timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "(test_gpu_contract and ffi) or rising_max or contract_f16" > /tmp/pt.log 2>&1
echo "== pytest [direct] rc $?" >> $L
grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt.log | cut -c1-200 | head -20 >> $L
for sch in auto pair; do
  start=$(date +%s)
  HELIX_MLA_DECODE_SCHED=$sch HELIX_JAX_FFI_LIB_DIR=$L2 timeout 60 python3 benchmarks/mla_decode_repeat.py --runs 2 --dtype bf16 > /tmp/rep.log 2>&1
  echo "== repeat [direct SCHED=$sch bf16] rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' /tmp/rep.log), clean $(grep -c ' 0 oracle failures, 0 differ' /tmp/rep.log)" >> $L
  grep -iE "fail|differ|error" /tmp/rep.log | grep -v " 0 oracle failures, 0 differ" | head -5 >> $L
done
ab_bench direct_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench head_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
W=$(python3 - $L <<'PY'
import re, sys
t = {}
cur = None
for line in open(sys.argv[1]):
    m = re.match(r"== bench (\w+?)_r\d", line)
    if m:
        cur = m.group(1)
        continue
    m = re.search(r" ms=([\d.]+)", line)
    if m and cur and ("B=16" in line or "G=1 H=128" in line) and "H=16" not in line:
        t[cur] = t.get(cur, 0.0) + float(m.group(1))
print(min(t, key=t.get))
PY
)
echo "== summed ms (B=16 H=128 / H=64 rows, H=128 G=1 B=64): winner $W" >> $L
D=$L1; [ "$W" = direct ] && D=$L2
A2="--backends ffi --B 1,16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
HELIX_JAX_FFI_LIB_DIR=$D timeout 100 python3 benchmarks/mla_decode.py $A2 --kv-dtypes bf16 --name mla_decode_s42_final3 --out $OUT > /tmp/d1.log 2>&1
echo "== bench final [$W] rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
