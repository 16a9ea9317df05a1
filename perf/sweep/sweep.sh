#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# make perf-sweep: all_reduce latency from 1 KiB to 16 MiB through
# torch.distributed (perf/sweep/sweep.py), N ranks under torchrun on
# loopback, no box: the pbox backend (every rank's SS_GPU) against Gloo's,
# one after the other in the same run. Writes sweep.csv (size, each
# backend's median and p90, the ratio of the medians, and the same for calls
# back to back) into OUT and ends with
#   RESULT sweep n=N worst_pbox_vs_gloo=X worst_at=SIZE pbox_vs_gloo_1k=Y
#     pbox_vs_gloo_16m=Z worst_b2b_pbox_vs_gloo=W worst_b2b_at=SIZE
#     cpu_vs_gloo_1k=C cpu_1k_us=U cpu_vs_gloo_16m=D cpu_ns_per_byte_16m=P
#     gloo_cpu_ns_per_byte_16m=G first_1k_ms=F first_vs_gloo_1k=R
#     worst_first_vs_gloo=S
# (ratios of median times, pbox over Gloo: below 1, pbox is faster; cpu_*:
# the CPU a rank's threads ran per call back to back, pbox's over Gloo's,
# pbox's at 1 KiB in us, and each one's at 16 MiB per byte of the tensor;
# first_*: each size's first call, which to pbox is a new tensor, agreed
# by the ranks before its data moves: pbox's at 1 KiB in ms, over Gloo's
# first call there, and the worst such ratio of any size).
#
#   perf/sweep/sweep.sh [BUILD_DIR]     N (4), ITERS (30), OUT (BUILD_DIR/perf/sweep)
set -uo pipefail
build=${1:-build}
N=${N:-4}
ITERS=${ITERS:-30}
out=${OUT:-$build/perf/sweep}
py=${PY:-/usr/bin/python3}
mkdir -p "$out"
export PYTHONPATH=$PWD/$build/python
run() { # BACKEND PORT
	timeout 900 $py -m torch.distributed.run --redirects 2 --tee 2 --nproc_per_node "$N" \
		--master_addr 127.0.0.1 --master_port "$2" perf/sweep/sweep.py "$1" "$out/$1.csv" \
		"$ITERS" >"$out/$1.log" 2>&1 || {
		grep -v '^\[default[0-9]\]:\s*$' "$out/$1.log" | tail -8 | sed 's/^/  /'
		echo "sweep: $1 failed (log: $out/$1.log)"
		exit 1
	}
	grep -o 'sweep: .*' "$out/$1.log" | grep -v '^sweep: rank'
}
echo "sweep: all_reduce of fp32, $N ranks on loopback (no box), $ITERS timed calls per size"
run gloo 29640
run pbox 29641
join -t, <(tail -n +2 "$out/pbox.csv" | sort -t, -k1,1) <(tail -n +2 "$out/gloo.csv" | sort -t, -k1,1) |
	sort -t, -k1,1n |
	awk -F, -v n="$N" 'BEGIN { print "size_bytes,pbox_median_ms,pbox_p90_ms,gloo_median_ms,gloo_p90_ms,pbox_vs_gloo,pbox_b2b_median_ms,gloo_b2b_median_ms,pbox_vs_gloo_b2b,pbox_cpu_us,pbox_caller_us,pbox_engine_us,gloo_cpu_us,gloo_caller_us,pbox_cpu_vs_gloo,pbox_first_ms,gloo_first_ms,pbox_vs_gloo_first" >"/dev/stderr" }
		# pbox: $2-$10 (median, p90, min, b2b median, b2b p90, CPU, caller, engine, the first call); Gloo: $11-$19
		{ r = $2 / $11; rb = $5 / $14; rc = $16 > 0 ? $7 / $16 : 0; rf = $10 / $19
		  printf "%s,%s,%s,%s,%s,%.3f,%s,%s,%.3f,%s,%s,%s,%s,%s,%.3f,%s,%s,%.3f\n", $1, $2, $3, $11, $12, r, $5, $14, rb, $7, $8, $9, $16, $17, rc, $10, $19, rf > "/dev/stderr"
		  printf "sweep: %9d bytes: pbox %8.3f ms (p90 %8.3f), Gloo %8.3f ms (p90 %8.3f): %.3f; back to back %.3f against %.3f ms: %.3f; CPU a call %.1f against %.1f us: %.3f (pbox: the caller %.1f, the engine %.1f); the first call (a new tensor) %.3f against %.3f ms: %.3f\n", $1, $2, $3, $11, $12, r, $5, $14, rb, $7, $16, rc, $8, $9, $10, $19, rf
		  if (r > worst) { worst = r; at = $1 } if (rb > worstb) { worstb = rb; atb = $1 }
		  if (rf > worstf) worstf = rf; if ($1 == 1024) { k1 = r; c1 = rc; cu1 = $7; f1 = $10; rf1 = rf } if ($1 == 16777216) { m16 = r; c16 = rc; pb16 = $7 * 1e3 / $1; gb16 = $16 * 1e3 / $1 } }
		END { printf "RESULT sweep n=%d worst_pbox_vs_gloo=%.3f worst_at=%d pbox_vs_gloo_1k=%.3f pbox_vs_gloo_16m=%.3f worst_b2b_pbox_vs_gloo=%.3f worst_b2b_at=%d cpu_vs_gloo_1k=%.3f cpu_1k_us=%.1f cpu_vs_gloo_16m=%.3f cpu_ns_per_byte_16m=%.3f gloo_cpu_ns_per_byte_16m=%.3f first_1k_ms=%.3f first_vs_gloo_1k=%.3f worst_first_vs_gloo=%.3f\n", n, worst, at, k1, m16, worstb, atb, c1, cu1, c16, pb16, gb16, f1, rf1, worstf }' \
	2>"$out/sweep.csv"
