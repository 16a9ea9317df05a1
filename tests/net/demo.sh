#!/usr/bin/env bash
# make demo: the main job on an emulated cluster on this machine, through
# libpbox. pboxd takes 4 virtual NIC ports (net_af_packet on veth, 10 Gb/s
# each in its configuration) in its own network namespace; 4 workers (one
# namespace each) run pbox-bench at 20 Gb/s each, so k = 40/20 = 2 and the
# unified layout splits every model between the box and the workers' SS_GPUs.
# Rank 0 prints the layout; every sum is verified; goodput and pboxctl stats
# are shown. Then a small DDP training under torchrun (one rank per worker
# host) through pboxd and on Gloo: the losses per step and the time per step.
# Needs root, hugepages and Debian's python3-torch.
#
#   tests/net/demo.sh [BUILD_DIR]      ITERS (default 10), DDP_STEPS (the DDP job's steps, 20)
set -uo pipefail

ITERS=${ITERS:-10}
. "$(dirname "$0")/lib.sh"

N=$W
wbw=20000
bench="$build/bin/pbox-bench"
need_root demo
echo "demo: emulated cluster: a box with 4 ports (2 data cores, 4 x 10 Gb/s), $N workers at 20 Gb/s (k = 2), MTU 9000"
pbox_net_up "$tag" 4 "$N" || exit 1
start_box || exit 1
sed -n '/^placement/,/^pboxd: serving/p' "$log/pboxd.log" | sed 's/^/  /'
worker_cfgs 1
run() { # NAME DTYPE ARGS...
	local name=$1 dt=$2
	shift 2
	if bench_ran "$name" "$name $dt" --dtype "$dt" --iters "$ITERS" "$@"; then
		grep -h "^layout" "$log/$name-w0.log" | sed 's/^/  /'
		grep -h "^RESULT" "$log"/"$name"-w*.log | awk -v dt="$dt" -v name="$name" '
			{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
			  g += v["goodput_gbps"]; t += v["mean_ms"]; k++ }
			END { printf "demo: %s %s: %d workers x %d iterations, every sum verified; %.1f ms per " \
				"allreduce, goodput %.2f Gb/s per worker\n", name, dt, k, v["iters"], t / k, g / k }'
		ok "$name $dt"
	fi
}
run resnet50 fp32 --model resnet50
run synthetic fp16 --size 32M --tensors 16
run synthetic bf16 --size 32M --tensors 16
# the same cluster from PyTorch: DDP (tests/python/ddp_train.py) through
# pboxd, then on Gloo over the same links; 20 steps, so that the time per
# step (after the first 3, which lay DDP's buckets out) is over 17 of them:
# over the 5 of 8 steps it read 0.76 to 1.52 of Gloo's from run to run
export DDP_STEPS=${DDP_STEPS:-20}
if torch_ddp pbox fp32 29620 && torch_ddp gloo fp32 29621; then
	for b in pbox gloo; do
		printf 'demo: PyTorch DDP, %d ranks under torchrun, %s: losses %s; %s\n' "$N" "$b" \
			"$(grep -oh "$b step [0-9]* loss [0-9.]*" "$log/$b-fp32-h0.log" | awk '{ printf "%s%s", sep, $5; sep = " " }')" \
			"$(grep -oh "$b: .* per step after the first [0-9]*; [0-9.]* ms with them" "$log/$b-fp32-h0.log")"
	done
	ok "PyTorch DDP through pboxd"
else
	bad "PyTorch DDP through pboxd and on Gloo"
fi
echo "demo: pboxctl stats:"
"$build/bin/pboxctl" --prefix "$prefix" stats | sed 's/^/  /'
echo "demo: $pass of $((pass + fail)) runs verified"
[ "$fail" -eq 0 ]
