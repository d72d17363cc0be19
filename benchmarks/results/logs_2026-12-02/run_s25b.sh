#!/bin/bash
# Session 25, call 2: where mla_mid_q8s's time goes with one E4M3 term of Q (standalone driver built with
# -DHELIX_SS_TRACE: whole / math alone / producer alone against two terms, two rounds, and the one-term timeline at
# H=16 G=4 and H=128 G=1, B=64); then the one-term GPU test (three S accumulations) and the bad-value test of FP8_Q.
export PYTHONPATH=$PWD
L=$OUT/s25b.log
nvidia-smi -L > $L
timeout 240 .carry/s25/standalone_trace s8one >> $L 2>&1
echo "standalone s8one rc $?" >> $L
timeout 300 python3 -m pytest -m gpu -q tests/test_mla_decode_formats.py -k "test_gpu_fp8_one_term_q or fp8_q" >> $L 2>&1
echo "pytest one-term + bad FP8_Q rc $?" >> $L
tail -3 $L
