#!/usr/bin/env bash
# Integration tests of pboxd on the emulated network (tests/net/pbox-net.sh):
# real DPDK ports (net_af_packet on veth) in a box namespace, pbox-client in
# four worker namespaces, every sum checked by the clients against sums they
# compute themselves. Needs root and hugepages. Everything it creates is torn
# down on exit, also when a check fails.
#
#   tests/net/integration.sh [BUILD_DIR]
#
# ROUNDS and BYTES (default 100 and 16 MiB) size the main runs.
set -uo pipefail

. "$(dirname "$0")/lib.sh"

need_root integration

echo "integration: emulated network $tag: box with 4 ports, $W workers"
pbox_net_up "$tag" 4 "$W" || { bad "emulated network"; exit 1; }

start_box || exit 1
ok "pboxd starts: $(grep -o 'serving.*' "$log/pboxd.log")"

# host duties
check "ICMP echo answered by each data port" \
	bash -c "for j in 1 2 3 4; do ip netns exec $(pbox_ns "$tag" w1) ping -c 1 -W 2 198.18.\$j.1 >/dev/null || exit 1; done"
check "ARP answered (worker learned the port's MAC)" \
	bash -c "ip -n $(pbox_ns "$tag" w1) neigh show 198.18.1.1 | grep -q lladdr"

# sums, each dtype
t0=$(date +%s.%N)
check "fp32: $W workers, $ROUNDS rounds of $BYTES bytes, every sum exact" run_job 1 fp32 "$ROUNDS" "$BYTES"
t1=$(date +%s.%N)
check "fp16: $W workers, $ROUNDS rounds of $BYTES bytes, every sum exact" run_job 2 fp16 "$ROUNDS" "$BYTES"
check "bf16: $W workers, $ROUNDS rounds of $BYTES bytes, every sum exact" run_job 3 bf16 "$ROUNDS" "$BYTES"
awk -v a="$t0" -v b="$t1" -v r="$ROUNDS" -v n="$BYTES" \
	'BEGIN { printf "        fp32: %.1f s, %.2f Gb/s of tensor per worker\n", b - a, r * n * 8 / (b - a) / 1e9 }'

# two jobs at once on the same workers' hosts (UDP ports 9700 and 9701),
# each with its own key: both exact, each job's counters its own
(jport=9701 && run_job 5 bf16 30 "$BYTES" >"$log/twojobs-5.log" 2>&1) &
two_pid=$!
check "two jobs at once: job 4 (fp32) every sum exact" run_job 4 fp32 30 "$BYTES"
check "two jobs at once: job 5 (bf16, other ports, other key) every sum exact" wait "$two_pid"
sed 's/^/        /' "$log/twojobs-5.log"
# jobcol JOB KEY FILE: job JOB's KEY in a "pboxctl jobs" table (a column per job)
jobcol() {
	awk -v j="job$1" -v k="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == j) c = i + 1; next }
		c && $1 == k { print $c }' "$3"
}
twojobs_ok() {
	local j s c
	for j in 4 5; do
		s=$(jobcol $j summed "$log/jobs$j.txt")
		c=$(jobcol $j completed "$log/jobs$j.txt")
		[ -n "$c" ] && [ "$c" -gt 0 ] && [ "$s" -eq $((W * c)) ] &&
			[ "$(jobcol $j ss_mac "$log/jobs$j.txt")" -eq 0 ] || return 1
	done
}
check "two jobs at once: each job's pushes summed into its own state only (summed = n x completed, none refused for its MAC)" twojobs_ok

# the control plane serves nothing but ENDPOINTS before the box key is proved
ip netns exec "$box_ns" python3 "$here/ctl-abuse.py" auth "${boxaddr%:*}" "${boxaddr#*:}" "$log/box.key" \
	>"$log/auth.log" 2>&1
