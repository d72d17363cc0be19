#!/bin/bash
# Session 17, call 3: the proxy-fence fix (generic V^T loads -> TMA refill) against the rerun checks.
export PYTHONPATH=$PWD
S=.carry/mla_standalone
m() { local name=$1; shift; echo "== $name: $*"; timeout 100 env "$@" > $OUT/s17c_$name.log 2>&1; echo rc $?; grep -E "segment|m8rep|FAIL" $OUT/s17c_$name.log | head -12; }
m q8s_ws $S m8rep 16384 4000 ws
m q8s_none $S m8rep 16384 2000 none
m q8s_f32 $S m8rep 16896 2000 ws
m lockstep $S m8rep 0 1000 ws
j() { local name=$1; shift; echo "== $name"; timeout 90 env "$@" > $OUT/s17c_$name.log 2>&1; echo rc $?; grep -E "differs|FAILED|runs,|Error|error" $OUT/s17c_$name.log | cut -c1-300 | head -8; }
R="python3 benchmarks/mla_decode_repeat.py --suite formats --case 3 --runs 150 --seconds 35"
j small8_before HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_before $R --fmt fp8_e4m3
j small8_after $R --fmt fp8_e4m3
j small4_before HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_before $R --fmt nvfp4
j small4_after $R --fmt nvfp4
j mid8_after python3 benchmarks/mla_decode_repeat.py --suite formats --case 0 --runs 200 --seconds 60 --fmt fp8_e4m3
echo "== pytest determinism"; timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_mla_decode_formats.py -k deterministic > $OUT/s17c_pytest.log 2>&1; echo rc $?; tail -5 $OUT/s17c_pytest.log | cut -c1-300
