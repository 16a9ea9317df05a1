#!/usr/bin/env bash
# perf/scale: the box's memory and per-fragment cost as the model grows
# (MODELS, 1 MB to 4 GB, W workers) and as the workers grow (WORKERS, 2 to
# 256, a WSIZE model). Each point is pboxd (one busy data core, one memif
# port, as perf/dataplane) with pbox-gen playing the workers: it registers
# the job, pushes every fragment from every worker round after round, and
# checks every result byte for byte.
#
# Memory is measured by DPDK, not by pboxd: the malloc heap's Alloc_size
# before the job is registered and while it runs. The design says the box
# holds two accumulators per fragment (one summing, one answering) plus
# per-fragment metadata, so the ratio to 2 x model is the overhead. The
# box's own figure (the REGISTER reply) is printed beside it.
# The cost is the box core's busy_cycles (TSC spent in polling loops that
# received frames) per frame received, in ns: the box's own work, whatever
# the generator's pace. (Frames per second are printed too: that is the
# generator's pace as much as the box's.)
#
# Writes $OUT/scale.csv and scale.png (memory ratio and ns per fragment,
# against model size and against workers), prints one line per point and
# ends with
#   RESULT scale mem_overhead=X cost_growth=Y
# X: the largest measured memory / (2 x model) over all points; Y: the
# largest ns per fragment over the smallest. Needs root and hugepages: it
# raises vm.nr_hugepages for the largest model (4 GB needs about 8.3 GB
# free) and puts the old value back.
#
#   perf/scale/scale.sh [BUILD_DIR]   MODELS ("1M 16M 256M 1G 4G"), W (4),
#                                     WORKERS ("2 16 64 256"), WSIZE (64M),
#                                     DURATION (3 s), REPEAT (3), MTU (9000),
#                                     OUT (BUILD_DIR/perf/scale)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
MODELS=${MODELS:-1M 16M 256M 1G 4G}
W=${W:-4}
WORKERS=${WORKERS:-2 16 64 256}
WSIZE=${WSIZE:-64M}
DURATION=${DURATION:-3}
REPEAT=${REPEAT:-3}
MTU=${MTU:-9000}
EXTRA_GEN=${EXTRA_GEN:-}
NAME=scale
out=${OUT:-$build/perf/scale}
. "$src/perf/dataplane/memif.sh"
memif_setup
mkdir -p "$out"
csv="$out/scale.csv"
hp=/proc/sys/vm/nr_hugepages
hp_old=$(cat $hp)
trap 'memif_cleanup; echo "$hp_old" >$hp' EXIT

# hugepages for the largest model: 2 x model of state (+3%), pboxd's
# mempools (256 MB) and the generator's (512 MB), on 2 MB pages
largest=0
for m in $MODELS $WSIZE; do
	b=$(numfmt --from=iec "$m")
	[ "$b" -gt "$largest" ] && largest=$b
done
want=$(((largest * 2 * 103 / 100 + (768 << 20)) / (2 << 20) + 1))
if [ "$hp_old" -lt "$want" ]; then
	echo "$want" >$hp
	got=$(cat $hp)
	[ "$got" -ge "$want" ] || echo "scale: asked for $want hugepages, got $got: the largest models may not fit"
fi

echo "scale: pboxd (1 data core, busy polling) on memif; models $MODELS at $W workers," \
	"workers $WORKERS at $WSIZE; fragment $frag B; best of $REPEAT runs of $DURATION s a point;" \
	"logs in $log"
echo "series,workers,model_bytes,box_bytes,heap_bytes,mem_ratio,frags_per_s,ns_per_frag" >"$csv"

