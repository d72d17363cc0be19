#!/bin/bash
# Session 33, second call: attempt 72 (the pair schedule with multicast loads issued by producer warps 0-1 once both CTAs
# released a V half; the consumers only announce) on two bases: .carry/lib_mcp (branch wip/pair-mcp, on attempt 70's
# own P block) and .carry/lib_mcpf (branch wip/pair-mcpf, on attempt 69), against attempt 69 (.carry/lib_pf, no
# multicast) and main's seesaw (.carry/lib_head). Run from a checkout of wip/pair-mcp with carry [".carry"].
# (1) dschk pairmc / pairmctail / pair on the new driver; (2) the GPU contract cases twice; (3) two alternating rounds
# at H=128 G=1 / G=4, B = 16 / 64, L=64K, mcp / mcpf / pf / main; (4) the pair pytest tma_multicast case on both.
# (The contract repeat and pytest run mcpf's library from this checkout: only the library differs.)
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s33b.log
nvidia-smi -L > $L
for v in pairmc pairmctail pair; do
  timeout 60 .carry/mla_standalone_mcp dschk $v > $OUT/ds_mcp_$v.log 2>&1
  echo "== mcp dschk $v rc $?" >> $L; grep -E "dschk|FAIL|err" $OUT/ds_mcp_$v.log | head -4 >> $L
done
for x in mcp mcpf; do
  start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_$x HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_multicast timeout 100 \
    python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/rep_$x.log 2>&1
  echo "== repeat $x rc $? $(( $(date +%s) - start )) s" >> $L
  tail -7 $OUT/rep_$x.log | cut -c1-160 >> $L
done
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --hg 128x1,128x4 --kv-dtypes bf16"
for r in 1 2; do
  ab_bench mcp_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_mcp HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_multicast
  ab_bench mcpf_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_mcpf HELIX_MLA_DECODE_SCHED=pair HELIX_MLA_DECODE_LOAD=tma_multicast
  ab_bench pf_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_pf HELIX_MLA_DECODE_SCHED=pair
  ab_bench main_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
done
for x in mcp mcpf; do
  start=$(date +%s)
  HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_$x timeout 80 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider \
    tests/test_mla_decode_contract.py -k "pair_schedule and tma_multicast" > $OUT/pt_pair_$x.log 2>&1
  echo "== pytest pair-schedule tma_multicast (lib_$x) rc $? $(( $(date +%s) - start )) s" >> $L
  grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pt_pair_$x.log | tail -4 | cut -c1-200 >> $L
done
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