sed 's/^/        /' "$log/auth.log"
check "control plane: STATS refused before the handshake; a blank line, one holding a NUL, an AUTH after a tab and one with trailing words answered ERR; a wrong key's proof refused and the connection closed; a line over 256 bytes before the proof refused and closed; the right key's taken" \
	bash -c "grep -q '^BEFORE ERR STATS: authenticate first' '$log/auth.log' &&
		grep -q '^BLANK ERR an empty request' '$log/auth.log' && grep -q '^NUL ERR a request holds a NUL' '$log/auth.log' &&
		grep -q '^TABAUTH ERR AUTH: expected AUTH' '$log/auth.log' && grep -q '^TRAILAUTH ERR AUTH: expected AUTH' '$log/auth.log' &&
		grep -q '^LONG ERR request longer than 256 bytes before the box key is proved closed' '$log/auth.log' &&
		grep -q '^WRONGKEY refused' '$log/auth.log' && grep -q '^AFTER closed' '$log/auth.log' &&
		grep -q '^RIGHTKEY taken STAT ' '$log/auth.log'"
check "control plane, after the proof: UNREGISTER job=010 refused as not a job number, one never registered answered so, a field on LIST refused" \
	bash -c "grep -q \"^UNREGOCTAL ERR UNREGISTER: 'job=010 \" '$log/auth.log' &&
		grep -q '^UNREGNONE ERR job 4242: not registered' '$log/auth.log' &&
		grep -q \"^LISTARGS ERR LIST takes no fields ('jobs=all')\" '$log/auth.log'"
check "control plane: ENDPOINTS says each endpoint's room (the box's free memory) and its transmit reference size only after the proof" \
	bash -c "grep -Eq '^ROOMSBEFORE 0/[1-9][0-9]* no-txref' '$log/auth.log' &&
		grep -Eq '^ROOMSAFTER ([1-9][0-9]*)/\\1 txref' '$log/auth.log'"
check "pboxd logs the failed proof, and no key or token in its log" \
	bash -c "grep -q 'failed the box key proof' '$log/pboxd.log' && ! grep -qi 'token=\\|key=' '$log/pboxd.log' &&
		! grep -qF \"\$(cat '$log/box.key')\" '$log/pboxd.log'"

# counters after clean runs: n results per completion, no payload copies
completed=$(stat completed)
results=$(stat results)
check "results sent = n x completed fragments ($results = $W x $completed)" \
	test "$results" -eq $((W * completed)) -a "$completed" -gt 0
check "payload copies on transmit = 0" test "$(stat tx_payload_copies)" -eq 0
check "busy cycles accounted: between 0 and 1 ms of TSC per frame received" \
	test "$(stat busy_cycles)" -gt 0 -a "$(stat busy_cycles)" -lt $(($(stat tsc_hz) / 1000 * $(stat rx_pkts)))
jobrow() { awk -v k="$2" '$1 == k { print $2 }' "$log/jobs$1.txt"; }
check "pboxctl jobs after the fp32 run: results = n x completed, every push summed once" \
	test "$(jobrow 1 results)" -eq $((W * $(jobrow 1 completed))) -a \
	"$(jobrow 1 summed)" -eq $((W * $(jobrow 1 completed))) -a "$(jobrow 1 n)" -eq "$W"
sed 's/^/        /' "$log/jobs1.txt"
check "jobs freed when their registrar left (jobs 0, state 0 bytes)" jobs_gone
wns 1 "$build/bin/pboxctl" --box "$boxaddr" request STATS >"$log/stats-ctl.txt"
check "STATS on the management connection says what pboxctl says (completed, results)" \
	test "$(sed -n 's/^STAT completed=//p' "$log/stats-ctl.txt")" = "$(stat completed)" -a \
	"$(sed -n 's/^STAT results=//p' "$log/stats-ctl.txt")" = "$(stat results)" -a \
	"$(grep -c '^STAT ' "$log/stats-ctl.txt")" -gt 20

# Prometheus: /metrics on the management address in the text format, and a
# real Prometheus server scraping it answers PromQL with pboxd's counters
murl="http://${boxaddr%:*}:9571/metrics"
# (pboxctl read just before and just after the scrape: a late resend or an
# ARP refresh on a loaded machine can move rx_pkts in between, so /metrics
# must lie between the two readings; completed and results no longer move)
rx_before=$(stat rx_pkts)
wns 1 curl -sf "$murl" >"$log/metrics.txt"
rx_after=$(stat rx_pkts)
check "GET $murl passes promtool check metrics" \
	bash -c "promtool check metrics <'$log/metrics.txt' >'$log/promtool.txt' 2>&1 || { cat '$log/promtool.txt'; exit 1; }"
