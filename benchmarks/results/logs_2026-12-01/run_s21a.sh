#!/bin/bash
# Session 21, call 1: the pending bad-variable GPU test; Nsight Compute on the bf16 seesaw (H=128 G=1, H=16 G=4,
# H=64 G=4; B=64 L=64K) and the nvfp4 decoding seesaw (H=16 G=4): pipe and shared-memory utilisation.
export PYTHONPATH=$PWD
nvidia-smi -L
echo "== bad-variable test"
timeout 200 python3 -m pytest -m gpu tests/test_mla_decode_formats.py -k bad_kernel_env -q > $OUT/s21a_badenv.log 2>&1; echo rc $?
tail -3 $OUT/s21a_badenv.log
prof() {  # name kv H G
  timeout 170 ncu --kernel-name regex:mla_seesaw --launch-skip 1 --launch-count 1 --set full \
    --metrics regex:sm__pipe_.*_cycles_active.avg.pct_of_peak_sustained_active,regex:sm__inst_executed_pipe_.*.avg.pct_of_peak_sustained_active \
    -o $OUT/s21a_$1 python3 benchmarks/mla_decode_profile.py --kv-dtype $2 --B 64 --L 65536 --H $3 --G $4 --calls 3 > $OUT/s21a_$1_ncu.log 2>&1
  echo "ncu $1 rc=$?"
  ncu -i $OUT/s21a_$1.ncu-rep --page details > $OUT/s21a_$1_details.log 2>&1
  ncu -i $OUT/s21a_$1.ncu-rep --page raw --csv > $OUT/s21a_$1_raw.csv 2>&1
  python3 - $OUT/s21a_$1_raw.csv <<'PY'
import csv, re, sys
rows = list(csv.reader(open(sys.argv[1])))
if len(rows) < 3: print("no raw rows"); sys.exit()
hdr, units, val = rows[0], rows[1], rows[-1]
pats = [r"^gpu__time_duration.sum$", r"^sm__cycles_elapsed.avg.per_second$", r"^dram__throughput.avg.pct_of_peak_sustained_elapsed$",
        r"^sm__pipe_.*_cycles_active.avg.pct_of_peak_sustained_active$", r"^sm__inst_executed_pipe_.*pct_of_peak_sustained_active$",
        r"^l1tex__data_pipe_lsu_wavefronts_mem_shared.*(sum|pct.*)$", r"^l1tex__data_bank_conflicts_pipe_lsu_mem_shared.*sum$",
        r"^l1tex__throughput.avg.pct_of_peak_sustained_active$", r"^smsp__issue_active.avg.pct_of_peak_sustained_active$",
        r"^sm__throughput.avg.pct_of_peak_sustained_elapsed$", r"^smsp__average_warps_issue_stalled_.*_per_issue_active.ratio$",
        r"^l1tex__m_.*bytes.*sum$", r"^smsp__warps_eligible.avg.per_cycle_active$", r"^lts__t_bytes.sum.per_second$"]
for h, u, v in zip(hdr, units, val):
    if any(re.search(p, h) for p in pats):
        try: x = float(v.replace(",", ""))
        except ValueError: continue
        if "stalled" in h and x < 0.05: continue
        if "pipe" in h and "pct" in h and x < 0.5: continue
        print(f"{x:14.4g} {u:>10} {h}")
PY
  rm -f $OUT/s21a_$1.ncu-rep
}
echo "== ncu"
prof bf16_h128 bf16 128 1
prof bf16_h16g4 bf16 16 4
prof nv4_h16g4 nvfp4 16 4
prof bf16_h64g4 bf16 64 4
cd $OUT && tar czf s21a_logs.tgz s21a_* --remove-files 2>/dev/null; ls $OUT
