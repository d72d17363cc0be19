#!/bin/bash
# Session 24, call 1: (1) the GPU contract cases under HELIX_MLA_DECODE_LOAD=tma_multicast4 (new: TMA multicast over
# clusters of four row tiles, kLoad 7; three runs each, oracle + bitwise repeat); (2) JAX A/B of tma_multicast4 against
# auto (= tma_multicast, pairs) with the same library at G*H >= 256, alternating, three rounds; (3) the DSMEM exchange
# probe (.carry/dsmem_probe, session 23's, never run); (4) SM clock and power sampled while the ceilings and the bf16
# H=128 G=1 B=64 call run; (5) the nvfp4 FFI GPU cases on the staged producer with its single empty wait (review mend).
export PYTHONPATH=$PWD HELIX_JAX_FFI_LIB_DIR=$PWD/.carry/lib_s24a
. benchmarks/ab_bench.sh
L=$OUT/s24a.log
nvidia-smi -L > $L
timeout 150 python3 -m pytest -m gpu tests/test_mla_decode_contract.py -q -x -k "load_paths and tma_multicast4" >> $L 2>&1
echo "pytest contract tma_multicast4 rc $?" >> $L
export AB_TMP=/tmp AB_TIMEOUT=90
for r in 1 2 3; do
  ab_bench mc4_r$r $L --B 16,64 --L 65536 --hg 64x4,128x4 --kv-dtypes bf16 --iterations 20 -- HELIX_MLA_DECODE_LOAD=tma_multicast4
  ab_bench mc2_r$r $L --B 16,64 --L 65536 --hg 64x4,128x4 --kv-dtypes bf16 --iterations 20 -- HELIX_MLA_DECODE_LOAD=auto
done
timeout 60 .carry/dsmem_probe 20000 > $OUT/s24a_dsmem.log 2>&1; echo "dsmem probe rc $?" >> $L
cat $OUT/s24a_dsmem.log >> $L
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 > $OUT/s24a_smi.csv 2>&1 &
SMI=$!
timeout 120 python3 benchmarks/mla_decode.py --backends ffi --L 65536 --iterations 40 --B 64 --hg 128x1 --kv-dtypes bf16 \
  --name s24a_clk --out /tmp/s24a > /tmp/s24a_clk.log 2>&1
echo "== clocks bench rc $?" >> $L
grep -E "ceiling|copy|matmul|backend=" /tmp/s24a_clk.log | cut -c1-200 >> $L
kill $SMI
timeout 280 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -q \
  -k "nvfp4 and not pallas and not pipe_variant and not without_staging" >> $L 2>&1
echo "pytest nvfp4 ffi formats (staged producer, single wait) rc $?" >> $L
tail -3 $L
