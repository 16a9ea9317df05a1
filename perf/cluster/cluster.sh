#!/usr/bin/env bash
# perf/cluster: Fig. 12 of BytePS (§7.1) on the emulated network. n workers
# (one network namespace each, pbox-bench over libpbox) and a box (pboxd on
# net_af_packet ports) with every link shaped by tbf: each worker at B, the
# box's ports at k·B/ports, so the box offers k·B. For every k in 0..n it
# measures the communication time of one allreduce of M bytes (fp32, mean of
# ITERS iterations after one warm-up, the slowest rank's mean), every sum
# verified, and compares in the same run with
#   t_opt = 2n(n-1)M / ((n²+kn-2k)·B)        (Theorem 1, the optimum)
#   pbox, layout = ps     (every chunk to the box: M·max(1, n/k)/B in theory)
#   pbox, layout = ssgpu  (the workers' SS_GPUs only: 2(n-1)M/(nB))
#   Gloo's ring all-reduce over TCP on the same hosts and links (2(n-1)M/(nB))
# The layouts ps and ssgpu and the ring do not depend on k the way the
# unified layout does: ssgpu and the ring are measured once (the box idle),
# ps at every k >= 1.
#
# Writes $OUT/cluster-nN.csv and cluster-nN.png (goodput per worker against
# k, with the optimal line), prints progress, and ends with
#   RESULT cluster n=N worst_ratio_to_topt=X ring_speedup_k1=Y det_cost_k2=Z
# (worst over k of measured/t_opt for the unified layout; ring time over pbox
# time at k = 1; the unified layout with [job] deterministic = on over it
# without, at k = 2). Needs root, hugepages and Gloo (libgloo-dev).
#
#   perf/cluster/cluster.sh [BUILD_DIR]   N (4), B Mb/s (200 for n=4, 100 for
#                                         n=8), SIZE (64M, 32M), ITERS (3),
#                                         OUT (BUILD_DIR/perf/cluster), KS (the
#                                         k to measure: 0..N), MODES (unified
#                                         ps ssgpu ring det), TUNING (more [tuning]
#                                         lines, ';'-separated), WORKER_PRIORITY
#                                         (the ranks' real-time priority: 10
#                                         at n = 4 and B <= 200, else 0 (none))
set -uo pipefail

N=${N:-4}
case $N in
4) B=${B:-200} SIZE=${SIZE:-64M} ports=2 ;;
8) B=${B:-100} SIZE=${SIZE:-32M} ports=4 ;;
*) B=${B:-100} SIZE=${SIZE:-32M} ports=4 ;;
esac
ITERS=${ITERS:-3}
KS=${KS:-$(seq -s ' ' 0 "$N")}
MODES=${MODES:-unified ps ssgpu ring det}
# The ranks' progress threads at real-time priority ([tuning] priority) at
# n = 4, as on hosts with cores to spare: here the ranks and the box share
# 2 cores with the kernel's memory monitor (kdamond, 5-20 ms of a core twice
# a second), and a rank kept off the CPU leaves its link idle for as long,
# which a layout that loads every link evenly never makes up (n = 4, k = 0:
# 1.03-1.07 of t_opt at the default priority, 1.014-1.016 at 10). At n = 8
# the default: 8 real-time ranks starve the box's own data cores on these 2
# cores (1.14-1.28 at k = 3 and 6, where the box carries most bytes).
# Nor above 200 Mb/s: at 1 Gb/s four real-time ranks keep the cores busy
# and starve the box (n = 4, k = 2: 2.58 of t_opt with it, 1.04-1.11
# without, 2026-11-30).
WORKER_PRIORITY=${WORKER_PRIORITY:-$((N <= 4 && B <= 200 ? 10 : 0))}
. "$(dirname "$0")/../../tests/net/lib.sh"

