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
# Prints one line per run, the box's and testpmd's fragments/s and Gb/s per
# box core, and ends with
#   RESULT dataplane ratio_to_testpmd=R
# (box fragments/s over testpmd packets/s, both with W answers per W pushes).
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
gen="$build/bin/pbox-gen"
testpmd=$(command -v dpdk-testpmd || true)
bytes=$(numfmt --from=iec "$SIZE")
frag=$((MTU > 8300 ? 8192 : MTU > 4200 ? 4096 : MTU > 2100 ? 2048 : 1024))
bsize=$(((frag + 74 + 1023) / 1024 * 1024))
log=$(mktemp -d /tmp/pbox-dp.XXXXXX)
ns="pbox-dp$$"
pids=()
fail=0

[ "$(id -u)" -eq 0 ] || { echo "dataplane: needs root"; exit 1; }
[ -n "$testpmd" ] || { echo "dataplane: no dpdk-testpmd: apt-get install dpdk-dev"; exit 1; }
[ -x "$gen" ] || { echo "dataplane: no $gen: make"; exit 1; }

cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
	ip netns del "$ns" 2>/dev/null
	rm -rf /var/run/dpdk/pbox-dp$$-* /dev/hugepages/pbox-dp$$-*
	if [ "$fail" -ne 0 ]; then echo "dataplane: logs kept in $log"; else rm -rf "$log"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$ns" && ip -n "$ns" link set lo up || exit 1
memif() { # ROLE SOCKET
	echo "net_memif0,role=$1,socket=$2,bsize=$bsize,rsize=11"
}

cat >"$log/box.ini" <<EOF
; perf/dataplane: one data core, one memif port
[management]
address = 127.0.0.1
[cores]
list = 1
[memory]
hugepage_budget = 384M
[data]
mtu = $MTU
[polling]
mode = busy
[log]
level = info
[port p0]
vdev = $(memif server "$log/box.sock")
ip = 198.18.1.1
bandwidth = 100G
EOF

# gen MODE NAME SOCKET SERVER_PID: pbox-gen on core 0, the memif client at
# the other end of SOCKET. Once it has printed its result it stops polling
# (--hold); then the server (pboxd or testpmd) stops first, closing the
# memif, and the generator leaves. A memif peer leaving while the other side
# polls can crash the poller (DPDK 22.11's memif PMD unmaps the rings from
# its control thread under the data core)
gen() {
	local port pid rc st
	port=$(memif client "$3")
	ip netns exec "$ns" "$gen" -l 0 --no-pci --file-prefix "pbox-dp$$-gen" --huge-unlink --vdev "$port" -m 512 \
		--log-level=error -- --port "$port" --mode "$1" --ctl 127.0.0.1:9570 \
		--workers "$W" --bytes "$bytes" --frag "$frag" --warmup 2 --seconds "$DURATION" \
		--hold $EXTRA_GEN >"$log/$2.log" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null && ! grep -qs "^GEN" "$log/$2.log"; do sleep 0.2; done
	[ "$1" = box ] && ip netns exec "$ns" "$build/bin/pboxctl" --prefix "pbox-dp$$-box" stats \
		>"$log/$2-stats.txt" 2>&1
	stop "$4"
	st=$?
	(sleep 5; kill -INT "$pid" 2>/dev/null) &
	wait "$pid"
	rc=$?
	grep -h "^GEN" "$log/$2.log" || { sed 's/^/  /' "$log/$2.log"; }
	if [ "$1" = box ] && [ "$st" -ne 0 ]; then
		echo "dataplane: pboxd exited with status $st"
		rc=1
	fi
	return $rc
}

# stop PID: SIGINT, then wait; its exit status
stop() {
	local st
	kill -INT "$1" 2>/dev/null
	wait "$1" 2>/dev/null
	st=$?
	pids=("${pids[@]/$1/}")
	return $st
}

box_run() { # NAME
	rm -f "$log/box.sock"
	ip netns exec "$ns" "$build/bin/pboxd" --file-prefix "pbox-dp$$-box" "$log/box.ini" \
		>"$log/$1-pboxd.log" 2>&1 &
	local pid=$!
	pids+=("$pid")
	for _ in $(seq 100); do grep -q "pboxd: serving" "$log/$1-pboxd.log" && break; sleep 0.1; done
	if ! grep -q "pboxd: serving" "$log/$1-pboxd.log"; then
		sed 's/^/  /' "$log/$1-pboxd.log"
		echo "dataplane: pboxd did not start"
		fail=1
		stop "$pid"
		return 1
	fi
	gen box "$1" "$log/box.sock" "$pid" || fail=1
}

testpmd_run() { # NAME
	rm -f "$log/tp.sock"
	# testpmd as the memif server on the box's core, as pboxd was. With
	# --stats-period it forwards until a signal, whatever its stdin
	ip netns exec "$ns" "$testpmd" -l 0,1 --main-lcore 0 --no-pci --file-prefix "pbox-dp$$-tp" --huge-unlink \
		--vdev "$(memif server "$log/tp.sock")" -m 512 --log-level=error -- \
		--forward-mode=macswap --nb-cores=1 --rxq=1 --txq=1 --rxd=1024 --txd=1024 \
		--mbuf-size=$((bsize + 128)) --total-num-mbufs=16384 --auto-start \
		--no-lsc-interrupt --stats-period=3600 </dev/null >"$log/$1-testpmd.log" 2>&1 &
	local pid=$!
	pids+=("$pid")
	for _ in $(seq 100); do grep -qs "Port 0: " "$log/$1-testpmd.log" && break; sleep 0.1; done
	gen echo "$1" "$log/tp.sock" "$pid" || fail=1
}

pps() { sed -n 's/.* pps=\([0-9.]*\).*/\1/p' "$log/$1.log" | head -1; }
gbps() { sed -n 's/.* gbps_in=\([0-9.]*\).*/\1/p' "$log/$1.log" | head -1; }

echo "dataplane: pboxd (1 data core, busy polling) on memif, $W emulated workers, $SIZE model," \
	"fragment $frag B (MTU $MTU), against dpdk-testpmd macswap on memif; $ROUNDS rounds of" \
	"$DURATION s each; logs in $log"
best_box=0 best_tp=0 box_gb=0 tp_gb=0
for ((r = 1; r <= ROUNDS; r++)); do
	box_run "box$r" && p=$(pps "box$r") && [ -n "$p" ] &&
		awk -v a="$p" -v b="$best_box" 'BEGIN { exit !(a > b) }' && best_box=$p box_gb=$(gbps "box$r")
	testpmd_run "tp$r" && p=$(pps "tp$r") && [ -n "$p" ] &&
		awk -v a="$p" -v b="$best_tp" 'BEGIN { exit !(a > b) }' && best_tp=$p tp_gb=$(gbps "tp$r")
done
awk -v b="$best_box" -v t="$best_tp" -v bg="$box_gb" -v tg="$tp_gb" -v w="$W" 'BEGIN {
	printf "dataplane: pboxd   %10.0f fragments/s per core, %6.2f Gb/s in and %6.2f out per core (%d results per %d pushes)\n", b, bg, bg, w, w
	printf "dataplane: testpmd %10.0f packets/s per core,   %6.2f Gb/s in and %6.2f out per core\n", t, tg, tg
	if (t > 0) printf "RESULT dataplane ratio_to_testpmd=%.3f\n", b / t
	else printf "RESULT dataplane ratio_to_testpmd=n/a (testpmd forwarded nothing)\n" }'
[ "$fail" -eq 0 ] && [ "$best_tp" != 0 ]
