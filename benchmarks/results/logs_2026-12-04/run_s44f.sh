#!/bin/bash
# Session 44, call 6, carry ["helix_jax/_lib"]: call 5's compute-sanitizer step again with the kernel filter spelled as
# session 43's (`--kernel-name kns=...`; call 5's `regex:` form made compute-sanitizer print its usage).
export PYTHONPATH=$PWD
L=$OUT/s44f.log
nvidia-smi -L > $L
for tool in memcheck synccheck racecheck; do
  envs="XLA_PYTHON_CLIENT_ALLOCATOR=platform"
  [ $tool = racecheck ] && envs="$envs HELIX_MLA_DECODE_LOAD=tma_evict_first"
  env $envs timeout 170 compute-sanitizer --tool $tool --kernel-name kns=mla_seesaw python3 benchmarks/mla_decode_sanitize.py > /tmp/cs_$tool.log 2>&1
  echo "== compute-sanitizer $tool ($envs, --kernel-name kns=mla_seesaw) rc $?" >> $L
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|Invalid|rror|sanitize case" /tmp/cs_$tool.log | head -12 >> $L
done
echo "== $(date +%T) end" >> $L
sed -i "s#$PWD/#\$PWD/#g" $L
cat $L