need_root cluster
bench="$build/bin/pbox-bench"
ring="$build/perf/ring_gloo"
[ -x "$ring" ] || { echo "cluster: no $ring: apt-get install libgloo-dev, then make"; exit 1; }
command -v gnuplot >/dev/null || echo "cluster: no gnuplot: the CSV only (apt-get install gnuplot-nox)"
wbw=$B
bytes=$(numfmt --from=iec "$SIZE")
out=${OUT:-$build/perf/cluster}
mkdir -p "$out"
csv="$out/cluster-n$N.csv"

# theory MODE K: seconds for one allreduce of M at (n, k) under that layout
theory() {
	awk -v mode="$1" -v k="$2" -v n="$N" -v m="$bytes" -v b="$B" 'BEGIN {
		t = m * 8 / (b * 1e6)                            # M/B
		if (mode == "unified" || mode == "det") t *= (k >= n ? 1 : 2 * n * (n - 1) / (n * n + k * n - 2 * k))
		else if (mode == "ps") t *= (k >= n ? 1 : n / k)
		else t *= 2 * (n - 1) / n                        # ring, ssgpu
		printf "%.6f", t }'
}


# record MODE K MS: a CSV row and a progress line
record() {
	local mode=$1 k=$2 ms=$3 th opt
	th=$(theory "$mode" "${k:-0}")
	opt=$(theory unified "${k:-0}")
	awk -v n="$N" -v k="$k" -v b="$B" -v m="$bytes" -v mode="$mode" -v ms="$ms" -v th="$th" \
		-v opt="$opt" 'BEGIN {
		printf "%d,%s,%d,%d,%s,%.1f,%.1f,%.1f,%.3f,%.4f,%.4f\n", n, k, b, m, mode, ms,
			th * 1e3, opt * 1e3, ms / (th * 1e3), m * 8 / (ms * 1e6), m * 8 / (th * 1e9) }' >>"$csv"
	awk -v n="$N" -v k="${k:-any}" -v mode="$mode" -v ms="$ms" -v th="$th" 'BEGIN {
		printf "cluster: n=%d k=%s %-8s %8.1f ms   theory %8.1f ms   ratio %.3f\n",
			n, k, mode, ms, th * 1e3, ms / (th * 1e3) }'
}

# pbox MODE K: every rank runs pbox-bench with [tuning] layout = MODE (det:
# the unified layout with [job] deterministic = on, every sum in rank order)
pbox() {
	local mode=$1 k=$2 name="pbox-$1-k$2" ms det=off
	# the previous run's job is gone from the box before this one registers
	[ "$k" -gt 0 ] && ! jobs_gone && echo "cluster: the box still holds a job before $name"
	local extra=()
	[ -n "${TUNING:-}" ] && IFS=';' read -ra extra <<<"$TUNING"
	[ "$mode" = det ] && det=on
	worker_cfgs $((k > 0)) "layout = ${mode/det/unified}" "priority = $WORKER_PRIORITY" "${extra[@]}"
	PBOX_JOB_DETERMINISTIC=$det bench_ran "$name" "pbox $mode at k=$k" --size "$SIZE" \
		--tensors 4 --iters "$ITERS" --sync --warmup 1 || return 1
	ms=$(slowest "$name")
	record "$mode" "$k" "$ms"
}

# gloo_ring: Gloo's ring on the same links (the box idle), every sum checked
gloo_ring() {
	local r rc=0 pids=() store="$log/gloo-store"
	rm -rf "$store" && mkdir -p "$store"
	for ((r = 0; r < N; r++)); do
		wns "$r" "$ring" --rank "$r" --size "$N" --iface eth0 --store "$store" \
			--bytes "$bytes" --iters "$ITERS" --warmup 1 >"$log/ring-w$r.log" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	if [ $rc -ne 0 ]; then
		cat "$log"/ring-w*.log | grep -v "^ring:" | sed 's/^/  /'
		bad "Gloo ring: a rank failed"
		return 1
	fi
	t_ring=$(slowest ring)
	record ring "" "$t_ring"
}

echo "cluster: n=$N workers at B=$B Mb/s, M=$SIZE fp32 ($bytes bytes), box of $ports ports at" \
	"k·B/$ports each, $ITERS iterations after 1 warm-up; logs in $log"
