# Shared by tests/net/integration.sh and tests/net/demo.sh: the emulated
# cluster (a box with 4 ports and W workers), pboxd on it, and jobs of
# pbox-client runs. Source it after setting W; it installs the teardown.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
. "$here/pbox-net.sh"

ROUNDS=${ROUNDS:-100}
BYTES=${BYTES:-16777216}
W=${W:-4}
tag="it$$"
prefix="pbox-it$$"
log=$(mktemp -d /tmp/pbox-it.XXXXXX)
# the box key: pboxd's [management] key_file; registrars (pbox-client,
# libpbox's rank 0, pboxctl --box) find it through PBOX_BOX_KEY_FILE
pbox_keygen "$log/box.key"
export PBOX_BOX_KEY_FILE=$log/box.key
pbox_box_ini "$src/config/examples/box-emulated.ini" "$log/box-emulated.ini" "$log/box.key"
cfg="$log/box-emulated.ini"
export PBOXNET_OBJDIR=$log
box_ns=$(pbox_ns "$tag" box)
ctl="$build/bin/pboxctl --prefix $prefix --all"
client="$build/bin/pbox-client"
boxaddr=198.18.0.1:9570
pboxd_pid=
job=0
. "$src/tests/check.sh"

prom_pid=
cleanup() {
	[ -n "$prom_pid" ] && kill "$prom_pid" 2>/dev/null && wait "$prom_pid" 2>/dev/null
	[ -n "$pboxd_pid" ] && kill "$pboxd_pid" 2>/dev/null && wait "$pboxd_pid" 2>/dev/null
	[ -n "${pboxd2_pid:-}" ] && kill "$pboxd2_pid" 2>/dev/null && wait "$pboxd2_pid" 2>/dev/null
	pbox_net_down "$tag"
	rm -rf "/var/run/dpdk/$prefix" "/var/run/dpdk/${prefix}b" /dev/hugepages/"$prefix"*
	if [ "$fail" -ne 0 ] || [ -n "${KEEP_LOGS:-}" ]; then
		echo "integration: logs kept in $log"
	else
		rm -rf "$log"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

stat() { $ctl stats | awk -v k="$1" '$1 == k { print $2 }'; }

# jobs_gone: the box holds no job and no job state (within 5 s)
jobs_gone() {
	for _ in $(seq 50); do
		[ "$(stat jobs)" -eq 0 ] && [ "$(stat state_bytes_used)" -eq 0 ] && return 0
		sleep 0.1
	done
	return 1
}
wns() { ip netns exec "$(pbox_ns "$tag" "w$1")" "${@:2}"; }

# Every worker's data address, rank order: what a registrar tells the box.
# (jport: the workers' UDP port, 9700 unless a test runs two jobs at once)
jport=9700
rank_addrs() {
	local i out=
	for ((i = 0; i < W; i++)); do out+="${out:+,}198.18.100.$((i + 1)):$jport"; done
	echo "$out"
}

# run_job JOB DTYPE ROUNDS BYTES [extra client args]: a registrar holds the
# job while W clients run; true when every client verified every sum.
run_job() {
	local job=$1 dt=$2 rounds=$3 bytes=$4 i rc=0 reg
	shift 4
	local common=(--box "$boxaddr" --job "$job" --token "$((job * 7919))" --n "$W" --dtype "$dt"
		--bytes "$bytes" --port "$jport" --quiet)
	# not through a function: $! must be the client itself
	ip netns exec "$(pbox_ns "$tag" w0)" "$client" "${common[@]}" --rank 0 --register \
		--ranks "$(rank_addrs)" --hold \
		--rounds 0 >"$log/reg$job.log" 2>&1 &
	reg=$!
	for _ in $(seq 50); do grep -q registered "$log/reg$job.log" 2>/dev/null && break; sleep 0.1; done
	local pids=()
	for ((i = 0; i < W; i++)); do
		wns "$i" "$client" "${common[@]}" --rank "$i" --rounds "$rounds" "$@" \
			>"$log/job$job-w$i.log" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	# the job is still registered here: its counters, for whoever asks
	$ctl jobs >"$log/jobs$job.txt" 2>&1
	kill "$reg" 2>/dev/null
	wait "$reg" 2>/dev/null
	cat "$log"/job"$job"-w*.log | sed 's/^/        /'
	return $rc
}


# prom_start HOST TARGET: a Prometheus server in HOST's namespace scraping
# TARGET (host:port) every second, its API on 127.0.0.1:9090 there; true
# once it is ready. prom_query HOST PROMQL: the first sample's value.
prom_start() {
	local ns
	ns=$(pbox_ns "$tag" "$1")
	printf 'global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: pboxd\n    static_configs:\n      - targets: ["%s"]\n' \
		"$2" >"$log/prometheus.yml"
	ip netns exec "$ns" prometheus --config.file="$log/prometheus.yml" \
		--storage.tsdb.path="$log/prom-data" --web.listen-address=127.0.0.1:9090 \
		>"$log/prometheus.log" 2>&1 &
	prom_pid=$!
	for _ in $(seq 100); do
		ip netns exec "$ns" curl -sf http://127.0.0.1:9090/-/ready >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	tail -5 "$log/prometheus.log"
	return 1
}
prom_query() {
	ip netns exec "$(pbox_ns "$tag" "$1")" curl -sf --data-urlencode "query=$2" \
		http://127.0.0.1:9090/api/v1/query |
		python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "none")'
}

