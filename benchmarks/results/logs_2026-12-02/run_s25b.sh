#!/bin/bash
# Session 25, call 2: attempt 55, mla_mid_q8s's one-term form with a fourth raw tile in Q's lo rows (FP8_Q=one) against
# three tiles (one3). Standalone (built with -DHELIX_SS_TRACE): whole / math alone / producer alone and both timelines;
# GPU tests of both forms against the oracle of the rounded queries and the error budget; JAX A/B with bf16 in the same
# runs, two alternating rounds. Only $OUT/s25b.log comes back.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s25b.log
nvidia-smi -L > $L
timeout 200 .carry/s25/standalone_trace s8one >> $L 2>&1
echo "standalone s8one rc $?" >> $L
for q in one one3; do
  HELIX_MLA_DECODE_FP8_Q=$q timeout 150 python3 -m pytest -m gpu -q -s tests/test_mla_decode_formats.py \
    -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" 2>&1 | grep -E "one-term|rel error|passed|failed|Error|assert" | cut -c1-300 >> $L
  echo "q_terms + budget FP8_Q=$q rc ${PIPESTATUS[0]}" >> $L
done
export AB_TMP=/tmp AB_TIMEOUT=150
A="--B 64 --L 65536 --hg 128x1,128x4,64x4,16x4 --iterations 20"
for r in 1 2; do
  ab_bench base_r$r $L $A --kv-dtypes bf16
  ab_bench one4_r$r $L $A --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one
  ab_bench one3_r$r $L $A --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one3
done
ab_bench b16 $L --B 16 --L 65536 --hg 128x1,128x4,16x4 --iterations 20 --kv-dtypes bf16
ab_bench b16one4 $L --B 16 --L 65536 --hg 128x1,128x4,16x4 --iterations 20 --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one
ab_bench b16one3 $L --B 16 --L 65536 --hg 128x1,128x4,16x4 --iterations 20 --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one3
timeout 240 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py -k "test_gpu_fp8_one_term_q or fp8_q or (fp8_e4m3 and ffi and (test_gpu_formats or deterministic or r2))" >> $L 2>&1
echo "pytest one-term wrapper + bad FP8_Q + default fp8 FFI cases rc $?" >> $L
tail -3 $L
