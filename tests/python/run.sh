#!/usr/bin/env bash
# pbox from PyTorch (make test): DDP with 4 ranks under torchrun on loopback,
# without a box, on the "pbox" backend and on Gloo; the final parameters are
# equal on every rank and within 1e-4 of Gloo's. Debian's python3-torch
# (1.13) under /usr/bin/python3.
#   tests/python/run.sh BUILD
set -uo pipefail
build=${1:-build}
py=${PY:-/usr/bin/python3} # PY: another python with torch (a GPU host's)
out=$(mktemp -d /tmp/pbox-py.XXXXXX)
trap 'rm -rf "$out"' EXIT
fails=0 passes=0
ok() { echo "  PASS  $*"; passes=$((passes + 1)); }
bad() { echo "  FAIL  $*"; fails=$((fails + 1)); }

if ! $py -c 'import torch' 2>/dev/null; then
	echo "python: no torch for $py (deploy/host-setup.sh installs python3-torch)"
	exit 1
fi
export PYTHONPATH=$PWD/$build/python
abs_build=$(cd "$build" && pwd)
# Debian's torch 1.13 under Python 3.11: torchrun's launcher dies without
# --redirects and --tee (README: "Using pbox from PyTorch")
run() { # MODE MODEL PORT [NAME]: NAME (MODE-MODEL) its output's prefix
	local name=${4:-$1-$2}
	timeout 300 $py -m torch.distributed.run --redirects 2 --tee 2 --nproc_per_node 4 \
		--master_addr 127.0.0.1 --master_port "$3" tests/python/ddp_train.py "$1" \
		"$out/$name" "$2" >"$out/$name.log" 2>&1 && return 0
	# the ranks' own words first (torchrun's summary leaves them out), then its
	grep -h 'Error\|error:\|libpbox:\|pbox:' "$out/$name.log" | grep -v 'ChildFailedError\|^\s*$' |
		sort -u | head -12 | sed 's/^/        /'
	grep -v '^\[default[0-9]\]:\s*$' "$out/$name.log" | grep -v '^ ' | tail -6 | sed 's/^/        /'
	return 1
}
# compare RUN [REF]: RUN's parameters equal on every rank, within 1e-4 of REF's
compare() { $py tests/python/compare.py "$out" "$@"; }
# the compressors (appliance/ss/comp.h): every scheme on every ISA here,
# bit for bit with the torch reference, and a model trained through them
echo "python: gradient compressors against tests/python/comp_ref.py"
if (cd tests/python && $py comp_check.py "$abs_build") >"$out/comp-check.log" 2>&1; then
	ok "compressors (sign, topk, randk, bf16, fp16, none) bit-exact with the reference: $(tail -1 "$out/comp-check.log" | sed 's/^comp_check: //')"
else
	bad "compressors against the reference"
	tail -5 "$out/comp-check.log" | sed 's/^/        /'
fi
if (cd tests/python && $py comp_train.py "$abs_build") >"$out/comp-train.log" 2>&1; then
	ok "trained through each compressor: $(grep RESULT "$out/comp-train.log")"
else
	bad "training through the compressors"
	tail -8 "$out/comp-train.log" | sed 's/^/        /'
fi
echo "python: DDP, 4 ranks under torchrun on loopback, no box"
n=0
for m in fp32 mixed; do
	n=$((n + 1))
	if run pbox $m $((29570 + n)); then
		ok "DDP, $m parameters, on the pbox backend trains ($(grep -o 'pbox: .* per step' "$out/pbox-$m.log"))"
	else
		bad "DDP, $m parameters, on the pbox backend"
	fi
done
run gloo fp32 29575 || bad "DDP on Gloo"
compare pbox-fp32 gloo-fp32 && ok "fp32: final parameters equal on every rank, within 1e-4 of Gloo's" ||
	bad "fp32: final parameters equal on every rank, within 1e-4 of Gloo's"
# the hook with compression: hook_state(compression="sign") makes its pbox
# group's job compress every fp32 bucket
n=$((n + 1))
if DDP_HOOK_COMPRESSION=sign run hook fp32 $((29590 + n)) hook-sign && compare hook-sign &&
	run hook fp32 $((29590 + n + 1)) hook-plain && ! compare hook-sign hook-plain >/dev/null; then
	ok "DDP with pbox.torch.allreduce_hook and hook_state(compression=\"sign\"): trains, equal on every rank, not the uncompressed hook's"
