#!/bin/bash
# Session 25, call 1: attempt 54, mla_mid_q8s with one E4M3 term of Q (HELIX_MLA_DECODE_FP8_Q=one: S on the hi term
# alone, half of S's tensor work). Correctness against the oracle of the rounded queries (and the default against the
# plain oracle), then fp8 under {two, one} x {auto, fast} against bf16 in the same run, two alternating rounds.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s25a.log
nvidia-smi -L > $L
for q in two one; do
  HELIX_MLA_DECODE_FP8_Q=$q timeout 200 python3 -m pytest -m gpu -q -s tests/test_mla_decode_formats.py -k test_gpu_fp8_q_terms 2>&1 \
    | grep -E "one-term|passed|failed|Error|error" >> $L
  echo "q_terms FP8_Q=$q rc ${PIPESTATUS[0]}" >> $L
done
HELIX_MLA_DECODE_FP8_Q=one HELIX_MLA_DECODE_FP8_S=fast timeout 200 python3 -m pytest -m gpu -q -s tests/test_mla_decode_formats.py \
  -k test_gpu_fp8_q_terms 2>&1 | grep -E "one-term|passed|failed|Error|error" >> $L
echo "q_terms FP8_Q=one FP8_S=fast rc ${PIPESTATUS[0]}" >> $L
export AB_TMP=/tmp AB_TIMEOUT=150
A="--B 64 --L 65536 --hg 128x1,128x4,64x4,16x4 --iterations 20"
for r in 1 2; do
  ab_bench base_r$r $L $A --kv-dtypes bf16,fp8_e4m3
  ab_bench fast_r$r $L $A --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_S=fast
  ab_bench one_r$r $L $A --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one
  ab_bench onefast_r$r $L $A --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one HELIX_MLA_DECODE_FP8_S=fast
done
ab_bench b16 $L --B 16 --L 65536 --hg 128x4 --iterations 20 --kv-dtypes bf16,fp8_e4m3
ab_bench b16one $L --B 16 --L 65536 --hg 128x4 --iterations 20 --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one
ab_bench b16onefast $L --B 16 --L 65536 --hg 128x4 --iterations 20 --kv-dtypes fp8_e4m3 -- HELIX_MLA_DECODE_FP8_Q=one HELIX_MLA_DECODE_FP8_S=fast
tail -5 $L
