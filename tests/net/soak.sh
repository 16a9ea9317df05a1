#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# The soak (make soak DURATION=S; CI runs 180 s of it): pboxd with 2 ports
# and 4 workers on the emulated cluster, under everything at once, cycle
# after cycle until S seconds have passed:
#
#  - a pbox-client job registers, sums 20 rounds of 1 MiB and leaves, every
#    link losing and duplicating 1% of its frames both ways; each rank then
#    replays one pull probe 200 times; a storm of malformed and foreign
#    datagrams at the box's ports alongside;
#  - libpbox (pbox-bench --survive, 4 ranks): a rank killed mid-run, the
#    other three going on as a job of three, every sum exact;
#  - every third cycle, libpbox again with pboxd killed mid-run: the workers
#    go on without it, pboxd is started again and taken back
#    (pbox_rejoin()) for the last iterations;
#  - all cycle long, connections that never prove the box key drip AUTH
#    lines at the control plane and HTTP headers at /metrics from 8
#    addresses.
#
# Checks, each cycle and at the end: every sum exact; the box's results are
# n per completed fragment over each client job; after each cycle the box
# holds no job and no job state; pboxd's resident memory and its open
# descriptors flat after its first cycle (each pboxd process: within 4 MiB
# and 4 descriptors of its first sample); each libpbox worker's resident
# memory within 8 MiB of what it was after its warm-up, at its end (its
# rank or box lost, its shrink or rejoin included); no connection to the
# box's doors dropped from a full accept queue. Prints a RESULT line
# with the cycles, the jobs, the sums and the memory figures.
#
#   tests/net/soak.sh [BUILD_DIR]        DURATION (180)
set -uo pipefail

. "$(dirname "$0")/lib.sh"

need_root soak
DURATION=${DURATION:-180}
N=4
SIZE=2M
wbw=1000
bench="$build/bin/pbox-bench"
abuse="$here/ctl-abuse.py"
pbox_net_up "$tag" 2 "$N" || {
	bad "emulated network"
	exit 1
}
restart_box $((2 * wbw / 2)) || exit 1
echo "soak: $DURATION s of jobs, loss, duplication, killed ranks and boxes, hostile traffic"