# an HTTP status for every request: a POST with a body, a PUT, a GET with a
# body (read and let go), a HEAD, a path other than /metrics
codes=$(for req in "-X POST --data x=1" "-X PUT --data x=1" "-X GET --data x=1" "-I" ""; do
	# shellcheck disable=SC2086
	wns 1 curl -s -o /dev/null -w "%{http_code} " $req "$murl"
done; wns 1 curl -s -o /dev/null -w '%{http_code}' "${murl%/metrics}/other")
check "/metrics answers every request with a status: POST, PUT 405; GET with a body, HEAD, GET 200; another path 404 ($codes)" \
	test "$codes" = "405 405 200 200 200 404"
msum() { awk -v m="$1" '$1 ~ "^" m "[{ ]" || $1 == m { s += $NF } END { printf "%.0f\n", s }' "$log/metrics.txt"; }
rx_m=$(msum pbox_core_rx_pkts_total)
check "/metrics agrees with pboxctl: completed, results equal, rx_pkts $rx_m within [$rx_before, $rx_after], summed over cores; jobs 0" \
	test "$(msum pbox_core_completed_total)" = "$(stat completed)" -a \
	"$(msum pbox_core_results_total)" = "$(stat results)" -a \
	"$rx_m" -ge "$rx_before" -a "$rx_m" -le "$rx_after" -a "$(msum pbox_jobs)" = 0
check "/metrics has the ports' own counters (imissed, rx_nombuf, oerrors) for 4 ports, drops by reason" \
	test "$(grep -c '^pbox_port_rx_missed_total{port=' "$log/metrics.txt")" = 4 -a \
	"$(grep -c '^pbox_port_rx_nombuf_total{' "$log/metrics.txt")" = 4 -a \
	"$(grep -c '^pbox_port_tx_errors_total{' "$log/metrics.txt")" = 4 -a \
	"$(grep -c 'pbox_core_drops_total{.*reason="ip_csum"' "$log/metrics.txt")" -ge 1
if prom_start w2 "${boxaddr%:*}:9571"; then
	want=$(stat completed)
	got=none
	for _ in $(seq 50); do
		got=$(prom_query w2 'sum(pbox_core_completed_total)')
		[ "$got" = "$want" ] && break
		sleep 0.2
	done
	check "a Prometheus server scraped pboxd: sum(pbox_core_completed_total) = $got, pboxctl says $want" \
		test "$got" = "$want"
	check "PromQL: up{job=\"pboxd\"} = 1 and pbox_state_bytes_budget > 0" \
		test "$(prom_query w2 'up{job="pboxd"}')" = 1 -a \
		"$(prom_query w2 'sum(pbox_state_bytes_budget) > 0')" != none
	check "deploy/grafana: every panel's query is valid PromQL on this server, and every metric it names is served" \
		ip netns exec "$(pbox_ns "$tag" w2)" python3 "$here/dashboard-check.py" \
		"$src/deploy/grafana/pbox-dashboard.json" "$log/metrics.txt" http://127.0.0.1:9090
	kill "$prom_pid" 2>/dev/null && wait "$prom_pid" 2>/dev/null
	prom_pid=
else
	bad "a Prometheus server starts in the emulated cluster"
fi

# loss and duplication on every worker link, both ways
for ((i = 0; i < W; i++)); do
	pbox_net_impair "$tag" "w$i" 1 1 || bad "impair w$i"
done
check "fp32 with 1% loss and 1% duplication: exact, no hang" run_job 4 fp32 "$ROUNDS" "$BYTES"
check "bf16 with 1% loss and 1% duplication: exact, no hang" run_job 5 bf16 "$((ROUNDS / 2))" "$BYTES"
check "retransmissions were answered (answers > 0)" test "$(stat answers)" -gt 0
for ((i = 0; i < W; i++)); do
	pbox_net_impair "$tag" "w$i" 0 0
done
# a replayed probe draws no flood: after 3 exact rounds, each rank sends one
# genuine pull probe of the last round 1000 times, 1 ms apart (the box
# answered every copy with a whole result on 8d91b51: 112 bytes out per
# byte in); a round's answers to one rank are paced, 1 ms doubling to 512 ms
check "a pull probe replayed 1000 times, 1 ms apart, by each of $W ranks: the sums exact" \
	run_job 12 fp32 3 262144 --replay 1000