else
	bad "DDP with the hook and hook_state(compression=\"sign\")"
fi
# hook_state(compression="topk:gather"): every rank's top-k all-gathered and
# summed at each rank ([job] compression_sum = gather), against the top-k
# the summation services compress again: both train, equal on every rank,
# and apart
n=$((n + 2))
if DDP_HOOK_COMPRESSION=topk run hook fp32 $((29590 + n)) hook-topk && compare hook-topk &&
	DDP_HOOK_COMPRESSION=topk:gather run hook fp32 $((29590 + n + 1)) hook-topk-gather &&
	compare hook-topk-gather && ! compare hook-topk hook-topk-gather >/dev/null; then
	ok "DDP with hook_state(compression=\"topk:gather\"): trains, equal on every rank, not the summation services' top-k"
else
	bad "DDP with hook_state(compression=\"topk:gather\")"
fi
n=$((n + 1))
# auto MODE NAME REF PORT: hook_state(compression="auto") in MODE, ByteComp's
# decision over DDP's buckets from the backward pass the hook measures and
# the link's modelled cost: at 10 Mb/s (NAME-slow, decided again every
# step) EFSignSGD pays at each of the last 3 decisions (every rank equal,
# not REF's parameters), at 10 Tb/s (NAME-fast, on PORT + 1) it does not
# (REF's parameters)
auto() {
	DDP_HOOK_COMPRESSION=auto DDP_HOOK_REDECIDE=1 PBOX_DATA_BANDWIDTH=10M run "$1" fp32 "$4" "$2-slow" &&
		compare "$2-slow" && ! compare "$2-slow" "$3" >/dev/null &&
		[ "$(grep -c 'compression="auto"): 1 of 1 fp32 buckets compressed' "$out/$2-slow.log")" = 3 ] &&
		DDP_HOOK_COMPRESSION=auto PBOX_DATA_BANDWIDTH=10T run "$1" fp32 $(($4 + 1)) "$2-fast" &&
		compare "$2-fast" "$3" >/dev/null &&
		grep -q 'compression="auto"): 0 of 1 fp32 buckets compressed' "$out/$2-fast.log"
}
if auto hook hook-auto hook-plain 29565; then
	ok "DDP with hook_state(compression=\"auto\"): ByteComp's decision over the measured buckets, the same on every rank: compressed on a 10 Mb/s link (decided again at each of the last 3 steps), not on a 10 Tb/s one"
else
	bad "DDP with hook_state(compression=\"auto\")"
fi
n=$((n + 1))
# DDP on the pbox backend, the hook on its default group: compression="auto"
# chooses which buckets take the group's own [job] compression
if PBOX_JOB_COMPRESSION=sign auto pboxhook pboxhook-auto pbox-fp32 29567; then
	ok "DDP on the pbox backend with hook_state(dist.group.WORLD, compression=\"auto\"): the group's [job] compression on a 10 Mb/s link, none on a 10 Tb/s one"
else
	bad "DDP on the pbox backend with hook_state(dist.group.WORLD, compression=\"auto\")"
fi
n=$((n + 1))
# [job] compression (PBOX_JOB_COMPRESSION): DDP's buckets travel compressed
# with error feedback, each SS_GPU decompresses, sums and compresses the sum:
# every rank ends with the same parameters, not those of the full-width run
for sch in sign topk randk; do
	n=$((n + 1))
	if PBOX_JOB_COMPRESSION=$sch run pbox fp32 $((29590 + n)) pbox-$sch && compare pbox-$sch &&
		! compare pbox-$sch pbox-fp32 >/dev/null; then
		ok "DDP with [job] compression = $sch: trains, parameters equal on every rank, not the uncompressed run's ($(grep -o 'loss [0-9.]*' "$out/pbox-$sch.log" | tail -1))"
	else
		bad "DDP with [job] compression = $sch"
	fi
done
# [job] deterministic (PBOX_JOB_DETERMINISTIC): every sum added in rank
# order by whichever SS_GPU holds it: two runs of the script end with
# bitwise the same parameters (runs without it differ in the last bits)
if PBOX_JOB_DETERMINISTIC=on run pbox fp32 29561 pbox-det1 &&
	PBOX_JOB_DETERMINISTIC=on run pbox fp32 29562 pbox-det2 &&
	COMPARE_TOL=0 compare pbox-det1 pbox-det2 >/dev/null; then
	ok "DDP with [job] deterministic = on, run twice: the same parameters bit for bit ($(compare pbox-det1 pbox-fp32 | sed 's/^ *//; s/largest difference/without it, a run differs/'))"
