#!/bin/bash
# Session 42, call 4, carry ["helix_jax/_lib", ".carry/lib_lazy2", ".carry/lib_lazy3"]: attempt 88 (`lib_lazy3` =
# attempts 86-87 + the row sums as a tree and P's stores before the lazy check) against attempts 86-87 (`lib_lazy2`).
# (1) pytest under lib_lazy3: GPU contract cases (ffi), f16 cases, rising-max cases; (2) the 9 bf16 and f16 contract
# cases twice (oracle + bitwise) under lib_lazy3; (3) three alternating timing rounds; (4) the issue shapes with the
# ceilings in one run (benchmarks/mla_decode.py), under whichever library had the lower summed time over (3) on the
# H=128 / H=64 rows at B=16 and H=128 G=1 B=64 (the B=64 G=4 rows move +-5 % with the power cap).
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s42c.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
L1=$PWD/.carry/lib_lazy2 L2=$PWD/.carry/lib_lazy3
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4,16x4"
ab_bench lazy2_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench lazy3_r1 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
HELIX_JAX_FFI_LIB_DIR=$L2 timeout 200 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "(test_gpu_contract and ffi) or rising_max or contract_f16" > /tmp/pt.log 2>&1
echo "== pytest [lazy3] rc $?" >> $L
grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt.log | cut -c1-200 | head -20 >> $L
for d in bf16 f16; do
  start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$L2 timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 --dtype $d > /tmp/rep.log 2>&1
  echo "== repeat [lazy3 $d] rc $? $(( $(date +%s) - start )) s: cases $(grep -c ' runs, ' /tmp/rep.log), clean $(grep -c ' 0 oracle failures, 0 differ' /tmp/rep.log)" >> $L
  grep -iE "fail|differ|error" /tmp/rep.log | grep -v " 0 oracle failures, 0 differ" | head -5 >> $L
done
ab_bench lazy3_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
ab_bench lazy2_r2 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench lazy2_r3 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L1
ab_bench lazy3_r3 $L $A -- HELIX_JAX_FFI_LIB_DIR=$L2
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
D=$L1; [ "$W" = lazy3 ] && D=$L2
A2="--backends ffi --B 1,16,64 --L 65536 --hg 16x1,16x4,64x4,128x1,128x4 --iterations 20"
HELIX_JAX_FFI_LIB_DIR=$D timeout 150 python3 benchmarks/mla_decode.py $A2 --kv-dtypes bf16 --name mla_decode_s42_final2 --out $OUT > /tmp/d1.log 2>&1
echo "== bench final [$W] rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/d1.log | sed -e 's/ page_size=[0-9]*//' -e 's/ kernel_us=.*//' | cut -c1-200 >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
