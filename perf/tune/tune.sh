#!/usr/bin/env bash
# perf/tune: what the online tuning of the credit and the partition size
# ([tuning] autotune) finds, and what it buys. n = 4 workers (pbox-bench
# over libpbox) at B = 200 Mb/s, a box of 2 ports at k = 2 on the emulated
# network, SIZE of fp32 in TENSORS tensors, ITERS verified iterations.
# From two starting points (START: a credit of one chunk, 32 KiB, the least
# the configuration takes, and the default 4 MiB), each run once with the
# values fixed and once tuned. It reports the
# values each rank settled on, and the time per allreduce over the last
# third of the iterations (the slowest rank's mean), tuned against fixed:
#   RESULT tune from32k_fixed_ms=A from32k_tuned_ms=B gain32k=A/B
#               from4m_fixed_ms=C from4m_tuned_ms=D gain4m=C/D credit=X partition=Y
# (X, Y: rank 0's tuned values from 32 KiB). CSV in $OUT/tune.csv.
# Needs root and hugepages.
#
#   perf/tune/tune.sh [BUILD_DIR]   SIZE (16M), TENSORS (8), ITERS (30),
#                                   OUT (BUILD_DIR/perf/tune)
set -uo pipefail

N=4
B=200
ports=2
SIZE=${SIZE:-16M}
TENSORS=${TENSORS:-8}
ITERS=${ITERS:-30}
. "$(dirname "$0")/../../tests/net/lib.sh"

harness tune

# tail_ms NAME: the slowest rank's mean time over its last third of iterations
tail_ms() {
	awk -v n="$ITERS" '/^bench: rank [0-9]+: iteration [0-9]+\/[0-9]+: / {
		split($5, it, "/"); r = $3; sub(":", "", r)
		if (it[1] > it[2] - int(n / 3)) { s[r] += $6; c[r]++ } }
		END { m = 0; for (r in s) if (s[r] / c[r] > m) m = s[r] / c[r]; printf "%.3f\n", m }' \
		"$log/$1"-w*.log
}

echo "tune: n=$N workers at B=$B Mb/s, box of $ports ports at k=2, $SIZE fp32 in $TENSORS tensors," \
	"$ITERS iterations; logs in $log"
pbox_net_up "$tag" "$ports" "$N" || exit 1
shape 2 || exit 1
restart_box $((2 * wbw / ports)) || exit 1
echo "start,mode,tail_ms,credit_kib,partition_kib,windows" >"$csv"
declare -A ms
for start in 32K 4M; do
	for mode in fixed tuned; do
		name=$start-$mode
		worker_cfgs 1 "credit_bytes = $start" "autotune = $([ $mode = tuned ] && echo true || echo false)"
		bench_ran "$name" "$name" --size "$SIZE" --tensors "$TENSORS" --iters "$ITERS" || exit 1
		ms[$name]=$(tail_ms "$name")
		grep -h "tuning:" "$log/$name"-w*.log | sed 's/^/        /'
		read -r c p w < <(awk '/^bench: rank 0 tuning:/ { print $6, $9, $13 }' "$log/$name-w0.log")
		echo "$start,$mode,${ms[$name]},$c,$p,$w" >>"$csv"
		echo "tune: from $start, $mode: ${ms[$name]} ms per allreduce over the last third"
	done
done
read -r c p < <(awk '/^bench: rank 0 tuning:/ { print $6, $9 }' "$log/32K-tuned-w0.log")
check "the search converged on every tuned rank" \
	bash -c "[ \$(grep -h 'tuning:.*converged' $log/32K-tuned-w*.log $log/4M-tuned-w*.log | wc -l) = $((2 * N)) ]"
awk -v a="${ms[32K-fixed]}" -v b="${ms[32K-tuned]}" -v c="${ms[4M-fixed]}" -v d="${ms[4M-tuned]}" \
	-v cr="$c" -v pa="$p" 'BEGIN {
	printf "RESULT tune from32k_fixed_ms=%.3f from32k_tuned_ms=%.3f gain32k=%.3f from4m_fixed_ms=%.3f from4m_tuned_ms=%.3f gain4m=%.3f credit=%sK partition=%sK\n",
		a, b, a / b, c, d, c / d, cr, pa }'
