#!/usr/bin/env bash
# perf/loss: what loss costs. n = 4 workers (pbox-bench over libpbox) at
# B = 200 Mb/s and a box of 2 ports at k = 2 on the emulated network, every
# link shaped by tbf and lossy both ways: the workers' links and the box's
# own ports, its sends included (its af_packet ports run with
# qdisc_bypass=0, so its frames pass its tbf and the loss program; the
# harness checks that they did). For each layout (unified, ps) and each loss
# rate it measures the time of one allreduce of SIZE (fp32, 8 tensors, the
# slowest rank's mean over ITERS iterations after a warm-up), every sum
# verified, against the same run's clean time, with what recovery cost:
#   lost        datagrams the loss programs dropped (their clsact counters)
#   resent      pushes sent again (the workers' counters)
#   needless    resent pushes an SS already had or had summed (the SSs' own
#               counters: the box's and every SS_GPU's)
#   probes      timeouts that asked an SS instead of resending
#   nacks       NACKs the SSs sent (a probed round waiting for that rank)
# Writes $OUT/loss.csv and loss.png and ends with
#   RESULT loss r0.1=X r1=Y r5=Z
# (the unified layout's time at 0.1%, 1% and 5% over its clean time).
# Needs root and hugepages.
#
#   perf/loss/loss.sh [BUILD_DIR]     SIZE (16M), ITERS (3), LOSSES ("0 0.1 1 5"),
#                                     LAYOUTS ("unified ps"), OUT (BUILD/perf/loss)
set -uo pipefail

N=4
B=200
ports=2
SIZE=${SIZE:-16M}
ITERS=${ITERS:-3}
LOSSES=${LOSSES:-0 0.1 1 5}
LAYOUTS=${LAYOUTS:-unified ps}
. "$(dirname "$0")/../../tests/net/lib.sh"

harness loss
hosts="w0 w1 w2 w3 box-p0 box-p1"

# impair_all PERCENT: that loss on every link, both ways
impair_all() {
	for h in $hosts; do pbox_net_impair "$tag" "$h" "$1" 0 || return 1; done
}

# box_tbf_bytes: bytes the tbf on the box's own ports has sent (its sends)
box_tbf_bytes() {
	local p s=0
	for ((p = 0; p < ports; p++)); do
		s=$((s + $(ip netns exec "$box_ns" tc -s qdisc show dev "pbox-p$p" |
			awk '/^qdisc tbf/ { getline; print $2; exit }')))
	done
	echo $s
}

# run LAYOUT LOSS: one measurement, one CSV row
run() {
	local layout=$1 loss=$2 name="$1-$2" ms d0 d1 t0 t1
	impair_all "$loss" || { bad "loss $loss on every link"; return 1; }
	restart_box $((2 * wbw / ports)) || return 1
	worker_cfgs 1 "layout = $layout"
	d0=$(pbox_net_lost "$tag" $hosts) t0=$(box_tbf_bytes)
	bench_ran "$name" "$layout at $loss% loss" --size "$SIZE" --tensors 8 --iters "$ITERS" ||
		return 1
	d1=$(pbox_net_lost "$tag" $hosts) t1=$(box_tbf_bytes)
	ms=$(slowest "$name")
	local resent probes needless nacks
	resent=$(bench_sum "$name" retransmits\;)
	probes=$(bench_sum "$name" probes,)
	# the box was restarted for this run: its counters are this run's
	needless=$(($(bench_sum "$name" needless) + $(box_metric pbox_core_needless_total)))
	nacks=$(($(bench_sum "$name" sent) + $(box_metric pbox_core_nacks_sent_total)))
	echo "$layout,$loss,$ms,$((d1 - d0)),$resent,$needless,$probes,$nacks,$((t1 - t0))" >>"$csv"
	# the harness's own check: the box's sends passed its shaper (at least
	# its Theorem 1 share of the bytes, k = 2: 0.6 of M to each of n workers)
	if [ "$layout" = unified ] && [ "$loss" = 0 ]; then
		if awk -v b=$((t1 - t0)) -v m="$(numfmt --from=iec "$SIZE")" -v it=$((ITERS + 1)) \
			'BEGIN { exit !(b >= 0.98 * it * m * 4 * 0.6) }'; then
			ok "the box's sends passed the tbf on its own ports ($((t1 - t0)) bytes)"
		else
			bad "the box's sends bypassed its shaper: its tbf sent $((t1 - t0)) bytes"
		fi
	fi
	[ -n "${VERBOSE:-}" ] && grep -h "^bench: rank .* \(datagrams\|recovery\|moved\)\|^RESULT" "$log/$name"-w*.log | sed 's/^/  /'
	cp "$log/$name"-w*.log "$out/" 2>/dev/null
	printf "loss: %-7s %4s%%  %8.1f ms  lost %6d  resent %6d  needless %5d  probes %6d  nacks %6d  box sent %6.1f MiB through its tbf\n" \
		"$layout" "$loss" "$ms" $((d1 - d0)) "$resent" "$needless" "$probes" "$nacks" \
		"$(awk -v b=$((t1 - t0)) 'BEGIN { print b / 1048576 }')"
}

echo "loss: n=$N workers at B=$B Mb/s, box of $ports ports at k=2, M=$SIZE fp32 in 8 tensors," \
	"$ITERS iterations after 1 warm-up, loss on every link both ways; logs in $log"
pbox_net_up "$tag" "$ports" "$N" || exit 1
shape 2 || exit 1
echo "layout,loss_pct,time_ms,lost,resent,needless,probes,nacks,box_tbf_bytes" >"$csv"
for layout in $LAYOUTS; do
	for loss in $LOSSES; do run "$layout" "$loss"; done
done

# time over the same layout's clean time, against the loss rate
if command -v gnuplot >/dev/null; then
	gnuplot <<-EOF2
		set terminal pngcairo size 900,560 font "sans,11"
		set output "$out/loss.png"
		set datafile separator ","
		set key top left
		set grid
		set title "pbox under loss: n = $N at B = $B Mb/s, box at k = 2, M = $SIZE, loss on every link both ways"
		set xlabel "loss on every link, each way (%)"
		set ylabel "allreduce time / the same layout's clean time"
		set yrange [0.9:*]
		set termoption noenhanced
		rows(m) = sprintf("< awk -F, 'NR > 1 && \$1 == \"%s\" { if (\$2 == 0) c = \$3; print \$2 \",\" \$3 / c }' %s", m, "$csv")
		plot rows("unified") using 1:2 with linespoints lw 2 pt 7 lc rgb "#d62728" title "unified layout", \
		     rows("ps") using 1:2 with linespoints lw 2 pt 5 lc rgb "#1f77b4" title "PS only", \
		     1 + x / 100 with lines dt 2 lc rgb "black" title "1 + p"
	EOF2
	echo "loss: wrote $csv and $out/loss.png"
else
	echo "loss: wrote $csv"
fi

awk -F, 'NR > 1 && $1 == "unified" { t[$2] = $3 }
	END {
		if (!(0 in t) || t[0] <= 0) { print "loss: no clean run of the unified layout"; exit 1 }
		printf "RESULT loss r0.1=%.3f r1=%.3f r5=%.3f\n",
			(0.1 in t) ? t[0.1] / t[0] : 0, (1 in t) ? t[1] / t[0] : 0, (5 in t) ? t[5] / t[0] : 0
	}' "$csv"
[ "$fail" -eq 0 ]
