#!/bin/bash
# Prepared in session 19 (no device lent), run in session 20 on branch wip/nv4-l2-f16; call 3 of 3: the contract tests, then the env-selected variants' GPU tests
# (each in a pytest subprocess with its variable set):
#  - the fp8 decoding seesaw through the format / R2 / determinism / f16-query cases (HELIX_MLA_DECODE_MID8=decode)
#  - the nvfp4 decoding seesaw with f16 math for bf16 queries (HELIX_MLA_DECODE_NV4_MATH=f16)
export PYTHONPATH=$PWD
nvidia-smi -L
echo "== fp8 decode variant, nvfp4 f16 math variant"
timeout 330 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k "fp8_decode_variant or nvfp4_f16_math_variant or bad_fp8_env" -q > $OUT/s20c_variants.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s20c_variants.log | cut -c1-300 | tail -12
echo "== contract"
timeout 150 python3 -m pytest -m gpu tests/test_mla_decode_contract.py -q > $OUT/s20c_contract.log 2>&1; echo rc $?
grep -E "passed|failed|Error|assert" $OUT/s20c_contract.log | cut -c1-300 | tail -8
cd $OUT && tar czf s20c_logs.tgz s20c_* --remove-files 2>/dev/null; ls $OUT
