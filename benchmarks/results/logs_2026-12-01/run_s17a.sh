#!/bin/bash
# Session 17, call 1: the open fp8 race (benchmarks/NOTES.md, session 16). Key lines to stdout, full logs to $OUT.
export PYTHONPATH=$PWD
nvidia-smi -L
S=.carry/mla_standalone
echo "== m8rep 16384 100 (workspace poisoned)"; timeout 120 $S m8rep 16384 100 > $OUT/s17a_m8rep_16384.log 2>&1; echo rc $?; tail -4 $OUT/s17a_m8rep_16384.log
R="timeout 150 python3 benchmarks/mla_decode_repeat.py --suite formats --fmt fp8_e4m3 --case 0 --runs 40 --seconds 45"
run() { local name=$1; shift; echo "== $name"; env "$@" $R > $OUT/s17a_$name.log 2>&1; echo rc $?; grep -E "differs|FAILED|runs,|Error|error" $OUT/s17a_$name.log | cut -c1-400 | head -12; }
run default
run pdl0 HELIX_MLA_DECODE_PDL=0
run lockstep HELIX_MLA_DECODE_MID8=lockstep
R="$R --seed-shift 1"; run seed1
