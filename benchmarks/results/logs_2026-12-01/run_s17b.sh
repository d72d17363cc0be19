#!/bin/bash
# Session 17, call 2: localize the fp8 race (m8rep traces differing runs to segments / CTAs).
export PYTHONPATH=$PWD
S=.carry/mla_standalone
m() { local name=$1; shift; echo "== $name: $*"; timeout 100 env "$@" > $OUT/s17b_$name.log 2>&1; echo rc $?; grep -E "segment|m8rep|FAIL" $OUT/s17b_$name.log | head -40; }
m q8s_ws $S m8rep 16384 2000 ws
m q8s_none $S m8rep 16384 2000 none
m q8s_ws_pdl0 HELIX_MLA_DECODE_PDL=0 $S m8rep 16384 2000 ws
m q8s_cpasync $S m8rep 16512 1000 ws
m q8s_f32 $S m8rep 16896 1000 ws
m lockstep $S m8rep 0 1000 ws
R="timeout 120 python3 benchmarks/mla_decode_repeat.py --suite formats --fmt fp8_e4m3 --case 0 --runs 200 --seconds 80"
j() { local name=$1; shift; echo "== $name"; env "$@" $R > $OUT/s17b_$name.log 2>&1; echo rc $?; grep -E "differs|FAILED|runs,|Error|error" $OUT/s17b_$name.log | cut -c1-300 | head -12; }
j jax_pdl0 HELIX_MLA_DECODE_PDL=0
j jax_default
