#!/bin/bash
# Session 33, fifth call: main with attempt 72 merged (helix_jax/_lib, carried) under the default environment, where
# HELIX_MLA_DECODE_SCHED=auto picks the pair schedule with multicast at G*H >= 512: (1) the contract cases twice
# (oracle + bitwise); (2) pytest: the ffi GPU contract cases, the new f16 cases at G*H >= 512, the forced-seesaw
# contract case; (3) one round against main's previous library (.carry/lib_head), H=128 G = 1 / 4, B = 16 / 64.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s33e.log
nvidia-smi -L > $L
start=$(date +%s)
timeout 100 python3 benchmarks/mla_decode_repeat.py --runs 2 > $OUT/rep.log 2>&1
echo "== repeat (default env) rc $? $(( $(date +%s) - start )) s" >> $L
tail -7 $OUT/rep.log | cut -c1-160 >> $L
start=$(date +%s)
timeout 150 python3 -m pytest -m gpu -v -rfE -p no:cacheprovider tests/test_mla_decode_contract.py \
  -k "test_gpu_contract_f16 or test_gpu_contract[ffi or (pair_schedule and seesaw)" > $OUT/pt.log 2>&1
echo "== pytest rc $? $(( $(date +%s) - start )) s" >> $L
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/pt.log | tail -14 | cut -c1-200 >> $L
export AB_TMP=/tmp AB_TIMEOUT=80
A="--B 16,64 --L 65536 --iterations 20 --hg 128x1,128x4 --kv-dtypes bf16"
ab_bench new $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
ab_bench head $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
