#!/bin/bash
# Session 24, call 4: HEAD's library (helix_jax/_lib, built from 2fd2ae7's ffi/: the staged nvfp4 producer's single wait)
# against session 23's (.carry/lib_head2) on nvfp4 pages, two alternating rounds (the mend changed the default nvfp4
# kernels' SASS); then the GPU contract suite and the append kernel's GPU tests on HEAD's library.
export PYTHONPATH=$PWD
. benchmarks/ab_bench.sh
L=$OUT/s24d.log
nvidia-smi -L > $L
export AB_TMP=/tmp AB_TIMEOUT=90
A="--B 16,64 --L 65536 --hg 16x4,128x1 --kv-dtypes nvfp4 --iterations 20"
for r in 1 2; do
  ab_bench head_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/helix_jax/_lib
  ab_bench s23_r$r $L $A -- HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_head2
done
timeout 300 python3 -m pytest -m gpu tests/test_mla_decode_contract.py tests/test_append_kernel.py -q >> $L 2>&1
echo "pytest -m gpu contract + append (HEAD's library) rc $?" >> $L
tail -3 $L