else
	bad "DDP with [job] deterministic = on, run twice: the same parameters bit for bit"
fi
# local aggregation on CPU tensors: the 4 loopback ranks one machine, the
# leader alone in the network job; its sharded collectives (DDP's
# construction broadcasts and all-gathers) through pbox too
if PBOX_WORKER_LOCAL_AGGREGATION=on run pbox fp32 29563 pbox-local && compare pbox-local gloo-fp32 &&
	! grep -q 'broadcast goes to Gloo' "$out/pbox-local.log"; then
	ok "DDP with [worker] local_aggregation = on (4 ranks as one machine): within 1e-4 of Gloo's; its broadcasts through pbox"
else
	bad "DDP with [worker] local_aggregation = on"
fi
compare pbox-mixed && ok "fp32 and bf16 in one group: final parameters equal on every rank" ||
	bad "fp32 and bf16 in one group: final parameters equal on every rank"
# ByteScheduler's plugin: no DDP, each parameter summed as its gradient is
# ready and updated before its module's next forward; the same parameters
# as DDP's (SGD with momentum: per-parameter state), with micro-batches
# under no_sync() and a gradient clip that binds (0.05: the clipped run
# differs from the unclipped one), and with a bf16 layer; those two with
# rank 0 ordering every rank's sends ([job] leader_order), as perf-train
# runs it
if run sched fp32 29584 && compare sched-fp32 gloo-fp32; then
	ok "pbox.torch.ScheduledOptimizer: parameters equal on every rank, within 1e-4 of DDP's on Gloo ($(grep -o 'sched: .* per step' "$out/sched-fp32.log"))"
else
	bad "pbox.torch.ScheduledOptimizer against DDP on Gloo"
fi
if DDP_ACCUM=2 DDP_CLIP=0.05 run gloo fp32 29585 gloo-accum && ! compare gloo-accum gloo-fp32 >/dev/null &&
	PBOX_JOB_LEADER_ORDER=on DDP_ACCUM=2 DDP_CLIP=0.05 run sched fp32 29586 sched-accum &&
	compare sched-accum gloo-accum; then
	ok "ScheduledOptimizer with 2 micro-batches (no_sync()) and clip_grad_norm_(0.05), in rank 0's order of sends: within 1e-4 of DDP's doing the same"
else
	bad "ScheduledOptimizer with no_sync() and clip_grad_norm_() against DDP's"
fi
if PBOX_JOB_LEADER_ORDER=on run sched mixed 29587 && compare sched-mixed; then
	ok "ScheduledOptimizer with fp32 and bf16 parameters, in rank 0's order of sends: final parameters equal on every rank"
else
	bad "ScheduledOptimizer with fp32 and bf16 parameters"
fi
# the hook on a Gloo group, and torch's own PowerSGD hook on the pbox group
if run hook fp32 29578 && compare hook-fp32 gloo-fp32; then
	ok "DDP on a Gloo group with pbox.torch.allreduce_hook: parameters equal on every rank, within 1e-4 of Gloo's"
else
	bad "DDP with pbox.torch.allreduce_hook"
fi
# state in proportion to the model: a DDP bucket sums under one key step
# after step (it took a key per step for 4 steps, 4x the model's state on
# the box and every SS_GPU), and what DDP sums only once (its broadcast of
# the parameters, the small calls of its construction, its first step's
# buckets once rebuilt) is let go (pbox_forget(); it was 2x the gradients
# and more): the gradients' size, within 5%; and the ScheduledOptimizer's
# (its broadcast of the parameters let go at once: it was 2.0x)
for r in pbox-fp32 hook-fp32 sched-fp32; do
	got=$(grep -oh 'laid out [0-9]* bytes (box [0-9]*) for [0-9]* bytes' "$out/$r.log")
	if [ -n "$got" ] && echo "$got" | awk '{ exit !($3 <= 1.05 * $8) }'; then
		ok "$r: state in proportion to the model: $got of gradients"
	else
		bad "$r: state in proportion to the model (the gradients' size, within 5%): ${got:-no figure}"
	fi
