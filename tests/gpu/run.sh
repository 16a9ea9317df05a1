#!/usr/bin/env bash
# make test-gpu: CUDA tensors, on a machine with an NVIDIA GPU (and, for the
# PyTorch part, torch with CUDA). Ranks share the one GPU on loopback, no box.
#   - the CUDA compressors (comp_check): every scheme, to the bit of the C
#     ones, payloads, residuals and decompress-add;
#   - the C API: gpu_check, 2 and 4 ranks, fp32/fp16/bf16, one piece to
#     many, in place and not: every sum exact, and pbox_rejoin() with CUDA
#     tensors (refused while one is in flight, taken between steps); then 2
#     and 4 ranks as one
#     machine ([worker] local_aggregation = on: loopback counts), one rank
#     pushing, by both of BytePS §4.2's paths: summed on the GPU from each
#     rank's buffer (local_cuda = ipc) and CPU-assisted, through shared host
#     memory (local_cuda = host);
#   - PyTorch: DDP on CUDA tensors, 4 ranks under torchrun, on the pbox
#     backend and through pbox.torch.allreduce_hook: parameters equal on
#     every rank and within 1e-4 of the same run on CPU tensors; the
#     ScheduledOptimizer and the AsyncOptimizer on CUDA parameters; and
#     the 4 processes as one machine, CUDA IPC between them.
# Runs from a build carried to a host without DPDK: tests/gpu/run.sh BUILD
# (PY: the python with torch, python3 by default).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
py=${PY:-python3}
out=$(mktemp -d /tmp/pbox-gpu.XXXXXX)
trap 'rm -rf "$out"' EXIT
fails=0
ok() { echo "  PASS  $*"; }
bad() { echo "  FAIL  $*"; fails=$((fails + 1)); }

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
	echo "test-gpu: no NVIDIA GPU here (nvidia-smi -L fails)"
	exit 1
fi
echo "test-gpu: $(nvidia-smi -L | head -1)"
if timeout 120 "$build/tests/comp_check" >"$out/comp.log" 2>&1; then
	ok "CUDA compressors (worker/cuda/comp.cu) against the C ones: $(tail -1 "$out/comp.log" | sed 's/^comp_check: //')"
else
	bad "CUDA compressors against the C ones"
	grep -v '^comp_check: [a-z0-9]* *rate' "$out/comp.log" | tail -5 | sed 's/^/        /'
fi
for n in 2 4; do
	if timeout 300 "$build/tests/gpu_check" check $n >"$out/c$n.log" 2>&1; then
		ok "C API, $n ranks on one GPU: $(tail -1 "$out/c$n.log")"
	else
		bad "C API, $n ranks on one GPU"
		tail -5 "$out/c$n.log" | sed 's/^/        /'
	fi
done
for path in ipc host; do
	what="summed on the GPU, CUDA IPC"
	[ $path = host ] && what="CPU-assisted, through host memory"
	for n in 2 4; do
		if PBOX_WORKER_LOCAL_AGGREGATION=on PBOX_WORKER_LOCAL_CUDA=$path timeout 300 \
			"$build/tests/gpu_check" check $n >"$out/local-$path-$n.log" 2>&1; then
			ok "C API, $n ranks on one GPU as one machine (local aggregation, $what): $(tail -1 "$out/local-$path-$n.log")"
		else
			bad "C API, $n ranks on one GPU as one machine (local aggregation, $what)"
			tail -5 "$out/local-$path-$n.log" | sed 's/^/        /'
		fi
	done
done

if ! $py -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
	bad "PyTorch: $py has no torch with CUDA"
	echo "test-gpu: $fails failed"
	exit 1
fi
export PYTHONPATH=$PWD/$build/python
run() { # DEVICE BACKEND MODEL PORT (TAG: the run's name after MODEL)
	local name=$1-$2-$3${TAG:-}
	DDP_DEVICE=$1 timeout 300 $py -m torch.distributed.run --nproc_per_node 4 \
		--master_addr 127.0.0.1 --master_port "$4" tests/python/ddp_train.py "$2" \
		"$out/$name" "$3" >"$out/$name.log" 2>&1 && return 0
	grep -v '^\s*$' "$out/$name.log" | grep -iE 'error|fail|pbox' | tail -8 | sed 's/^/        /'
	return 1
}
compare() { $py tests/python/compare.py "$out" "$@"; }
echo "test-gpu: DDP on CUDA tensors, 4 ranks under torchrun, $($py -c 'import torch; print("torch", torch.__version__)')"
if run cpu pbox fp32 29621 && run cuda pbox fp32 29622 && compare cuda-pbox-fp32 cpu-pbox-fp32; then
	ok "DDP on CUDA tensors, pbox backend: parameters equal on every rank, within 1e-4 of CPU tensors ($(grep -o 'pbox: .* per step' "$out/cuda-pbox-fp32.log"))"
else
	bad "DDP on CUDA tensors, pbox backend"
fi
if run cuda pbox mixed 29623 && compare cuda-pbox-mixed; then
	ok "DDP on CUDA tensors, fp32 and bf16 in one group: parameters equal on every rank"