need_root() {
	[ "$(id -u)" -eq 0 ] || { echo "$1: needs root (network namespaces, hugepages)"; exit 1; }
	grep -q hugetlbfs /proc/mounts || { echo "$1: no hugetlbfs mount"; exit 1; }
}

# harness NAME: a perf harness's start, once N, B and ports are set: root and
# hugepages, $bench (pbox-bench), the workers' rate $wbw = B, and $out
# (OUT, or BUILD/perf/NAME) with $csv = $out/NAME.csv in it
harness() {
	need_root "$1"
	bench="$build/bin/pbox-bench"
	wbw=$B
	out=${OUT:-$build/perf/$1}
	mkdir -p "$out"
	csv="$out/$1.csv"
}

# start_box: pboxd in the box namespace, up and serving, or false.
# (up to 30 s: on a loaded 2-core host, a pboxd started right after one was
# killed once took more than 10 s to map and fill its hugepages)
start_box() {
	local t0=$SECONDS
	# emptied here, not by the background job's redirection: the wait below
	# could otherwise read the previous pboxd's "serving" before the new one
	# truncates the file (a worker.sh run under load: "nothing for 0 s")
	: >"$log/pboxd.log"
	ip netns exec "$box_ns" "$build/bin/pboxd" --file-prefix "$prefix" "$cfg" >>"$log/pboxd.log" 2>&1 &
	pboxd_pid=$!
	for _ in $(seq 300); do grep -q "pboxd: serving" "$log/pboxd.log" && break; sleep 0.1; done
	if ! grep -q "pboxd: serving" "$log/pboxd.log"; then
		cat "$log/pboxd.log"
		bad "pboxd starts (nothing for $((SECONDS - t0)) s)"
		return 1
	fi
	[ $((SECONDS - t0)) -lt 5 ] || echo "        (pboxd took $((SECONDS - t0)) s to start)"
	return 0
}

# box_metric NAME: a family of pboxd's /metrics (its counters since it
# started), summed over its labels
box_metric() {
	ip netns exec "$box_ns" curl -sf "http://${boxaddr%:*}:9571/metrics" |
		awk -v f="$1" '$1 ~ "^" f "({|$)" { s += $NF } END { printf "%d\n", s }'
}

# bench_ran NAME WHAT ARGS...: bench_all NAME ARGS... with its output left
# in the ranks' logs; when a rank fails, their errors and a FAIL for WHAT
bench_ran() {
	local name=$1 what=$2
	shift 2
	bench_all "$name" "$@" >/dev/null && return 0
	grep -h "pbox-bench:" "$log/$name"-w*.log | sed 's/^/  /'
	bad "$what: a rank failed"
	return 1
}

# slowest NAME [KEY]: KEY's (mean_ms's) largest value among the RESULT
# lines of run NAME's ranks: the slowest rank's
slowest() {
	grep -h "^RESULT" "$log/$1"-w*.log | tr ' ' '\n' |
		awk -F= -v k="${2:-mean_ms}" '$1 == k { print $2 }' | sort -g | tail -1
}

# bench_sum NAME WORD: a counter summed over the ranks' "bench:" lines of
# run NAME (the number before WORD)
bench_sum() {
	awk -v k="$2" '$1 == "bench:" { for (i = 2; i < NF; i++) if ($(i + 1) == k) s += $i }
		END { printf "%d\n", s }' "$log/$1"-w*.log
}

