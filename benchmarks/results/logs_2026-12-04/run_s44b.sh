#!/bin/bash
# Session 44, call 2, carry ["helix_jax/_lib", ".carry/lib_q2", ".carry/lib_q1", ".carry/lib_q0"]: attempt 92 continued,
# the split point of S_j at 2 / 1 / 0 blocks against main's 4 (call 1: 3 and 2 faster on every H >= 64 row, 2 best).
# (1) three alternating timing rounds; (2) pytest GPU contract, f16 and rising-max cases under q1 and q0; (3) the SM clock
# and board power (nvidia-smi every 10 ms) during 100-call runs of H=128 G=1 B=64 and G=4 B=16 under main's library.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s44b.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
L0=$PWD/helix_jax/_lib
A="--B 16,64 --L 65536 --iterations 20 --kv-dtypes bf16 --hg 128x1,128x4,64x4"
for r in 1 2 3; do
  order="head q2 q1 q0"; [ $r = 2 ] && order="q0 q1 q2 head"
  for n in $order; do
    D=$PWD/.carry/lib_$n; [ $n = head ] && D=$L0
    ab_bench ${n}_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$D
  done
  if [ $r = 1 ]; then
    for n in q1 q0; do
      HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_$n timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider \
        tests/test_mla_decode_contract.py -k "(test_gpu_contract and ffi) or rising_max or contract_f16" > /tmp/pt_$n.log 2>&1
      echo "== pytest contract [$n] rc $?" >> $L
      grep -E "^(FAILED|ERROR)|passed|failed|Error|assert" /tmp/pt_$n.log | cut -c1-200 | head -20 >> $L
    done
  fi
done
for hg in 128x1:64 128x4:16; do
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader -lms 10 > /tmp/smi.csv &
  sp=$!
  HELIX_JAX_FFI_LIB_DIR=$L0 timeout 90 python3 benchmarks/mla_decode.py --backends ffi --no-ceilings --name smi --out /tmp/ab_out \
    --B ${hg#*:} --L 65536 --iterations 100 --kv-dtypes bf16 --hg ${hg%:*} > /tmp/smi_run.log 2>&1
  kill $sp
  echo "== clocks during 100 calls of ${hg%:*} B=${hg#*:} (samples above 300 W)" >> $L
  grep backend= /tmp/smi_run.log | cut -c1-150 >> $L
  python3 - /tmp/smi.csv >> $L <<'PY'
import sys, statistics
rows = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    try:
        mhz, w = float(f[1].split()[0]), float(f[2].split()[0])
    except (ValueError, IndexError):
        continue
    if w > 300:
        rows.append((mhz, w, f[3]))
if rows:
    m = [r[0] for r in rows]; p = [r[1] for r in rows]
    print(f"n={len(rows)} sm_mhz median {statistics.median(m):.0f} min {min(m):.0f} max {max(m):.0f} | W median {statistics.median(p):.0f} max {max(p):.0f} | reasons {sorted(set(r[2] for r in rows))}")
    print("first 40 busy samples (MHz/W):", " ".join(f"{a:.0f}/{b:.0f}" for a, b, _ in rows[:40]))
PY
done
echo "== winner $(ab_winner $L)" >> $L
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