else
	bad "DDP on CUDA tensors, fp32 and bf16"
fi
if run cuda hook fp32 29624 && compare cuda-hook-fp32 cpu-pbox-fp32; then
	ok "DDP on CUDA tensors with pbox.torch.allreduce_hook: equal on every rank, within 1e-4 of CPU tensors"
else
	bad "DDP on CUDA tensors with pbox.torch.allreduce_hook"
fi
# ByteScheduler's and BytePS's async optimizers on CUDA parameters
if run cuda sched fp32 29631 && compare cuda-sched-fp32 cpu-pbox-fp32; then
	ok "pbox.torch.ScheduledOptimizer on CUDA tensors: equal on every rank, within 1e-4 of DDP on CPU tensors"
else
	bad "ScheduledOptimizer on CUDA tensors"
fi
if PBOX_JOB_STALENESS=4 ASYNC_DEVICE=cuda timeout 200 $py -m torch.distributed.run --nproc_per_node 4 \
	--master_addr 127.0.0.1 --master_port 29632 tests/python/async_train.py >"$out/async.log" 2>&1 &&
	[ "$(grep -o 'async: rank [0-9] ok' "$out/async.log" | wc -l)" = 4 ]; then
	ok "pbox.torch.AsyncOptimizer on CUDA parameters: least squares within 2% of sync SGD's loss ($(grep -m1 -o 'loss sync=[0-9.]* async=[0-9.]*' "$out/async.log"))"
else
	bad "AsyncOptimizer on CUDA parameters"
	grep -iE 'error|fail|async:' "$out/async.log" | tail -8 | sed 's/^/        /'
fi
# one machine of 4 processes: CUDA IPC between them, one push for all
if TAG=-local PBOX_WORKER_LOCAL_AGGREGATION=on PBOX_WORKER_LOCAL_CUDA=ipc run cuda pbox fp32 29625 &&
	compare cuda-pbox-fp32-local cpu-pbox-fp32; then
	ok "DDP on CUDA tensors, 4 processes as one machine (local aggregation on the GPU, CUDA IPC between processes): within 1e-4 of CPU tensors"
else
	bad "DDP on CUDA tensors, 4 processes as one machine (CUDA IPC)"
fi
# [job] deterministic = on: every sum in rank order, so two runs on CUDA
# tensors end bitwise equal, through the SS_GPUs and with the machine's
# sum on the GPU (CUDA IPC) before them
if TAG=-det1 PBOX_JOB_DETERMINISTIC=on run cuda pbox fp32 29626 &&
	TAG=-det2 PBOX_JOB_DETERMINISTIC=on run cuda pbox fp32 29627 &&
	COMPARE_TOL=0 compare cuda-pbox-fp32-det1 cuda-pbox-fp32-det2 >/dev/null; then
	ok "DDP on CUDA tensors with [job] deterministic = on, run twice: the same parameters bit for bit"
else
	bad "DDP on CUDA tensors with [job] deterministic = on, run twice"
fi
if TAG=-ldet1 PBOX_JOB_DETERMINISTIC=on PBOX_WORKER_LOCAL_AGGREGATION=on PBOX_WORKER_LOCAL_CUDA=ipc \
	run cuda pbox fp32 29628 &&
	TAG=-ldet2 PBOX_JOB_DETERMINISTIC=on PBOX_WORKER_LOCAL_AGGREGATION=on PBOX_WORKER_LOCAL_CUDA=ipc \
		run cuda pbox fp32 29629 &&
	COMPARE_TOL=0 compare cuda-pbox-fp32-ldet1 cuda-pbox-fp32-ldet2 >/dev/null; then
	ok "the same as one machine of 4 (the machine's sum on the GPU by CUDA IPC): bit for bit"
else
	bad "deterministic with local aggregation on the GPU, run twice"
fi
# FSDP (torch 2.x) on the pbox group: the sharded collectives of CUDA
# tensors through pbox, and a model trained to the one-process reference
if timeout 300 $py -m torch.distributed.run --nproc_per_node 4 --master_addr 127.0.0.1 \
	--master_port 29630 tests/gpu/fsdp.py >"$out/fsdp.log" 2>&1 &&
	[ "$(grep -o 'fsdp: rank [0-9] ok' "$out/fsdp.log" | wc -l)" = 4 ] && ! grep -q 'goes to Gloo' "$out/fsdp.log"; then
	ok "FSDP on CUDA tensors, pbox group: reduce_scatter_tensor, all_gather_into_tensor, all_gather, broadcast exact; trained to the one-process reference ($(grep -m1 -o 'largest difference [0-9.e+-]*' "$out/fsdp.log"))"
else
	bad "FSDP on CUDA tensors on the pbox group"
	grep -v '^\s*$' "$out/fsdp.log" | grep -iE 'error|fail|fsdp:|gloo' | tail -8 | sed 's/^/        /'
fi
echo "test-gpu: $((16 - fails)) passed, $fails failed"
[ $fails = 0 ]