# ---- libpbox workers (set N, wbw and bench first) ----------------------------

# Shaped clusters: every worker link at $wbw Mb/s, the box's first $ports
# ports at k·wbw/ports each, so the box offers k·B.
ports=${ports:-2}

# box_cfg MBPS_PER_PORT: the emulated box with its first $ports ports at that
# rate. Its af_packet ports send through the kernel's qdisc layer
# (qdisc_bypass=0), so that the tbf and the loss program on the box's own
# interfaces see what the box sends, as they see what it receives: the box's
# sends are shaped to k·B and lossy like every other host's.
box_cfg() {
	awk -v rate="$1M" -v last="$ports" '/^\[port p[0-9]+\]/ && substr($2, 2) + 0 >= last { exit }
		/^bandwidth/ { $0 = "bandwidth = " rate }
		/^vdev = net_af_packet/ && !/qdisc_bypass/ { $0 = $0 ",qdisc_bypass=0" } { print }' \
		"$log/box-emulated.ini" >"$log/box.ini"
	cfg="$log/box.ini"
}

# shape K: workers' links at B, the box's ports at k·B/ports (both
# directions; B when k = 0, the box idle); queues deep enough for a
# worker's whole credit. No box port's bucket holds less time of its line
# than a worker's (128 KiB at B), nor fewer bytes: tbf sends from its queue
# when the kernel's timer and softirq get round to it, and a wait longer
# than the bucket's time is line time lost, which a real NIC, draining its
# ring by itself, never loses. With 128 KiB everywhere a box port at 1.5·B
# (n = 8, k = 6) tolerated 7 ms to the workers' 10.5 and lost 2-5% of Fig.
# 12 to the waits of this shared 2-core host (its egress idle 36-127 ms an
# iteration while its ingress ran at line rate); 1.5·128 KiB made it 1.02.
# A full bucket puts a link at most its bucket ahead of its line, once an
# iteration (the 128 KiB every link had before). A sender that does not pace
# (Gloo's TCP) spends it after each pause; libpbox under torch_ranks is told
# the bucket ([tuning] pace_burst; PACE_BURST=SIZE says another), so that
# it spends it too.
bucket_kb=128
pace_burst=
shape() {
	local r p rate=$(($1 * wbw / ports > 0 ? $1 * wbw / ports : wbw))
	pace_burst=${PACE_BURST:-${bucket_kb}K}
	for ((r = 0; r < N; r++)); do
		pbox_net_shape "$tag" "w$r" tbf rate "${wbw}mbit" burst "${bucket_kb}kb" limit 16mb || return 1
	done
	for ((p = 0; p < ports; p++)); do
		box_port_shape "$p" "$rate" || return 1
	done
}

# box_port_shape P MBPS: the box's port P at MBPS both ways, its bucket
# 128 KiB or the workers' time of line, the larger (see shape)
box_port_shape() {
	local kb=$((bucket_kb * $2 / wbw > bucket_kb ? bucket_kb * $2 / wbw : bucket_kb))

	pbox_net_shape "$tag" "box-p$1" tbf rate "${2}mbit" burst "${kb}kb" limit 16mb
}

restart_box() { # MBPS_PER_PORT
	[ -n "$pboxd_pid" ] && kill "$pboxd_pid" 2>/dev/null && wait "$pboxd_pid" 2>/dev/null
	pboxd_pid=
	box_cfg "$1"
	start_box
}

# worker_cfgs WITH_BOX [TUNING...]: one configuration per rank, $N ranks at
# $wbw Mb/s, into $log/wR.ini
worker_cfgs() {
	local with_box=$1 r q
	shift
	for ((r = 0; r < N; r++)); do
		{
			printf '[worker]\nrank = %d\nworld_size = %d\n' "$r" "$N"
			printf '[job]\nid = 42\ntoken = 987654321\n'
			[ "$with_box" = 1 ] && printf '[box]\ncontrol = %s\n' "$boxaddr"
			printf '[data]\naddress = 198.18.100.%d\nbandwidth = %dM\nmtu = 9000\n' $((r + 1)) "$wbw"
			printf '[tuning]\n'
			for t in "$@"; do printf '%s\n' "$t"; done
			printf '[peers]\n'
			for ((q = 0; q < N; q++)); do printf '%d = 198.18.100.%d:9700\n' "$q" $((q + 1)); done
		} >"$log/w$r.ini"
	done
}