done
# calls of one shape in flight at once: one after the other on one key
if timeout 120 $py -m torch.distributed.run --redirects 2 --tee 2 --nproc_per_node 4 \
	--master_addr 127.0.0.1 --master_port 29583 tests/python/same_shape.py >"$out/same.log" 2>&1; then
	ok "six all_reduces of one shape in flight at once (another shape's between them): every sum exact, one key per shape ($(grep -o 'laid out [0-9]* bytes' "$out/same.log" | head -1))"
else
	bad "all_reduces of one shape in flight at once"
	grep -v '^\[default[0-9]\]:\s*$' "$out/same.log" | grep -v '^ ' | tail -8 | sed 's/^/        /'
fi
# CPU tensors: torch 2.x's PowerSGD hook calls torch.cuda.synchronize() on
# their device whenever a GPU is visible ("Expected a cuda device, but got:
# cpu", on any backend), so the GPU is hidden from this run
if CUDA_VISIBLE_DEVICES= run powersgd fp32 29579 && compare powersgd-fp32 &&
	$py -c 'import sys, torch; sys.exit(not all(bool(torch.isfinite(p).all()) for p in torch.load(sys.argv[1])))' \
		"$out/powersgd-fp32-0.pt"; then
	ok "torch's PowerSGD hook on the pbox group trains: parameters finite and equal on every rank" \
		"(losses $(grep -o 'powersgd step [0-9]* loss [0-9.]*' "$out/powersgd-fp32.log" | awk 'NR == 1 || NR == 8 { printf "%s%s", s, $5; s = " ... " }'))"
else
	bad "torch's PowerSGD hook on the pbox group"
fi
# the sharded collectives (libpbox 3.8): reduce_scatter, all_gather and
# broadcast through pbox, each exact against Gloo's on the same inputs,
# and ZeroRedundancyOptimizer with DDP training as on Gloo (shard.py);
# then with [worker] local_aggregation = on (libpbox 3.13: the 4 loopback
# ranks one machine, each shard met in its shared memory)
for la in off on; do
	port=29589
	[ "$la" = on ] && port=29539
	if PBOX_WORKER_LOCAL_AGGREGATION=$la timeout 200 $py -m torch.distributed.run --redirects 2 \
		--tee 2 --nproc_per_node 4 --master_addr 127.0.0.1 --master_port $port \
		tests/python/shard.py >"$out/shard-$la.log" 2>&1 &&
		[ "$(grep -o 'shard: rank [0-9] ok' "$out/shard-$la.log" | wc -l)" = 4 ] &&
		! grep -q 'goes to Gloo' "$out/shard-$la.log"; then
		ok "reduce_scatter (uneven shards) and reduce_scatter_tensor (SUM, AVG), all_gather (uneven) and all_gather_into_tensor, broadcast from every root, in fp32, fp16, bf16 and int64 as torch allows, local_aggregation = $la: all through pbox, exact against Gloo; ZeroRedundancyOptimizer with DDP on the pbox group: $(grep -o 'largest difference from Gloo.s [0-9.e+-]*' "$out/shard-$la.log" | head -1)"
	else
		bad "the sharded collectives through pbox against Gloo, and ZeroRedundancyOptimizer (local_aggregation = $la)"
		grep -v '^\[default[0-9]\]:\s*$' "$out/shard-$la.log" | grep -v '^ ' | grep -v Warning | tail -8 | sed 's/^/        /'
	fi
done
# asynchronous training (libpbox 3.9): pbox.torch.AsyncOptimizer on a
# convex problem, one rank slowed, bounded staleness, against sync SGD
if PBOX_JOB_STALENESS=4 timeout 200 $py -m torch.distributed.run --redirects 2 --tee 2 \
	--nproc_per_node 4 --master_addr 127.0.0.1 --master_port 29567 \
	tests/python/async_train.py >"$out/async.log" 2>&1 &&
	[ "$(grep -o 'async: rank [0-9] ok' "$out/async.log" | wc -l)" = 4 ]; then
	ok "pbox.torch.AsyncOptimizer (BytePS's async mode, one rank slowed, staleness 4): least squares converges to within 2% of sync SGD's loss, every rank ending on the store's parameters ($(grep -o 'loss sync=[0-9.]* async=[0-9.]*' "$out/async.log" | head -1))"