amp=$(grep -ho 'amplification [0-9.]*' "$log"/job12-w*.log | awk '{ if ($2 > m) m = $2 } END { print m + 0 }')
grep -h 'replayed' "$log"/job12-w*.log | sed 's/^/        /'
check "replayed probes: at most 1.5 bytes of results out per byte of probes in (worst rank: $amp; measured 112 on 8d91b51), paced ones counted as ss_paced" \
	bash -c "awk -v a='$amp' 'BEGIN { exit !(a > 0 && a <= 1.5) }' && [ '$(stat ss_paced)' -gt 0 ]"

# a push replayed from another Ethernet address draws no result there: each
# rank sends every push twice, the second time at once through AF_PACKET
# from a made-up Ethernet address (the genuine datagram, its MAC valid, as
# a capturing attacker or a key holder on the rank's IP:port would replay
# it). On 8d91b51 the box took a rank's Ethernet address from the latest
# datagram that passed its checks and sent the next replies there; now only
# a push that adds the rank's part moves it
check "every push replayed at once from another Ethernet address by each of $W ranks: the sums exact" \
	run_job 13 fp32 3 262144 --mirror eth0
mirrored=$(grep -ho '[0-9]* pushes mirrored' "$log"/job13-w*.log | awk '{ s += $1 } END { print s + 0 }')
redirected=$(grep -ho '[0-9]* results went there' "$log"/job13-w*.log | awk '{ s += $1 } END { print s + 0 }')
check "replayed pushes from another Ethernet address: no result went there ($redirected results for $mirrored replays)" \
	test "$mirrored" -gt 0 -a "$redirected" -eq 0


# a storm of malformed and foreign packets during a run. (IP fragments are
# sent too but not expected: net_af_packet's socket asks the kernel to
# reassemble them, so they never reach pboxd on this port type; the unit
# tests cover NIC_DROP_IP_FRAG.)
declare -A before
for k in drop_magic drop_version drop_op drop_dtype drop_flags drop_len drop_udp_port \
	ss_mac ss_no_job ss_rank ss_chunk ss_frag ss_len ss_addr drop_ip_csum drop_ip_frag drop_ip_proto \
	drop_ip_hdr drop_ethertype drop_ip_dst drop_short drop_src icmp_replies; do
	before[$k]=$(stat "$k")
