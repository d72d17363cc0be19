#!/bin/bash
# Session 26, call 2. Call 1's smem form hung: the producer's setmaxnreg.dec to 64 gave back less than the consumers'
# .inc to 224 asked of the CTA's pool (P + 2 C must stay <= 3 x 168); now 56 / 224. Smoke test of the smem form
# (the one-term cases against the rounded-Q oracle, determinism, the error budget); only if it passes, fp8 one-term
# smem / smem + attempt 58 (.carry/s26/lib_em) / regs and bf16 in alternating rounds, then the smem one-term test, the
# regs-vs-smem agreement and the bad-value case.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s26b.log
nvidia-smi -L > $L
EM=$PWD/.carry/s26/lib_em
HELIX_MLA_DECODE_FP8_Q=one HELIX_MLA_DECODE_FP8_PV=smem timeout 75 python3 -m pytest -m gpu -q -s -x \
  tests/test_mla_decode_formats.py -k "test_gpu_fp8_q_terms or test_gpu_fp8_error_budget" > /tmp/t1.log 2>&1
rc=$?
echo "pytest smem smoke rc $rc" >> $L
grep -E "one-term|rel error|passed|failed|Error|error:|assert" /tmp/t1.log | head -30 >> $L
[ $rc -eq 0 ] || { tail -30 /tmp/t1.log >> $L; exit 1; }
export AB_TMP=/tmp AB_TIMEOUT=60
A="--B 64 --L 65536 --hg 128x1,16x4,64x4 --iterations 20"
O1="HELIX_MLA_DECODE_FP8_Q=one"
for r in 1 2; do
  ab_bench smem_r$r $L $A --kv-dtypes fp8_e4m3 -- $O1 HELIX_MLA_DECODE_FP8_PV=smem
  ab_bench smem_em_r$r $L $A --kv-dtypes fp8_e4m3 -- $O1 HELIX_MLA_DECODE_FP8_PV=smem HELIX_JAX_FFI_LIB_DIR=$EM
  ab_bench regs_r$r $L $A --kv-dtypes fp8_e4m3 -- $O1 HELIX_MLA_DECODE_FP8_PV=regs
  ab_bench bf16_r$r $L $A --kv-dtypes bf16
done
timeout 200 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py \
  -k "test_gpu_fp8_one_term_q and smem or test_gpu_fp8_pv_forms_agree or fp8_pv" >> $L 2>&1
echo "pytest one-term smem + forms agree + bad FP8_PV rc $?" >> $L
tail -3 $L