else
	bad "asynchronous training (AsyncOptimizer) against sync SGD"
	grep -v '^\[default[0-9]\]:\s*$' "$out/async.log" | grep -v '^ ' | grep -v Warning | tail -8 | sed 's/^/        /'
fi
# the backend's edges: an op handed to Gloo said once, coalesced calls pbox
# does not sum and sparse tensors to Gloo's own paths, Work.wait(timeout),
# a failure's code on PboxError (tests/python/edges.py)
if timeout 120 $py -m torch.distributed.run --redirects 2 --tee 2 --nproc_per_node 2 \
	--master_addr 127.0.0.1 --master_port 29588 tests/python/edges.py >"$out/edges.log" 2>&1 &&
	grep -q "edges: rank 0 ok" "$out/edges.log" &&
	[ "$(grep -c 'pbox: allreduce goes to Gloo: op MAX' "$out/edges.log")" = 2 ]; then
	ok "MAX all_reduce through Gloo, said once per rank; ScheduledOptimizer's priorities by layer, or in backward's order with priority=False; all_reduce_coalesced with MAX or int64 to Gloo's allreduce_coalesced, SUM of floats summed by pbox; a sparse tensor through Gloo's sparse path; Work.wait(timeout) honoured; a lost rank's PboxError carries pbox.EPEER"
else
	bad "the backend's edges (Gloo hand-off said once, Work.wait(timeout), PboxError's code)"
	grep -v '^\[default[0-9]\]:\s*$' "$out/edges.log" | grep -v '^ ' | tail -8 | sed 's/^/        /'
fi
# a rank late by more than libpbox's own 30 s deadline (the group's timeout
# counts), and a rank that dies (the others get an error naming it, at once)
if timeout 200 $py tests/python/faults.py late 60 29576 >"$out/late.log" 2>&1; then
	ok "a rank 60 s late (a checkpoint on rank 0 alone): every rank finishes, every sum exact"
else
	bad "a rank 60 s late"
	tail -8 "$out/late.log" | sed 's/^/        /'
fi
if timeout 60 $py tests/python/faults.py kill 29577 >"$out/kill.log" 2>&1; then
	ok "rank 2 dies: all_reduce raises on every other rank, naming rank 2 ($(grep -o 'error after [0-9.]* s' "$out/kill.log" | sort -k3 -n | tail -1))"
else
	bad "rank 2 dies: all_reduce raises on every other rank, naming rank 2"
	grep -v '^\s*$' "$out/kill.log" | tail -8 | sed 's/^/        /'
fi
if timeout 60 $py tests/python/faults.py size 29580 >"$out/size.log" 2>&1; then
	ok "rank 3 allreduces a tensor of another size: every rank raises, naming rank 3"
	grep -m1 -o 'error after.*' "$out/size.log" | cut -c1-200 | sed 's/^/        /'
else
	bad "rank 3 allreduces a tensor of another size: every rank raises, naming rank 3"
	grep -v '^\s*$' "$out/size.log" | tail -8 | sed 's/^/        /'
fi
# torchrun's elastic restart: rank 2 dies at step 3 of the first attempt;
# torchrun restarts every rank, the pbox group meets again through the new
# attempt's store (a new job at the box, new ports), and training runs to
# its end: the parameters equal Gloo's clean run
if DDP_DIE=2:3 timeout 300 $py -m torch.distributed.run --redirects 2 --tee 2 --nproc_per_node 4 \
	--max_restarts 1 --monitor_interval 1 --master_addr 127.0.0.1 --master_port 29582 \
	tests/python/ddp_train.py pbox "$out/elastic-fp32" fp32 >"$out/elastic.log" 2>&1 &&
	compare elastic-fp32 gloo-fp32; then
	died=$(grep -o 'dies at step 3 at [0-9.]*' "$out/elastic.log" | awk '{ print $NF }')
	up=$(grep -o 'attempt 1: group up at [0-9.]*' "$out/elastic.log" | awk '{ print $NF }')
	ok "torchrun's elastic restart after rank 2 dies: the new pbox group was up $(awk -v a="$died" -v b="$up" 'BEGIN { printf "%.1f", b - a }') s after the death, training ends equal to Gloo's"
else
	bad "torchrun's elastic restart after rank 2 dies"
	grep -v '^\[default[0-9]\]:\s*$' "$out/elastic.log" | grep -v '^ ' | tail -12 | sed 's/^/        /'