# once NAME W BYTES: one box, one generator run; sets heap, claimed, pps, ns
once() {
	local name=$1 budget before after rx cyc hz
	budget=$((($3 * 2 * 103 / 100 + (256 << 20)) >> 20))M
	box_ini "$log/$name.ini" "$budget"
	box_start "$name" "$log/$name.ini" || return 1
	box_ctl raw /eal/heap_info,0 >"$log/$name-heap0.txt" 2>&1
	GEN_ARGS="--workers $2 --bytes $3 --warmup 1 --seconds $DURATION"
	gen_run box "$name" "$log/box.sock" "$box_pid" >/dev/null || {
		sed 's/^/  /' "$log/$name.log" | tail -5
		return 1
	}
	before=$(heap_alloc "$log/$name-heap0.txt")
	after=$(heap_alloc "$log/$name-heap.txt")
	claimed=$(sed -n 's/.* box: OK job=[0-9]* bytes=\([0-9]*\).*/\1/p' "$log/$name.log")
	rx=$(box_stat "$name" rx_pkts)
	cyc=$(box_stat "$name" busy_cycles)
	hz=$(box_stat "$name" tsc_hz)
	pps=$(gen_field "$name" pps)
	if [ -z "$before" ] || [ -z "$after" ] || [ -z "$claimed" ] || [ -z "$rx" ] ||
		[ -z "$cyc" ] || [ -z "$hz" ] || [ "${rx:-0}" -eq 0 ]; then
		echo "scale: $name: no figures (heap $before/$after, box $claimed, rx $rx, cycles $cyc)"
		return 1
	fi
	heap=$((after - before))
	ns=$(awk -v rx="$rx" -v cyc="$cyc" -v hz="$hz" 'BEGIN { printf "%.1f", cyc / rx / hz * 1e9 }')
}

# point SERIES W SIZE: REPEAT runs, one CSV row: the largest memory and the
# least ns per fragment of them (the machine is shared: the least is the
# box's cost, the rest is noise)
point() {
	local series=$1 w=$2 bytes r row best_ns="" best_pps=0 worst_heap=0 heap claimed pps ns
	bytes=$(numfmt --from=iec "$3")
	for ((r = 1; r <= REPEAT; r++)); do
		if ! once "$series-w$w-$3-$r" "$w" "$bytes"; then
			fail=1
			return 1
		fi
		[ "$heap" -gt "$worst_heap" ] && worst_heap=$heap
		if [ -z "$best_ns" ] || awk -v a="$ns" -v b="$best_ns" 'BEGIN { exit !(a < b) }'; then
			best_ns=$ns best_pps=$pps
		fi
	done
	row=$(awk -v s="$series" -v w="$w" -v m="$bytes" -v c="$claimed" -v h="$worst_heap" \
		-v p="$best_pps" -v ns="$best_ns" 'BEGIN {
		printf "%s,%d,%.0f,%.0f,%.0f,%.4f,%.0f,%.1f", s, w, m, c, h, h / (2 * m), p, ns }')
	echo "$row" >>"$csv"
	awk -F, -v size="$3" '{ printf "scale: %-7s %3d workers %5s model: box state %8.1f MiB (pboxd says %.1f), %.4f x 2 x model; %8.0f frags/s; %6.1f ns per fragment\n",
		$1, $2, size, $5 / 1048576, $4 / 1048576, $6, $7, $8 }' <<<"$row"
}

for m in $MODELS; do point model "$W" "$m"; done
for w in $WORKERS; do point workers "$w" "$WSIZE"; done

if command -v gnuplot >/dev/null && [ "$(wc -l <"$csv")" -gt 1 ]; then
	gnuplot <<-EOF
		set terminal pngcairo size 1100,460 font "sans,11"
		set output "$out/scale.png"
		set datafile separator ","
		set termoption noenhanced
		set multiplot layout 1,2 title "pboxd, one data core on memif, fragment $frag B"
		set grid
		set key top left
		set logscale x 2
		set y2tics
		set ytics nomirror
		set ylabel "box memory / (2 x model)"
		set y2label "ns per fragment (box core)"
		set yrange [0.9:1.2]
		set y2range [0:*]
		set xlabel "model size (MiB), $W workers"
		rows(s) = sprintf("< awk -F, '\$1 == \"%s\"' %s", s, "$csv")
		plot rows("model") using (\$3/1048576):6 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "memory ratio", \
		     rows("model") using (\$3/1048576):8 axes x1y2 with linespoints lw 2 pt 5 lc rgb "#d62728" title "ns per fragment"
		set xlabel "workers, $WSIZE model"
		plot rows("workers") using 2:6 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "memory ratio", \
		     rows("workers") using 2:8 axes x1y2 with linespoints lw 2 pt 5 lc rgb "#d62728" title "ns per fragment"
		unset multiplot
	EOF
	echo "scale: chart $out/scale.png, data $csv"
fi

awk -F, 'NR > 1 { n++; if ($6 > mem) mem = $6; if (!lo || $8 < lo) lo = $8; if ($8 > hi) hi = $8 }
	END { if (n) printf "RESULT scale mem_overhead=%.4f cost_growth=%.3f\n", mem, hi / lo
	      else print "RESULT scale mem_overhead=n/a cost_growth=n/a (no point measured)" }' "$csv"
[ "$fail" -eq 0 ]
