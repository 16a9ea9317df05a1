# shellcheck shell=bash
# perf/dataplane/memif.sh, sourced by perf/dataplane/dataplane.sh and
# perf/scale/scale.sh: pboxd (or dpdk-testpmd) on one memif port, driven by
# pbox-gen at the other end, in a network namespace of its own (memif's
# abstract sockets stay in it). Everything it starts is stopped, and the
# namespace, DPDK runtime files and hugepage files removed, on exit.
#
# The sourcing script sets: NAME (for messages, logs and the namespace),
# build (the build directory), MTU; then calls memif_setup. It may then set
# EXTRA_GEN (more pbox-gen options) and GEN_ARGS (the generator's workload).
# After memif_setup: $log (a directory, kept when fail=1), $frag, $bsize,
# $gen, box_ini FILE BUDGET, box_start NAME INI, gen_run MODE NAME SOCKET
# SERVER_PID, stop PID, gen_field LOG KEY, box_stat NAME KEY, heap_alloc NAME.

memif_setup() {
	gen="$build/bin/pbox-gen"
	frag=$((MTU > 8300 ? 8192 : MTU > 4200 ? 4096 : MTU > 2100 ? 2048 : 1024))
	bsize=$(((frag + 74 + 1023) / 1024 * 1024))
	pfx="pbox-$NAME$$"
	netns="$pfx"
	pids=()
	fail=0
	[ "$(id -u)" -eq 0 ] || { echo "$NAME: needs root"; exit 1; }
	[ -x "$gen" ] || { echo "$NAME: no $gen: make"; exit 1; }
	log=$(mktemp -d "/tmp/pbox-$NAME.XXXXXX")
	# the box key: pboxd's [management] key_file, the generator's --key-file
	(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$log/box.key" && echo >>"$log/box.key")
	trap memif_cleanup EXIT
	trap 'exit 130' INT TERM
	ip netns add "$netns" && ip -n "$netns" link set lo up || exit 1
}

memif_cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	ip netns pids "$netns" 2>/dev/null | xargs -r kill -9 2>/dev/null
	ip netns del "$netns" 2>/dev/null
	rm -rf /var/run/dpdk/"$pfx"-* /dev/hugepages/"$pfx"-*
	if [ "$fail" -ne 0 ]; then echo "$NAME: logs kept in $log"; else rm -rf "$log"; fi
}

memif() { # ROLE SOCKET
	echo "net_memif0,role=$1,socket=$2,bsize=$bsize,rsize=11"
}

# box_ini FILE BUDGET: one data core (CPU 1, busy polling), one memif port
# (the server end of $log/box.sock), management on 127.0.0.1
box_ini() {
	cat >"$1" <<EOF
; perf/$NAME: one data core, one memif port
[management]
address = 127.0.0.1
key_file = $log/box.key
[cores]
list = 1
[memory]
hugepage_budget = $2
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
}

# box_start NAME INI: pboxd in the namespace; its pid in box_pid
box_start() {
	rm -f "$log/box.sock"
	ip netns exec "$netns" "$build/bin/pboxd" --file-prefix "$pfx-box" "$2" >"$log/$1-pboxd.log" 2>&1 &
	box_pid=$!
	pids+=("$box_pid")
	for _ in $(seq 300); do
		grep -qs "pboxd: serving" "$log/$1-pboxd.log" && return 0
		kill -0 "$box_pid" 2>/dev/null || break
		sleep 0.1
	done
	sed 's/^/  /' "$log/$1-pboxd.log"
	echo "$NAME: pboxd did not start"
	fail=1
	stop "$box_pid"
	return 1
}

# stop PID: SIGINT, then wait; its exit status
stop() {
	local st q keep=()
	kill -INT "$1" 2>/dev/null
	wait "$1" 2>/dev/null
	st=$?
	for q in "${pids[@]}"; do [ "$q" != "$1" ] && keep+=("$q"); done
	pids=("${keep[@]}")
	return $st
}

# gen_run MODE NAME SOCKET SERVER_PID: pbox-gen on CPU 0, the memif client at
# the other end of SOCKET, doing $GEN_ARGS. Once it has printed its result it
# stops polling (--hold): then the box's counters are read (box mode), the
# server (pboxd or testpmd) stops first, closing the memif, and the generator
# leaves. A memif peer leaving while the other side polls can crash the
# poller (DPDK 22.11's memif PMD unmaps the rings from its control thread
# under the data core).
gen_run() {
	local port pid rc st
	port=$(memif client "$3")
	# shellcheck disable=SC2086 # GEN_ARGS and EXTRA_GEN are option lists
	ip netns exec "$netns" "$gen" -l 0 --no-pci --file-prefix "$pfx-gen" --huge-unlink --vdev "$port" \
		-m 512 --log-level=error -- --port "$port" --mode "$1" --ctl 127.0.0.1:9570 --key-file "$log/box.key" --frag "$frag" \
		--hold $GEN_ARGS $EXTRA_GEN >"$log/$2.log" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null && ! grep -qs "^GEN" "$log/$2.log"; do sleep 0.2; done
	if [ "$1" = box ]; then
		box_ctl stats >"$log/$2-stats.txt" 2>&1
		box_ctl raw /eal/heap_info,0 >"$log/$2-heap.txt" 2>&1
	fi
	stop "$4"
	st=$?
	(sleep 5; kill -INT "$pid" 2>/dev/null) &
	wait "$pid"
	rc=$?
	grep -h "^GEN" "$log/$2.log" || sed 's/^/  /' "$log/$2.log"
	if [ "$1" = box ] && [ "$st" -ne 0 ]; then
		echo "$NAME: pboxd exited with status $st"
		rc=1
	fi
	return $rc
}

box_ctl() { ip netns exec "$netns" "$build/bin/pboxctl" --prefix "$pfx-box" "$@"; }

# gen_field LOG KEY: KEY=value from the generator's GEN line in $log/LOG.log
gen_field() { sed -n "s/^GEN.* $2=\([^ ]*\).*/\1/p" "$log/$1.log" | head -1; }

# box_stat NAME KEY: a counter from the stats read after run NAME
box_stat() { awk -v k="$2" '$1 == k { print $2 }' "$log/$1-stats.txt"; }

# heap_alloc FILE: Alloc_size from DPDK's /eal/heap_info reply in FILE
heap_alloc() { sed -n 's/.*"Alloc_size": *\([0-9]*\).*/\1/p' "$1" | head -1; }