fi
if timeout 120 $py tests/python/faults.py survive 29581 >"$out/survive.log" 2>&1; then
	ok "a training loop goes on after rank 2 dies: pbox.torch.shrink(), 3 ranks finish all 10 steps with equal parameters; then reduce_scatter_tensor, all_gather_into_tensor and broadcast on the 3, exact"
	grep -m1 -o 'went on as rank .*' "$out/survive.log" | sed 's/^/        /'
else
	bad "a training loop goes on after rank 2 dies"
	grep -v '^\s*$' "$out/survive.log" | tail -8 | sed 's/^/        /'
fi
if timeout 120 $py tests/python/faults.py survive-ddp 29582 >"$out/survive-ddp.log" 2>&1; then
	ok "DDP after rank 2 dies: pbox.torch.shrink(), DDP built again on the new group (its allgather and int64 broadcast through pbox), 3 ranks finish all 10 steps with equal parameters; then the sharded collectives and broadcast on the 3, exact"
	grep -m1 -o 'went on as rank .*' "$out/survive-ddp.log" | sed 's/^/        /'
else
	bad "DDP after rank 2 dies"
	grep -v '^\s*$' "$out/survive-ddp.log" | tail -8 | sed 's/^/        /'
fi
# the wheel (make wheel) in a fresh venv, used from outside the checkout:
# no PYTHONPATH, libpbox.so.3 the wheel's own, a 2-rank all_reduce
wheel_run() {
	local w venv="$out/venv" far="$out/far"
	w=$(ls "$build"/dist/pbox-*.whl 2>/dev/null | head -1)
	[ -n "$w" ] || { echo "        no wheel in $build/dist (make wheel)"; return 1; }
	$py -m venv --system-site-packages "$venv" &&
		"$venv/bin/pip" install -q --no-index "$w" >"$out/wheel-pip.log" 2>&1 || {
		tail -5 "$out/wheel-pip.log" | sed 's/^/        /'
		return 1
	}
	mkdir -p "$far" && cp tests/python/wheel_check.py "$far/" &&
		(cd "$far" && env -u PYTHONPATH -u PBOX_LIB timeout 120 "$venv/bin/python" -m torch.distributed.run \
			--redirects 2 --tee 2 --nproc_per_node 2 --master_addr 127.0.0.1 \
			--master_port 29564 wheel_check.py "$venv") >"$out/wheel.log" 2>&1 &&
		grep -q "wheel: rank 0 ok" "$out/wheel.log" && grep -q "wheel: rank 1 ok" "$out/wheel.log" || {
		grep -v '^\[default[0-9]\]:\s*$' "$out/wheel.log" | tail -8 | sed 's/^/        /'
		return 1
	}
}
if wheel_run; then
	ok "the wheel ($(basename "$(ls "$build"/dist/pbox-*.whl)")) in a fresh venv, outside the checkout: $(grep -m1 -o 'pbox [0-9.]* from .*' "$out/wheel.log" | sed "s|$out/||g"), a 2-rank all_reduce exact"
else
	bad "the wheel in a fresh venv: pip install, import, a 2-rank all_reduce"
fi
# PyTorch's own distributed tests (the all_reduce, barrier, broadcast and
# DDP families of torch's distributed_test.py) on Gloo and on pbox: pbox
# passes what Gloo passes, but what torch skips for it by name (listed)
echo "python: torch's distributed_test.py, the all_reduce, barrier, broadcast and DDP families"
conf() { (cd "$out" && BACKEND=$1 timeout 1200 $py "$OLDPWD/tests/python/conformance.py" run "$out/conf-$1.json") >"$out/conf-$1.log" 2>&1; }
if conf gloo && conf pbox && $py tests/python/conformance.py compare "$out/conf-gloo.json" "$out/conf-pbox.json" >"$out/conf.log"; then
	ok "torch's own suite: $(tail -1 "$out/conf.log" | sed 's/^conformance: //')"
	grep '^conformance: skipped by torch' "$out/conf.log" | sed 's/^conformance: /        /'
else
	bad "torch's own distributed tests on pbox as on Gloo"
	grep -h 'FAIL\|conformance:' "$out"/conf*.log | tail -8 | sed 's/^/        /'
fi
echo "python: $passes passed, $fails failed"
[ $fails = 0 ]
