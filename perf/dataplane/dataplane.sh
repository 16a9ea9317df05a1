#!/usr/bin/env bash
# perf/dataplane: pboxd alone on a virtual port, driven by pbox-gen (a DPDK
# traffic generator that plays W workers: it registers a job, pushes every
# fragment from every worker round after round, and checks every byte of
# every result), against the I/O ceiling of the same port type measured in
# the same run: dpdk-testpmd in macswap mode, driven by the same generator
# doing the same work (every packet built, sent, received and compared).
#
# The port is memif (shared-memory rings between two DPDK processes, the
# fastest virtual port here). One box data core (busy polling) and the
# generator on the other core; testpmd forwards on the same core the box
# used. The runs alternate ROUNDS times and the best of each counts.
#
# The box runs three ways each round: the job's MAC over every header, over
# headers and payloads (the default), and off; each datagram is checked on
# the way in and each result signed on the way out.
#
# Prints one line per run, the box's and testpmd's fragments/s and Gb/s per
# box core, and ends with
#   RESULT dataplane ratio_to_testpmd=R header_to_testpmd=H mac_payload=P mac_off=O
# (R: box fragments/s with the payload MAC, the default, over testpmd
# packets/s, both with W answers per W pushes; H: the same with the header
# MAC; P and O: the box's rate with the payload MAC and with no MAC, over
# its rate with the header MAC, same run).
# Needs root (a network namespace: memif's abstract sockets stay in it) and
# hugepages.
#
#   perf/dataplane/dataplane.sh [BUILD_DIR]   W (4), SIZE (16M), DURATION (5 s),
#                                             ROUNDS (3), MTU (9000)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
W=${W:-4}
SIZE=${SIZE:-16M}
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
MTU=${MTU:-9000}
EXTRA_GEN=${EXTRA_GEN:-}
NAME=dataplane
testpmd=$(command -v dpdk-testpmd || true)
[ -n "$testpmd" ] || { echo "dataplane: no dpdk-testpmd: apt-get install dpdk-dev"; exit 1; }
. "$here/memif.sh"
memif_setup
GEN_ARGS="--workers $W --bytes $(numfmt --from=iec "$SIZE") --warmup 2 --seconds $DURATION"
box_ini "$log/box.ini" 384M

box_run() { # NAME MAC
	box_start "$1" "$log/box.ini" || return 1
	EXTRA_GEN="$EXTRA_GEN0 --mac $2" gen_run box "$1" "$log/box.sock" "$box_pid" || fail=1
}
EXTRA_GEN0=$EXTRA_GEN

testpmd_run() { # NAME
	local pid
	rm -f "$log/tp.sock"
	# testpmd as the memif server on the box's core, as pboxd was. With
	# --stats-period it forwards until a signal, whatever its stdin
	ip netns exec "$netns" "$testpmd" -l 0,1 --main-lcore 0 --no-pci --file-prefix "$pfx-tp" --huge-unlink \
		--vdev "$(memif server "$log/tp.sock")" -m 512 --log-level=error -- \
		--forward-mode=macswap --nb-cores=1 --rxq=1 --txq=1 --rxd=1024 --txd=1024 \
		--mbuf-size=$((bsize + 128)) --total-num-mbufs=16384 --auto-start \
		--no-lsc-interrupt --stats-period=3600 </dev/null >"$log/$1-testpmd.log" 2>&1 &
	pid=$!
	pids+=("$pid")
	for _ in $(seq 100); do grep -qs "Port 0: " "$log/$1-testpmd.log" && break; sleep 0.1; done
	gen_run echo "$1" "$log/tp.sock" "$pid" || fail=1
}

pps() { gen_field "$1" pps; }
gbps() { gen_field "$1" gbps_in; }

echo "dataplane: pboxd (1 data core, busy polling) on memif, $W emulated workers, $SIZE model," \
	"fragment $frag B (MTU $MTU), against dpdk-testpmd macswap on memif; $ROUNDS rounds of" \
	"$DURATION s each; logs in $log"
best_box=0 best_tp=0 box_gb=0 tp_gb=0 best_pay=0 best_off=0
better() { [ -n "$1" ] && awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }
for ((r = 1; r <= ROUNDS; r++)); do
	box_run "box$r" header && p=$(pps "box$r") && better "$p" "$best_box" && best_box=$p box_gb=$(gbps "box$r")
	box_run "boxpay$r" payload && p=$(pps "boxpay$r") && better "$p" "$best_pay" && best_pay=$p
	box_run "boxoff$r" off && p=$(pps "boxoff$r") && better "$p" "$best_off" && best_off=$p
	testpmd_run "tp$r" && p=$(pps "tp$r") && [ -n "$p" ] &&
		awk -v a="$p" -v b="$best_tp" 'BEGIN { exit !(a > b) }' && best_tp=$p tp_gb=$(gbps "tp$r")
done
awk -v b="$best_box" -v t="$best_tp" -v bg="$box_gb" -v tg="$tp_gb" -v w="$W" \
	-v pay="$best_pay" -v off="$best_off" 'BEGIN {
	printf "dataplane: pboxd   %10.0f fragments/s per core with the payload MAC (the default), %10.0f with the header MAC, %10.0f with none\n", pay, b, off
	printf "dataplane: pboxd   %6.2f Gb/s in and %6.2f out per core (%d results per %d pushes), header MAC\n", bg, bg, w, w
	printf "dataplane: testpmd %10.0f packets/s per core,   %6.2f Gb/s in and %6.2f out per core\n", t, tg, tg
	m = b > 0 ? sprintf(" mac_payload=%.3f mac_off=%.3f", pay / b, off / b) : " mac_payload=n/a mac_off=n/a"
	if (t > 0) printf "RESULT dataplane ratio_to_testpmd=%.3f header_to_testpmd=%.3f%s\n", pay / t, b / t, m
	else printf "RESULT dataplane ratio_to_testpmd=n/a (testpmd forwarded nothing)%s\n", m }'
[ "$fail" -eq 0 ] && [ "$best_tp" != 0 ]
