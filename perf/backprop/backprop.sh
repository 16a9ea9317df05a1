#!/usr/bin/env bash
# perf/backprop: what priority scheduling buys a training step. n = 4
# workers (pbox-bench over libpbox) at B = 200 Mb/s and a box of 2 ports at
# k = 2 on the emulated network. Every rank plays backpropagation: SIZE of
# fp32 in TENSORS layers, layer i's gradient ready GAP_US after layer i+1's
# (its backward compute), the last layer first; the next forward pass can
# start once layer 0's sum is in. For each schedule it measures the time
# from the end of the backward pass to layer 0's sum (the slowest rank's
# mean over ITERS iterations after a warm-up), every sum checked:
#   priority  layer i has priority i (pbox's default for a framework)
#   fifo      one priority, keys in the order gradients become ready
# beside ByteScheduler's model of the same step, from the same run's plain
# allreduce time T (all layers pushed at once, no compute):
#   fifo      layer 0 is sent last: max(T - (L-1)·gap, T/L) after backward
#   priority  layer 0 preempts: T/L, plus one partition already on its way
# Writes $OUT/backprop.csv and ends with
#   RESULT backprop fwd_priority_ms=P fwd_fifo_ms=F gain=F/P model_gain=M
# SHORT=1 (make test): 4 MiB in 8 layers, 2 iterations, and the run fails
# unless priority beats FIFO by half the model's gain (the margin: the
# model ignores the engine's and the kernel's own delays, which this
# 2-core machine makes large next to a few milliseconds).
# Needs root and hugepages.
#
#   perf/backprop/backprop.sh [BUILD_DIR]   SIZE (16M), TENSORS (16), GAP_US (5000),
#                                           ITERS (3), OUT (BUILD_DIR/perf/backprop)
set -uo pipefail

N=4
B=200
ports=2
if [ -n "${SHORT:-}" ]; then
	SIZE=${SIZE:-4M} TENSORS=${TENSORS:-8} GAP_US=${GAP_US:-2000} ITERS=${ITERS:-2}
fi
SIZE=${SIZE:-16M}
TENSORS=${TENSORS:-16}
GAP_US=${GAP_US:-5000}
ITERS=${ITERS:-3}
. "$(dirname "$0")/../../tests/net/lib.sh"

harness backprop

run() { # NAME ARGS...
	bench_ran "$1" "$1" --size "$SIZE" --tensors "$TENSORS" --iters "$ITERS" "${@:2}"
}

echo "backprop: n=$N workers at B=$B Mb/s, box of $ports ports at k=2, $SIZE fp32 in $TENSORS layers," \
	"${GAP_US} us of compute per layer, $ITERS iterations after 1 warm-up; logs in $log"
pbox_net_up "$tag" "$ports" "$N" || exit 1
shape 2 || exit 1
restart_box $((2 * wbw / ports)) || exit 1
worker_cfgs 1
run plain || exit 1
t=$(slowest plain)
run priority --backprop "$GAP_US" || exit 1
run fifo --backprop "$GAP_US" --fifo || exit 1
p=$(slowest priority fwd_ms)
f=$(slowest fifo fwd_ms)
part=$(awk -v s="$(numfmt --from=iec "$SIZE")" -v l="$TENSORS" 'BEGIN { p = 4194304; if (s / l < p) p = s / l; print p }')
echo "schedule,fwd_ms,plain_allreduce_ms,model_fwd_ms" >"$csv"
awk -v t="$t" -v p="$p" -v f="$f" -v l="$TENSORS" -v gap="$GAP_US" -v s="$(numfmt --from=iec "$SIZE")" \
	-v part="$part" -v csv="$csv" 'BEGIN {
	bwd = (l - 1) * gap / 1000
	mf = t - bwd; if (mf < t / l) mf = t / l
	mp = t / l + t * part / s
	printf "priority,%.3f,%.3f,%.3f\nfifo,%.3f,%.3f,%.3f\n", p, t, mp, f, t, mf >> csv
	printf "backprop: all layers at once %.1f ms; backward pass %.1f ms\n", t, bwd
	printf "backprop: layer 0 summed after the backward pass: by priority %.1f ms (model %.1f), first come first served %.1f ms (model %.1f)\n", p, mp, f, mf
	printf "RESULT backprop fwd_priority_ms=%.3f fwd_fifo_ms=%.3f gain=%.3f model_gain=%.3f\n", p, f, f / p, mf / mp
}'
if [ -n "${SHORT:-}" ]; then
	check "priority: layer 0's sum after the backward pass in $p ms against $f ms first come, first served (at least half the model's gain)" \
		awk -v t="$t" -v p="$p" -v f="$f" -v l="$TENSORS" -v gap="$GAP_US" -v s="$(numfmt --from=iec "$SIZE")" -v part="$part" 'BEGIN {
			mf = t - (l - 1) * gap / 1000; if (mf < t / l) mf = t / l
			mp = t / l + t * part / s
			exit !(f / p >= 0.5 * mf / mp && f > p) }'
fi
[ "$fail" -eq 0 ]