done
N=200
(
	sleep 1.5
	wns 1 "$client" --box "$boxaddr" --job 6 --token $((6 * 7919)) --n "$W" --rank 1 \
		--ranks "$(rank_addrs)" --storm "$N" --storm-raw eth0 --quiet >"$log/storm.log" 2>&1
) &
storm_pid=$!
check "fp32 with a storm of malformed packets alongside: exact" run_job 6 fp32 30 "$BYTES"
wait "$storm_pid"
check "storm client ran" grep -q STORMRAW "$log/storm.log"
for pair in magic:drop_magic version:drop_version op:drop_op dtype:drop_dtype flags:drop_flags \
	len:drop_len udp_port:drop_udp_port mac:ss_mac no_job:ss_no_job rank:ss_rank \
	chunk:ss_chunk frag:ss_frag short_push:ss_len spoof_port:ss_addr spoof_ip:ss_addr \
	ip_csum:drop_ip_csum \
	ip_proto:drop_ip_proto ip_hdr:drop_ip_hdr ethertype:drop_ethertype ip_dst:drop_ip_dst \
	short:drop_short; do
	k=${pair%%:*}
	c=${pair#*:}
	sent=$(grep -o " $k=[0-9]*" "$log/storm.log" | head -1 | cut -d= -f2)
	got=$(($(stat "$c") - ${before[$c]}))
	check "storm: $k x ${sent:-?} counted as $c (+$got)" test -n "$sent" -a "$got" -ge "${sent:-1}"
done
sent=0
for k in src_bcast src_mcast src_zero icmp_src_bcast arp_src_zero; do
	sent=$((sent + $(grep -o " $k=[0-9]*" "$log/storm.log" | head -1 | cut -d= -f2)))
done
got=$(($(stat drop_src) - ${before[drop_src]}))
check "storm: $sent pushes, ICMP echoes and ARP requests from broadcast, multicast and zero sources dropped as drop_src (+$got), none answered (ICMP replies +$(($(stat icmp_replies) - ${before[icmp_replies]})))" \
	test "$got" -ge "$sent" -a "$sent" -gt 0 -a "$(stat icmp_replies)" = "${before[icmp_replies]}"

# No client can stall the control plane: one connection that sends 20,000
# STATS and never reads, and 100 idle connections from one address, while
# another host registers a job and runs it; then a registrar's host cut off
# (every frame of its link dropped) and its job freed by keepalive.
# (from the box's namespace, 198.18.0.1: an address no rank of the job uses)
abuse="$here/ctl-abuse.py"
ip netns exec "$box_ns" python3 "$abuse" noread "${boxaddr%:*}" "${boxaddr#*:}" 20000 20 "$log/box.key" \
	>"$log/noread.log" 2>&1 &
noread_pid=$!
sleep 0.5
ip netns exec "$box_ns" python3 "$abuse" idle "${boxaddr%:*}" "${boxaddr#*:}" 100 14 "$log/box.key" \
	>"$log/idle.log" 2>&1 &
idle_pid=$!
sleep 2
t0=$(date +%s.%N)
check "while one client does not read and 100 idle connections are held: a job registers and runs, every sum exact" \
	run_job 7 fp32 5 "$BYTES"
t1=$(date +%s.%N)
took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
wait "$noread_pid" "$idle_pid"
sed 's/^/        /' "$log/noread.log" "$log/idle.log"
check "the client that did not read was dropped, not waited for (the job above took $took s)" \
	grep -q 'dropped=yes' "$log/noread.log"
check "one address holds at most 4 connections yet to prove the box key: each of 99 idle ones took its place, the oldest closed with ERR (evicted >= 90); all 99 closed, the one that proved the key is not" \
	bash -c "grep -qE 'IDLE open=99 refused=0 closed=99 evicted=(9[0-9]) authed=open' '$log/idle.log'"
grep -h "control connection from .*${boxaddr%:*}\|did not read" "$log/pboxd.log" | sed 's/^/        /'
check "pboxd says why it dropped them" bash -c "grep -q 'did not read its replies' '$log/pboxd.log'"

# nobody holds the box's doors without the key: 18 addresses x 16
# connections dripping an endless AUTH line one byte every 0.5 s (each one
# the box closes opened again 50 ms later), then 18 x 8 dripping an HTTP header
# to /metrics; meanwhile a key holder connects every 0.25 s (from one of those
# addresses and from another), and Prometheus scrapes every 0.25 s
srcs=$(seq -s, -f '198.18.0.%g' 10 27)
ip -n "$box_ns" link set lo up
for a in ${srcs//,/ }; do ip -n "$box_ns" addr add "$a/32" dev lo; done
ip netns exec "$box_ns" python3 "$abuse" drip "${boxaddr%:*}" "${boxaddr#*:}" 6 "$log/box.key" "$srcs" \
	>"$log/drip.log" 2>&1
ip netns exec "$box_ns" python3 "$abuse" httpdrip "${boxaddr%:*}" 9571 6 "$srcs" >>"$log/drip.log" 2>&1
sed 's/^/        /' "$log/drip.log"
check "control plane under a slow drip from 18 addresses x 16 connections: every key holder's handshake taken, no connection open unproved past 2 s (+0.1 s poll, +0.5 s drip)" \
	bash -c "grep -qE '^DRIP .* keyholder=([1-9][0-9]*)/\\1\$' '$log/drip.log' &&
		 awk '/^DRIP/ { split(\$3, a, \"=\"); exit !(a[2] <= 2.8) }' '$log/drip.log'"
check "/metrics under a slow header drip from 18 addresses x 8 connections: every scrape answered" \
	bash -c "grep -qE '^HTTPDRIP .* scrapes=([1-9][0-9]*)/\\1\$' '$log/drip.log'"

# a registrar's host cut off: its job freed by the box within the stated 11 s
wns 0 "$client" --box "$boxaddr" --job 8 --token 1 --n "$W" --rank 0 --register \
	--ranks "$(rank_addrs)" --hold --rounds 0 >"$log/cut.log" 2>&1 &
cut_pid=$!
for _ in $(seq 50); do grep -q registered "$log/cut.log" 2>/dev/null && break; sleep 0.1; done
check "a registrar holds job 8" test "$(stat jobs)" = 1
wns 1 curl -sf "$murl" >"$log/metrics-job.txt"
check "/metrics with a job registered: its workers, state bytes and drops by reason, and promtool still passes" \
	bash -c "grep -q '^pbox_job_workers{job=\"8\",dtype=\"fp32\"} $W\$' '$log/metrics-job.txt' &&
		 grep -q '^pbox_job_state_bytes{job=\"8\",dtype=\"fp32\"} [1-9]' '$log/metrics-job.txt' &&
		 grep -q '^pbox_job_drops_total{job=\"8\",reason=\"addr\"} 0\$' '$log/metrics-job.txt' &&
		 promtool check metrics <'$log/metrics-job.txt' >/dev/null 2>&1"
pbox_net_impair "$tag" w0 100 0 || bad "cut w0 off"
t0=$(date +%s.%N)
freed=
for _ in $(seq 300); do
	if [ "$(stat jobs)" -eq 0 ] && [ "$(stat state_bytes_used)" -eq 0 ]; then
		freed=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
		break
	fi
	sleep 0.1
done
check "the cut-off registrar's job freed by keepalive in ${freed:-more than 30} s (stated: within 11 s, +1 s for the poll)" \
	awk -v t="${freed:-99}" 'BEGIN { exit !(t <= 12) }'
pbox_net_impair "$tag" w0 0 0
kill "$cut_pid" 2>/dev/null
wait "$cut_pid" 2>/dev/null

# admission
wns 2 "$client" --box "$boxaddr" --job 9 --token 1 --n "$W" --rank 0 --register --ranks "$(rank_addrs)" --rounds 0 \
	--bytes 1073741824 >"$log/refuse.log" 2>&1
rc=$?
check "a job over the memory budget is refused with a message (exit $rc)" \
	bash -c "[ $rc -eq 3 ] && grep -q 'over the memory budget' $log/refuse.log"
sed 's/^/        /' "$log/refuse.log"

echo "  pboxctl cores after the runs:"
"$build/bin/pboxctl" --prefix "$prefix" cores | sed 's/^/        /'

# a port with two queues but no flow steering (net_tap on this kernel, which
# lacks cls_flower): pboxd must fall back to one queue, cores owning ports whole
cat >"$log/tap.ini" <<EOF
[management]
address = 198.18.0.1
port = 9573
key_file = $log/box.key
[telemetry]
metrics_port = 9574
[cores]
list = 0-1
[memory]
hugepage_budget = 128M
[data]
mtu = 1500
[polling]
mode = adaptive
[port t0]
vdev = net_tap0,iface=pbox-t0
ip = 198.18.9.1
bandwidth = 10G
EOF
timeout 20 ip netns exec "$box_ns" "$build/bin/pboxd" --file-prefix "$prefix-tap" "$log/tap.ini" \
	>"$log/tap.log" 2>&1 &
tap_pid=$!
for _ in $(seq 100); do grep -q "pboxd: serving" "$log/tap.log" && break; sleep 0.1; done
kill -TERM "$tap_pid" 2>/dev/null
wait "$tap_pid"
tap_rc=$?
rm -rf "/var/run/dpdk/$prefix-tap"
# (where the kernel can steer, the port keeps both queues instead)
check "a 2-queue port: steered, or whole ports when it cannot steer; serves (exit $tap_rc)" \
	bash -c "[ $tap_rc -eq 0 ] && { grep -q 'serving 2 endpoints' $log/tap.log ||
		{ grep -q 'cores will own the port whole' $log/tap.log &&
		  grep -q 'serving 1 endpoints' $log/tap.log; }; }"
sed -n 's/^pboxd: \[port t0\]: /        /p' "$log/tap.log"

# clean stop
kill -TERM "$pboxd_pid"
for _ in $(seq 50); do kill -0 "$pboxd_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pboxd_pid" 2>/dev/null; then
	bad "pboxd stops within 5 s of SIGTERM"
else
	wait "$pboxd_pid"
	check "pboxd stops cleanly on SIGTERM (exit $?)" grep -q "pboxd: stopping" "$log/pboxd.log"
fi
pboxd_pid=

echo "integration: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
