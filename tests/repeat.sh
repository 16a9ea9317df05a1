#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Runs a test command again and again, with the other cores kept busy, and
# keeps the whole log of every failing run: how a flake is caught, and how a
# fix is shown to hold (issue 37: 20 of 20 loaded runs).
#
#   tests/repeat.sh [-n RUNS] [-l HOGS] [-o DIR] [-x] -- COMMAND [ARGS...]
#
#   -n RUNS  how many runs (20)
#   -l HOGS  busy loops beside each run (1: the other core of a 2-core host;
#            0 for none)
#   -o DIR   where the logs go (build/repeat); run K's log is DIR/run-K.log,
#            kept only if it failed, and DIR/first-failure.log is the first
#   -x       stop at the first failure
#
# Prints one line per run (pass or fail, seconds) and a summary:
#   RESULT repeat passed=19 runs=20 first_failure=DIR/run-7.log
# and exits non-zero if any run failed.
#
# Examples:
#   tests/repeat.sh -n 20 -- make --no-print-directory unit
#   tests/repeat.sh -n 50 -x -- env CK_RUN_CASE=local TEST_BUILD_DIR=build \
#       TEST_SRC_DIR=. build/tests/unit_tests   (the tests find the CUDA double so)
set -uo pipefail

runs=20 hogs=1 dir=build/repeat stop=0
while getopts "n:l:o:x" opt; do
	case $opt in
	n) runs=$OPTARG ;;
	l) hogs=$OPTARG ;;
	o) dir=$OPTARG ;;
	x) stop=1 ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
if [ $# -eq 0 ]; then
	echo "usage: $0 [-n RUNS] [-l HOGS] [-o DIR] [-x] -- COMMAND [ARGS...]" >&2
	exit 2
fi
case "$runs$hogs" in *[!0-9]*)
	echo "$0: -n and -l take whole numbers" >&2
	exit 2
	;;
esac

mkdir -p "$dir"
rm -f "$dir"/run-*.log "$dir"/first-failure.log

hog_pids=()
stop_hogs() {
	[ ${#hog_pids[@]} -gt 0 ] && kill "${hog_pids[@]}" 2>/dev/null
	wait 2>/dev/null
	hog_pids=()
}
trap stop_hogs EXIT
trap 'stop_hogs; exit 130' INT TERM
for ((h = 0; h < hogs; h++)); do
	# a pure busy loop: no I/O, no memory, only a core taken
	bash -c 'while :; do :; done' &
	hog_pids+=($!)
done

passed=0 first=none
for ((k = 1; k <= runs; k++)); do
	log=$dir/run-$k.log
	t0=$(date +%s.%N)
	"$@" >"$log" 2>&1
	rc=$?
	secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
		printf 'repeat: run %d of %d passed (%.1f s)\n' "$k" "$runs" "$secs"
		rm -f "$log"
	else
		printf 'repeat: run %d of %d FAILED, exit %d (%.1f s): %s\n' "$k" "$runs" "$rc" "$secs" "$log"
		grep -E '^[^:]+:[0-9]+:[EF]:|FAIL|Assertion|ERROR|timeout' "$log" | head -5 | sed 's/^/    /'
		if [ "$first" = none ]; then
			first=$log
			cp "$log" "$dir/first-failure.log"
		fi
		[ $stop -eq 1 ] && break
	fi
done
done_runs=$((k > runs ? runs : k))
echo "RESULT repeat passed=$passed runs=$done_runs hogs=$hogs first_failure=$first"
[ "$passed" -eq "$done_runs" ]
