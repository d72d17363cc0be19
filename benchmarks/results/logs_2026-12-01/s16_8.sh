#!/usr/bin/env bash
# session 16, call 8: determinism of mla_mid_q8s on the ring-wrapping case (driver mode `m8rep`: 30 reruns compared
# bitwise with the first), HEAD's order (the library's) for TMA, cp.async and f32 S tiles, and attempt 35's early order
# (reverted; built from HEAD plus that change) as the positive control.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
for v in 16384 16512 16896 0; do timeout 60 .carry/mla_standalone m8rep $v 30 2>&1 | grep "^m8rep"; done
timeout 60 .carry/mla_standalone_early m8rep 16384 30 2>&1 | grep "^m8rep" | sed 's/^/early order: /'