# bench NAME ARGS...: pbox-bench on every rank; true when all verified
bench_all() {
	local name=$1 r rc=0 pids=()
	shift
	for ((r = 0; r < N; r++)); do
		wns "$r" "$bench" --config "$log/w$r.ini" "$@" $([ "$r" = 0 ] && echo --layout) \
			>"$log/$name-w$r.log" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	grep -h "^RESULT\|pbox-bench:" "$log"/"$name"-w*.log | sed 's/^/        /'
	return $rc
}


# run_past_two NAME ITERS [ARGS...]: pbox-bench (SIZE, 8 tensors) on every
# rank, $pids[r] each rank's own process (started here, not in a function's
# subshell, so that $! is pbox-bench itself), once every rank is past its
# second iteration
run_past_two() {
	local name=$1 iters=$2 r
	shift 2
	pids=()
	for ((r = 0; r < N; r++)); do
		ip netns exec "$(pbox_ns "$tag" "w$r")" "$bench" --config "$log/w$r.ini" --size "$SIZE" \
			--tensors 8 --iters "$iters" "$@" >"$log/$name-w$r.log" 2>&1 &
		pids+=($!)
	done
	for _ in $(seq 100); do
		[ "$(grep -l 'iteration 2/' "$log"/"$name"-w*.log 2>/dev/null | wc -l)" -eq "$N" ] && break
		sleep 0.2
	done
}

# ---- PyTorch on the cluster (set N and wbw first) ------------------------------

py=/usr/bin/python3 # Debian's python3-torch

# torch_ranks MODE NAME PORT LIMIT SCRIPT ARGS...: SCRIPT ARGS... on every
# worker host, each rank under its own torchrun as on a real cluster
# (--nnodes N, w0 the master), for at most LIMIT seconds; every MODE but
# gloo goes through pboxd (PBOX_BOX), the workers at $wbw Mb/s, pacing in
# bursts of the links' bucket once shaped (see shape). Logs in
# $log/NAME-hI.log. True when every rank finished; else their last words.
torch_ranks() {
	local mode=$1 name=$2 port=$3 limit=$4 i rc=0 pids=()
	local envs=(PYTHONPATH="$build/python" GLOO_SOCKET_IFNAME=eth0 PBOX_DATA_BANDWIDTH="${wbw}M")
	shift 4
	[ "$mode" != gloo ] && [ -n "$boxaddr" ] && envs+=(PBOX_BOX="$boxaddr")
	[ -n "$pace_burst" ] && envs+=(PBOX_TUNING_PACE_BURST="$pace_burst")
	for ((i = 0; i < N; i++)); do
		# Debian's torch 1.13 under Python 3.11: torchrun's launcher dies
		# without --redirects and --tee
		wns "$i" env "${envs[@]}" timeout "$limit" $py -m torch.distributed.run --redirects 2 \
			--tee 2 --nnodes "$N" --node_rank "$i" --nproc_per_node 1 \
			--master_addr 198.18.100.1 --master_port "$port" "$@" >"$log/$name-h$i.log" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	[ "$rc" -eq 0 ] && return 0
	for ((i = 0; i < N; i++)); do
		grep -v '^\[default[0-9]\]:\s*$' "$log/$name-h$i.log" | grep -v '^ ' | tail -6 |
			sed "s/^/        h$i: /"
	done
	return 1
}

# box_state_ratio STATE LAID BOX GRADS CHUNK: the box's STATE bytes over two
# buffers of its share of the model, in whole CHUNKs: of the LAID bytes pbox
# laid out (BOX of them on the box), the GRADS bytes of gradients' part (all
# of it where pbox laid out less than the gradients: buckets of one shape
# share a key); prints the ratio and the share, or nothing without a figure
box_state_ratio() {
	awk -v s="${1:-0}" -v l="${2:-0}" -v b="${3:-0}" -v g="${4:-0}" -v c="${5:-0}" 'BEGIN {
		m = l > 0 ? b * (g < l ? g : l) / l : 0
		if (m > 0 && c > 0) printf "%.3f %d\n", s / (2 * int((m + c - 1) / c) * c), m }'
}

# torch_ddp BACKEND MODEL PORT: tests/python/ddp_train.py through
# torch_ranks; logs in $log/BACKEND-MODEL-hI.log, parameters in
# $log/BACKEND-MODEL-R.pt.
torch_ddp() {
	torch_ranks "$1" "$1-$2" "$3" 300 "$src/tests/python/ddp_train.py" "$1" "$log/$1-$2" "$2"
}
