#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# make perf-sweep-cluster: the all_reduce sweep of perf/sweep/sweep.py (1 KiB
# to 16 MiB, fp32, median and p90 of ITERS calls per size, every sum
# checked) on the emulated cluster: N = 4 workers (one network namespace and
# one torchrun each) at B Mb/s, a box of 2 ports at k = K, every link shaped
# (tests/net/lib.sh's shape). Three runs, one after the other, on the same
# links:
#   gloo   Gloo's all_reduce (its ring; the box idle)
#   nobox  the pbox backend, the workers' SS_GPUs alone (k = 0)
#   box    the pbox backend through pboxd (k = K)
# and one round trip to the box: ICMP echo from worker 0 to the box's port 0
# (pboxd answers it from its polling core), the median of RTT_PINGS.
# Writes OUT/sweep-cluster.csv (size, each run's median and p90 after a
# barrier and back to back, pbox's medians over Gloo's) and ends with
#   RESULT sweep-cluster n=N b=B k=K worst_box_vs_gloo=X worst_box_at=SIZE
#     worst_nobox_vs_gloo=Y worst_nobox_at=SIZE worst_b2b_box_vs_gloo=X'
#     worst_b2b_box_at=SIZE worst_b2b_nobox_vs_gloo=Y' worst_b2b_nobox_at=SIZE
#     box_1k_vs_rtt=Z box_1k_min_vs_rtt=W box_1k_b2b_vs_rtt=V rtt_ms=R
#     box_1k_b2b_vs_warm_rtt=V' rtt_warm_ms=R'
#     box_cpu_vs_gloo_16m=C box_cpu_ns_per_byte_16m=P gloo_cpu_ns_per_byte_16m=G
#     box_first_1k_ms=F box_first_vs_gloo_1k=Q worst_box_first_vs_gloo=S
# (ratios of median times, pbox over Gloo: below 1, pbox is faster;
# box_1k_vs_rtt: the 1 KiB all_reduce through the box, its median over one
# round trip to the box; box_1k_min_vs_rtt, its fastest call's: the
# median holds the ranks' skew leaving sweep.py's barrier;
# box_1k_b2b_vs_rtt, the median of calls back to back, which has none;
# box_1k_b2b_vs_warm_rtt, that over the round trip to the box pinged back
# to back (rtt_warm_ms: its cores awake, as calls back to back keep them);
# *_cpu_*: the CPU a rank's threads ran per call back to back at 16 MiB,
# through the box over Gloo's, and each one's per byte of the tensor;
# box_first_*: each size's first call through the box, which to pbox is a
# new tensor (agreed by the ranks, and the box's job grown, before its
# data moves): at 1 KiB in ms and over Gloo's first call, and the worst
# ratio of any size). Needs root and hugepages (the box), torch.
#
#   perf/sweep/cluster.sh [BUILD_DIR]   B (1000), K (2), ITERS (30),
#                                       RTT_PINGS (50), OUT (BUILD_DIR/perf/sweep),
#                                       PACE_BURST (pbox's [tuning] pace_burst:
#                                       the links' bucket, 128K; lib.sh's shape)
set -uo pipefail

N=4
B=${B:-1000}
K=${K:-2}
ports=2
ITERS=${ITERS:-30}
RTT_PINGS=${RTT_PINGS:-50}
. "$(dirname "$0")/../../tests/net/lib.sh"
py=${PY:-/usr/bin/python3}
harness sweep
csv="$out/sweep-cluster.csv"

# sweep RUN PORT: sweep.py on every rank; its rows (rank 0's) in $log/RUN.csv
sweep() {
	local backend=pbox
	[ "$1" = gloo ] && backend=gloo
	if ! torch_ranks "$1" "sweep-$1" "$2" 900 "$src/perf/sweep/sweep.py" "$backend" \
		"$log/$1.csv" "$ITERS"; then
		bad "the sweep's $1 run"
		return 1
	fi
	grep -oh "sweep: .*" "$log/sweep-$1-h0.log" | sed "s/^sweep: $backend/sweep: $1/"
}

echo "sweep-cluster: n=$N workers at B=$B Mb/s, a box of $ports ports at k=$K; all_reduce of" \
	"fp32 from 1 KiB to 16 MiB, $ITERS timed calls per size; logs in $log"