pbox_net_up "$tag" "$ports" "$N" || exit 1
echo "n,k,bandwidth_mbps,bytes,mode,time_ms,theory_ms,t_opt_ms,ratio_to_theory,goodput_gbps,theory_gbps" >"$csv"

# listed WORDS W: W is one of the space-separated WORDS
listed() { [[ " $1 " == *" $2 "* ]]; }
# wants MODE [K]: MODE is measured in this run (and K, when given)
wants() { listed "$MODES" "$1" && { [ $# -lt 2 ] || listed "$KS" "$2"; }; }

shape 0 || exit 1
wants ring && gloo_ring
wants unified 0 && pbox unified 0
for ((k = 1; k <= N; k++)); do
	listed "$KS" "$k" || continue
	shape "$k" || exit 1
	restart_box $((k * wbw / ports)) || exit 1
	wants unified && pbox unified "$k"
	wants ps && pbox ps "$k"
	[ "$k" = 1 ] && wants ssgpu && pbox ssgpu 1
	[ "$k" = 2 ] && wants det && pbox det 2
done

# Fig. 12: goodput per worker (M over the allreduce time) against k
if command -v gnuplot >/dev/null; then
	gnuplot <<-EOF
		set terminal pngcairo size 900,560 font "sans,11"
		set output "$out/cluster-n$N.png"
		set datafile separator ","
		set key top left
		set grid
		set title "pbox on the emulated network: n = $N workers at B = $B Mb/s, M = $SIZE fp32"
		set xlabel "k (box bandwidth / worker bandwidth)"
		set ylabel "goodput per worker (Gb/s): M / allreduce time"
		set xrange [-0.2:$N + 0.2]
		set yrange [0:*]
		set termoption noenhanced
		rows(m) = sprintf("< awk -F, '\$5 == \"%s\"' %s", m, "$csv")
		plot rows("unified") using 2:11 with lines lw 2 dt 2 lc rgb "black" title "optimal (Theorem 1)", \
		     rows("unified") using 2:10 with linespoints lw 2 pt 7 lc rgb "#d62728" title "pbox (unified layout)", \
		     rows("ps") using 2:10 with linespoints lw 2 pt 5 lc rgb "#1f77b4" title "pbox, PS only", \
		     rows("ssgpu") using (0):10:($N):(0) with vectors nohead lw 2 dt 4 lc rgb "#2ca02c" title "pbox, SS_GPU only (any k)", \
		     rows("ring") using (0):10:($N):(0) with vectors nohead lw 2 dt 3 lc rgb "#7f7f7f" title "Gloo ring all-reduce (any k)"
	EOF
	echo "cluster: wrote $csv and $out/cluster-n$N.png"
else
	echo "cluster: wrote $csv"
fi

# the summary: worst unified/t_opt, and where pbox stands against the ring
awk -F, -v n="$N" -v ring="${t_ring:-0}" '
	$5 == "det" { det[$2] = $6 }
	$5 == "unified" { uni[$2] = $6 }
	$5 == "unified" { r = $6 / $8; if (r > worst) { worst = r; wk = $2 }
		if ($2 >= 1 && ring > 0) { s = ring / $6; if (!seen || s < ms) { ms = s; mk = $2; seen = 1 }
			if ($2 == 1) k1 = s } }
	END {
		printf "cluster: worst measured/t_opt %.3f (at k=%s)\n", worst, wk
		if (ring > 0) printf "cluster: pbox ahead of the ring at every k >= 1: %s (least ring/pbox %.3f at k=%s)\n", (ms > 1 ? "yes" : "NO"), ms, mk
		dc = ("2" in det && uni["2"] > 0) ? sprintf("%.3f", det["2"] / uni["2"]) : "-"
		if (dc != "-") printf "cluster: [job] deterministic = on at k=2: %.1f ms, %s of the unified layout in arrival order\n", det["2"], dc
		printf "RESULT cluster n=%d worst_ratio_to_topt=%.3f ring_speedup_k1=%.3f det_cost_k2=%s\n", n, worst, k1, dc }' "$csv"
[ "$fail" -eq 0 ]