srcs=$(seq -s, -f '198.18.0.%g' 30 37)
ip -n "$box_ns" link set lo up
for a in ${srcs//,/ }; do ip -n "$box_ns" addr add "$a/32" dev lo; done
lossy="w0 w1 w2 w3 box-p0 box-p1"

# sample: pboxd's pid, resident KiB and open descriptors, once the cycle's
# hostile connections are gone
samples=()
sample() {
	local rss fds
	rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pboxd_pid/status" 2>/dev/null)
	fds=$(find "/proc/$pboxd_pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	samples+=("$pboxd_pid ${rss:-0} $fds")
}

# hostile CYCLE_S: drips at both doors for the cycle, in the background
# ($hostile_pids)
hostile() {
	ip netns exec "$box_ns" python3 "$abuse" drip "${boxaddr%:*}" "${boxaddr#*:}" "$1" \
		"$log/box.key" "$srcs" >>"$log/drip.log" 2>&1 &
	hostile_pids=($!)
	ip netns exec "$box_ns" python3 "$abuse" httpdrip "${boxaddr%:*}" 9571 "$1" "$srcs" \
		>>"$log/drip.log" 2>&1 &
	hostile_pids+=($!)
}

# client_job ID: a pbox-client job on lossy links, a storm and probe replays
# alongside; its completions and results as the box counted them
client_job() {
	local c0 r0 c1 r1 rc=0 h
	for h in $lossy; do pbox_net_impair "$tag" "$h" 1 1 || return 1; done
	c0=$(stat completed) r0=$(stat results)
	(
		sleep 0.5
		wns 1 "$client" --box "$boxaddr" --job "$1" --token $(($1 * 7919)) --n "$N" --rank 1 \
			--ranks "$(rank_addrs)" --storm 50 --quiet >"$log/storm$1.log" 2>&1
	) &
	local storm=$!
	run_job "$1" fp32 20 1048576 --replay 200 >"$log/client$1.out" 2>&1 || rc=1
	wait "$storm"
	c1=$(stat completed) r1=$(stat results)
	for h in $lossy; do pbox_net_impair "$tag" "$h" 0 0; done
	[ "$rc" = 0 ] && [ $((r1 - r0)) -eq $((N * (c1 - c0))) ] && [ $((c1 - c0)) -gt 0 ]
}

# bench_survive NAME ITERS KILL [ARGS...]: pbox-bench --survive on every
# rank; once all are past their second iteration, KILL (a rank's number, or
# "box"); true when every survivor verified every sum
bench_survive() {
	local name=$1 iters=$2 kill=$3 r ok=1
	shift 3
	run_past_two "$name" "$iters" --survive "$@"
	if [ "$kill" = box ]; then
		kill -9 "$pboxd_pid"
		wait "$pboxd_pid" 2>/dev/null
		pboxd_pid=
		for _ in $(seq 100); do
			[ "$(grep -l 'recovered:' "$log"/"$name"-w*.log 2>/dev/null | wc -l)" -eq "$N" ] && break
			sleep 0.1
		done
		restart_box $((2 * wbw / 2)) || ok=0
	else
		kill -9 "${pids[$kill]}"
		wait "${pids[$kill]}" 2>/dev/null
	fi
	for ((r = 0; r < N; r++)); do
		[ "$kill" = "$r" ] && continue
		wait "${pids[$r]}" || ok=0
		grep -q "RESULT bench .*verified=yes" "$log/$name-w$r.log" || ok=0
		worker_rss "$log/$name-w$r.log"
	done
	[ "$ok" = 1 ]
}

# worker_rss LOG: how far a surviving worker's resident memory moved from
# its warm-up to its end (its failure, shrink or rejoin included); the
# most over the soak in $wgrow (KiB)
wgrow=0
worker_rss() {
	local g
	g=$(grep -o 'rss_warm_kib=[0-9]* rss_end_kib=[0-9]*' "$1" | awk -F'[= ]' '{ print $4 - $2 }')
	if [ -n "$g" ] && [ "$g" -gt "$wgrow" ]; then wgrow=$g; fi
}

worker_cfgs 1 "deadline = 5s"
t_end=$(($(date +%s) + DURATION))
cycles=0 jobs=0 bad_cycles=0
while [ "$(date +%s)" -lt "$t_end" ]; do
	cycles=$((cycles + 1))
	hostile 12
	ok=1
	jobs=$((jobs + 1))
	client_job $((100 + cycles)) || {
		ok=0
		echo "  cycle $cycles: the client job failed or its counters do not add up"
		sed 's/^/    /' "$log/client$((100 + cycles)).out" | tail -6
	}
	jobs=$((jobs + 1))
	bench_survive "kill$cycles" 8 $((1 + cycles % 3)) || {
		ok=0
		echo "  cycle $cycles: libpbox with rank $((1 + cycles % 3)) killed failed"
		grep -h "pbox-bench:" "$log/kill$cycles"-w*.log | sed 's/^/    /'
	}
	if [ $((cycles % 3)) = 0 ]; then
		jobs=$((jobs + 1))
		bench_survive "box$cycles" 10 box --rejoin 8 || {
			ok=0
			echo "  cycle $cycles: libpbox with pboxd killed and taken back failed"
			grep -h "pbox-bench:" "$log/box$cycles"-w*.log | sed 's/^/    /'
		}
	fi
	wait "${hostile_pids[@]}" # the cycle's drips end, and the box closes their connections
	sleep 2.5
	jobs_gone || {
		ok=0
		echo "  cycle $cycles: the box still holds $(stat jobs) jobs, $(stat state_bytes_used) bytes"
	}
	sample
	[ "$ok" = 1 ] || bad_cycles=$((bad_cycles + 1))
	echo "  cycle $cycles: $([ "$ok" = 1 ] && echo exact || echo FAILED); pboxd ${samples[-1]#* } (KiB, fds)"
done

check "$cycles cycles, $jobs jobs (loss, duplication, storms, replays, killed ranks and boxes, drips at both doors): every sum exact, every client job's results n per completion, the box empty after each cycle" \
	test "$bad_cycles" = 0 -a "$cycles" -gt 0
# per pboxd process: its first sample, and how far the others moved from it
flat=$(printf '%s\n' "${samples[@]}" | awk '
	{ if (!($1 in rss0)) { rss0[$1] = $2; fd0[$1] = $3; next }
	  d = $2 - rss0[$1]; if (d > drss) drss = d; f = $3 - fd0[$1]; if (f < 0) f = -f; if (f > dfd) dfd = f }
	END { printf "%d %d\n", drss, dfd }')
read -r drss dfd <<<"$flat"
grep -h "^DRIP\|^HTTPDRIP" "$log/drip.log" | awk '{ print $1, $NF }' | sort | uniq -c | sed 's/^/       /' | head -6
check "pboxd's resident memory and descriptors flat after its first cycle: +$drss KiB at most (4096 allowed), descriptors within $dfd (4)" \
	test "$drss" -le 4096 -a "$dfd" -le 4
check "each worker's resident memory flat from its warm-up to its end, through a killed rank or box and the shrink or rejoin: +$wgrow KiB at most (8192 allowed)" \
	test "$wgrow" -le 8192
# a full accept queue drops a key holder's handshake, which then backs off
# past the box's 2 s to prove the key (the client job's "connection closed")
overflows=$(ip netns exec "$box_ns" nstat -asz TcpExtListenOverflows 2>/dev/null | awk '/ListenOverflows/ { print $2 }')
check "the box's doors kept up with the drips: ${overflows:-?} connections dropped from a full accept queue" \
	test "${overflows:-1}" = 0
echo "RESULT soak seconds=$DURATION cycles=$cycles jobs=$jobs failed_cycles=$bad_cycles rss_growth_kib=$drss fd_drift=$dfd worker_rss_growth_kib=$wgrow listen_overflows=${overflows:-?}"
echo "soak: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