pbox_net_up "$tag" "$ports" "$N" || exit 1
shape "$K" || exit 1
restart_box $((K * wbw / ports)) || exit 1
# rtt_median PING_ARGS...: the median round trip of ICMP echo from worker 0
# to the box's port 0, in ms
rtt_median() {
	wns 0 ping -n -c "$RTT_PINGS" -W 1 "$@" 198.18.1.1 2>/dev/null |
		sed -n 's/.* time=\([0-9.]*\) ms/\1/p' | sort -g |
		awk '{ v[NR] = $1 } END { if (NR) printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# 20 ms apart, the box's cores napping between them (adaptive polling), and
# back to back (-A: each as soon as the last is answered), the box awake
rtt=$(rtt_median -i 0.02)
rtt_warm=$(rtt_median -A)
if [ -z "$rtt" ] || [ -z "$rtt_warm" ]; then
	bad "the box answers ICMP echo on its port 0 (198.18.1.1)"
	rtt=0 rtt_warm=0
else
	echo "sweep-cluster: one round trip to the box (ICMP echo, median of $RTT_PINGS): $rtt ms" \
		"20 ms apart, $rtt_warm ms back to back"
fi
# Gloo and the SS_GPUs alone leave the box idle: PBOX_BOX only for "box"
# (torch_ranks sets it for any run not named gloo while boxaddr is set)
sweep gloo 29750 || exit 1
saved=$boxaddr
boxaddr=
sweep nobox 29751 || exit 1
boxaddr=$saved
sweep box 29752 || exit 1
jobs_gone || bad "the box still holds a job after the sweep"

# one row per size: size, then gloo's, nobox's and box's median, p90,
# minimum, back-to-back median and p90, and CPU a call (a rank's: every
# thread's, the caller's, libpbox's engine's), then pbox's medians over
# Gloo's (each way) and its CPU over Gloo's
join -t, <(tail -n +2 "$log/gloo.csv" | sort -t, -k1,1) <(tail -n +2 "$log/nobox.csv" | sort -t, -k1,1) |
	join -t, - <(tail -n +2 "$log/box.csv" | sort -t, -k1,1) | sort -t, -k1,1n |
	awk -F, -v n="$N" -v b="$B" -v k="$K" -v rtt="$rtt" -v rttw="$rtt_warm" -v csv="$csv" '
	BEGIN { h = "size_bytes"
		split("gloo nobox box", run, " ")
		split("median_ms p90_ms min_ms b2b_median_ms b2b_p90_ms cpu_us caller_us engine_us first_ms", col, " ")
		for (i = 1; i <= 3; i++) for (j = 1; j <= 9; j++) h = h "," run[i] "_" col[j]
		print h ",nobox_vs_gloo,box_vs_gloo,nobox_vs_gloo_b2b,box_vs_gloo_b2b,nobox_cpu_vs_gloo,box_cpu_vs_gloo,box_vs_gloo_first" >csv }
	# gloo: $2-$10, nobox: $11-$19, box: $20-$28 (median, p90, min, b2b median, b2b p90, CPU, caller, engine, the first call)
	{ rn = $11 / $2; rb = $20 / $2; rnb = $14 / $5; rbb = $23 / $5
	  cn = $7 > 0 ? $16 / $7 : 0; cb = $7 > 0 ? $25 / $7 : 0; rf = $28 / $10
	  printf "%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", $0, rn, rb, rnb, rbb, cn, cb, rf >csv
	  printf "sweep-cluster: %9d bytes: Gloo %8.3f ms, pbox alone %8.3f ms (%.3f), through the box %8.3f ms (%.3f); back to back: Gloo %8.3f ms, pbox alone %.3f, through the box %.3f; CPU a call: Gloo %.1f us, pbox alone %.3f, through the box %.3f; the first call (a new tensor): Gloo %.3f ms, pbox alone %.3f, through the box %.3f ms (%.3f)\n", $1, $2, $11, rn, $20, rb, $5, rnb, rbb, $7, cn, cb, $10, $19, $28, rf
	  if (rb > wb) { wb = rb; wba = $1 } if (rn > wn) { wn = rn; wna = $1 }
	  if (rbb > wbb) { wbb = rbb; wbba = $1 } if (rnb > wnb) { wnb = rnb; wnba = $1 }
	  if (rf > wf) wf = rf; if ($1 == 1024) { k1 = $20; k1min = $22; k1b = $23; f1 = $28; rf1 = rf }
	  if ($1 == 16777216) { c16 = cb; pb16 = $25 * 1e3 / $1; gb16 = $7 * 1e3 / $1 } }
	END { printf "RESULT sweep-cluster n=%d b=%d k=%d worst_box_vs_gloo=%.3f worst_box_at=%d worst_nobox_vs_gloo=%.3f worst_nobox_at=%d worst_b2b_box_vs_gloo=%.3f worst_b2b_box_at=%d worst_b2b_nobox_vs_gloo=%.3f worst_b2b_nobox_at=%d box_1k_vs_rtt=%.3f box_1k_min_vs_rtt=%.3f box_1k_b2b_vs_rtt=%.3f rtt_ms=%.3f box_1k_b2b_vs_warm_rtt=%.3f rtt_warm_ms=%.3f box_cpu_vs_gloo_16m=%.3f box_cpu_ns_per_byte_16m=%.3f gloo_cpu_ns_per_byte_16m=%.3f box_first_1k_ms=%.3f box_first_vs_gloo_1k=%.3f worst_box_first_vs_gloo=%.3f\n",
		n, b, k, wb, wba, wn, wna, wbb, wbba, wnb, wnba, (rtt > 0 ? k1 / rtt : 0), (rtt > 0 ? k1min / rtt : 0), (rtt > 0 ? k1b / rtt : 0), rtt, (rttw > 0 ? k1b / rttw : 0), rttw, c16, pb16, gb16, f1, rf1, wf }'
echo "sweep-cluster: wrote $csv"
[ "$fail" -eq 0 ]
