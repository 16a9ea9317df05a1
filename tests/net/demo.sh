#!/usr/bin/env bash
# make demo: the main job on an emulated cluster on this machine. pboxd
# takes 4 virtual NIC ports (net_af_packet on veth) in its own network
# namespace; 4 workers (pbox-client, one namespace each) allreduce a tensor
# through it for ROUNDS rounds per dtype, every sum checked; then pboxctl
# shows what the box counted. Needs root and hugepages.
#
#   tests/net/demo.sh [BUILD_DIR]      ROUNDS (default 50), BYTES (16 MiB)
set -uo pipefail

ROUNDS=${ROUNDS:-50}
. "$(dirname "$0")/lib.sh"

need_root demo
echo "demo: emulated cluster: a box with 4 ports (2 data cores), $W workers, links at MTU 9000"
pbox_net_up "$tag" 4 "$W" || exit 1
start_box || exit 1
sed -n '/^placement/,/^pboxd: serving/p' "$log/pboxd.log" | sed 's/^/  /'
for dt in fp32 fp16 bf16; do
	job=$((job + 1))
	if run_job "$job" "$dt" "$ROUNDS" "$BYTES" >/dev/null; then
		# each worker's own measure: tensor bytes x rounds / its wall time
		cat "$log"/job"$job"-w*.log | awk -v r="$ROUNDS" -v n="$BYTES" -v w="$W" -v dt="$dt" '
			/goodput/ { for (i = 1; i <= NF; i++) if ($i == "goodput") { g += $(i + 1); k++ } }
			END { printf "demo: %s: %d rounds x %d MiB x %d workers, every sum verified; " \
				"goodput %.2f Gb/s per worker, %.2f Gb/s pushed and %.2f Gb/s returned by the box\n",
				dt, r, n / 1048576, w, g / k, g, g }'
		ok "$dt"
	else
		bad "$dt: a worker failed (see above)"
	fi
done
echo "demo: pboxctl stats:"
"$build/bin/pboxctl" --prefix "$prefix" stats | sed 's/^/  /'
echo "demo: $pass of $((pass + fail)) runs verified"
[ "$fail" -eq 0 ]
