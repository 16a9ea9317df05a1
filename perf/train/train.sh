#!/usr/bin/env bash
# perf/train: real models trained through pbox against Gloo (issue 36).
# n = 4 workers (one network namespace and one torchrun each) at B Mb/s,
# a box of 2 ports at k = K (2; 0: none) on the emulated network;
# torchvision models on synthetic images, or a BERT-base-sized encoder on
# synthetic tokens (perf/train/train.py), each trained by
#   gloo   DDP on a Gloo group (its ring allreduce over the same links)
#   pbox   DDP on the pbox backend, through the box
#   hook   DDP on Gloo with pbox.torch.allreduce_hook, through the box
#   sched  pbox.torch.ScheduledOptimizer (no DDP), through the box, with
#          [job] leader_order = on (LEADER_ORDER=off: without)
#   sched-fifo  the same first come, first served, not by layer (MODES=...)
#   async  pbox.torch.AsyncOptimizer (BytePS's asynchronous mode, no DDP)
#   async-slow  the same, the last rank at half speed; async_fast_rank=
#          rank 0's step rate there over its rate in async (goal >= 0.9)
# For each model and mode: the time per step (rank 0's mean over the timed
# steps), the final parameters' largest difference from Gloo's, and the
# theory's speedup over Gloo: Theorem 1's t_ring / t_opt = (n^2 + kn -
# 2k) / n^2 for the communication, and for the whole step Gloo's step
# with t_ring replaced by t_opt (no overlap assumed). Writes
# $OUT/train.csv, a chart ($OUT/train.png: each mode's speedup per model
# beside the theory's) and one line per model:
#   RESULT train model=M k=K b=B ddp_vs_gloo= hook_vs_gloo= sched_vs_gloo= sched_vs_ddp= box_state=
#     busy_gloo= busy_ddp= busy_sched= theory=
# (speedups: Gloo's step time over the mode's, one run; theory: the step's;
# box_state: the box's state over two buffers of its share of the model;
# busy_gloo, busy_ddp, busy_sched: the share of the host's CPUs busy over
# those runs' timed steps, near 1 where the host's CPUs, not the links,
# bound the step (4 ranks, pboxd and the emulated links on this host);
# theory_laid, where the box's memory held less than its Theorem 1 share:
# the step's speedup for the layout DDP's run had)
# Needs root, hugepages, torch and torchvision (deploy/host-setup.sh --perf).
#
#   perf/train/train.sh [BUILD_DIR]   MODELS ("resnet18 resnet50"; vgg16 and
#                                     bert_base too where memory allows), B (500;
#                                     a compute-bound rate: 5000), K (2; 0, 1), MODES,
#                                     STEPS (12), WARMUP (4), BATCH (8),
#                                     IMAGE (32), OUT (BUILD_DIR/perf/train)
set -uo pipefail

N=4
B=${B:-500}
K=${K:-2} # the box's bandwidth over a worker's: 0 (no box), 1 or 2 (its 2 ports)
ports=2
MODELS=${MODELS:-resnet18 resnet50}
MODES=${MODES:-gloo pbox hook sched async async-slow}
. "$(dirname "$0")/../../tests/net/lib.sh"
py=${PY:-/usr/bin/python3}
harness train
$py -c 'import torchvision' 2>/dev/null ||
	{ echo "train: no torchvision for $py (deploy/host-setup.sh --perf)"; exit 1; }

# train MODE MODEL PORT: every rank under its own torchrun (torch_ranks);
# the scheduled optimizer's runs with rank 0 ordering every rank's sends
# ([job] leader_order, as docs/pytorch.md has it; LEADER_ORDER=off: each
# rank its own order)
train() {
	case $1 in sched*) local -x PBOX_JOB_LEADER_ORDER=${LEADER_ORDER:-on} ;; esac
	torch_ranks "$1" "$2-$1" "$3" 900 "$src/perf/train/train.py" "$1" "$2" "$log/$2-$1"
}
step_ms() { grep -oh "train: $1 $2 step_ms=[0-9.]*" "$log/$2-$1-h0.log" | sed 's/.*=//'; }
busy() { grep -oh "train: $1 $2 host_busy=[0-9.]*" "$log/$2-$1-h0.log" | sed 's/.*=//'; }
# box_state MODE MODEL LINE: the box's state for the run's job (its last
# registration or growth after pboxd.log's LINE) against two buffers of
# the box's share of the model (of what pbox laid out, the gradients'
# part, in whole chunks); the worst ratio in worst_state
worst_state=
box_state() {
	local st f r m laid box grads chunk
	f=$(grep -oh "train: $1 $2 laid_bytes=.*" "$log/$2-$1-h0.log") || return 0
	st=$(tail -n +"$(($3 + 1))" "$log/pboxd.log" | grep -E "job [0-9]* (registered|grew)" |
		grep -o '[0-9]* bytes of state' | tail -1 | cut -d' ' -f1)
	[ -n "$st" ] || return 0
	read -r laid box grads chunk < <(echo "$f" | sed 's/.*laid_bytes=\([0-9]*\) box_bytes=\([0-9]*\) grads_bytes=\([0-9]*\) chunk=\([0-9]*\)$/\1 \2 \3 \4/')
	read -r r m < <(box_state_ratio "$st" "$laid" "$box" "$grads" "$chunk")
	[ -n "$r" ] || return 0
	echo "train: $2 $1: the box held $st bytes of state, $r of two buffers of its share of the model ($m bytes; pbox laid out $laid for $grads of gradients)"
	if [ "$1" = pbox ]; then # the box's part of what DDP's run laid out
		ddp_box=$(awk -v b="$box" -v l="$laid" 'BEGIN { if (l > 0) printf "%.4f", b / l }')
	fi
	worst_state=$(awk -v a="${worst_state:-0}" -v b="$r" 'BEGIN { printf "%.3f", (b > a ? b : a) }')
}
# diff_from MODE MODEL REF: the largest difference of MODE's rank-0
# parameters from REF's, and whether MODE's ranks all agree
diff_from() {
	$py - "$log/$2-$1" "$log/$2-$3" "$N" <<'PY'
import sys, torch
run, ref, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p0 = torch.load(run + "-0.pt")
same = all(all(torch.equal(a, b) for a, b in zip(p0, torch.load("%s-%d.pt" % (run, r))))
           for r in range(1, n))
q = torch.load(ref + "-0.pt")
print("%.3g %s" % (max(float((a - b).abs().max()) for a, b in zip(p0, q)), "yes" if same else "no"))
PY
}

echo "train: n=$N workers at B=$B Mb/s, a box of $ports ports at k=$K; models: $MODELS;" \
	"modes: $MODES; ${STEPS:-12} steps (${WARMUP:-4} untimed) of ${BATCH:-8} images of" \
	"${IMAGE:-32} px per rank; logs in $log"
pbox_net_up "$tag" "$ports" "$N" || exit 1
shape "$K" || exit 1
if [ "$K" -gt 0 ]; then
	restart_box $((K * wbw / ports)) || exit 1
else # k = 0: the workers' SS_GPUs alone
	boxaddr=
	: >"$log/pboxd.log"
fi
echo "model,mode,step_ms,speedup_vs_gloo,max_param_diff_vs_gloo,ranks_agree,grads_mb,theory_step,theory_comm,k,b_mbps,host_busy" >"$csv"
port=29700
for m in $MODELS; do
	declare -A t=() u=()
	for mode in $MODES; do
		port=$((port + 1))
		at=$(wc -l <"$log/pboxd.log")
		if train "$mode" "$m" "$port"; then
			t[$mode]=$(step_ms "$mode" "$m")
			u[$mode]=$(busy "$mode" "$m")
			echo "train: $m $mode: ${t[$mode]} ms per step, the host's CPUs ${u[$mode]:-?} busy;" \
				"$(grep -oh "cpu_ms_per_step=.*" "$log/$m-$mode-h0.log" | sed 's/cpu_ms_per_step=/rank 0 CPU ms per step /')"
			box_state "$mode" "$m" "$at"
		else
			bad "$m $mode trains"
		fi
	done
	[ -n "${t[gloo]:-}" ] || continue
	mb=$(grep -oh "grads_mb=[0-9.]*" "$log/$m-gloo-h0.log" | sed 's/.*=//')
	# Theorem 1 at n, k: t_ring = 2(n-1)M/(nB), t_opt = t_ring n^2/(n^2+kn-2k).
	# And the layout DDP's run had (theory_laid): where the box's memory held
	# less than its Theorem 1 share, the box's part f of M, each SS_GPU's
	# (1-f)/n: a worker's link carries f + 2(n-1)(1-f)/n of M, the box's
	# n f / k of M at B
	read -r comm theory laid < <(awk -v n="$N" -v k="$K" -v mb="$mb" -v b="$B" -v g="${t[gloo]}" \
		-v f="${ddp_box:-}" 'BEGIN {
		c = (n * n + k * n - 2 * k) / (n * n)
		ring = 2 * (n - 1) * mb * 8 * 1048576 / (n * b * 1e6) * 1000
		printf "%.3f %.3f", c, g / (g - ring + ring / c)
		share = k >= n ? 1 : 2 * k * (n - 1) / (n * n + k * n - 2 * k)
		if (f != "" && f < share - 0.005) {
			w = f + 2 * (n - 1) * (1 - f) / n; x = k > 0 ? n * f / k : 0
			cl = 2 * (n - 1) / n / (w > x ? w : x)
			printf " %.3f", g / (g - ring + ring / cl)
		}
		printf "\n" }')
	ddp_box=
	line="RESULT train model=$m k=$K b=$B"
	for mode in $MODES; do
		[ -n "${t[$mode]:-}" ] || continue
		read -r d agree < <(diff_from "$mode" "$m" gloo)
		sp=$(awk -v g="${t[gloo]}" -v x="${t[$mode]}" 'BEGIN { printf "%.3f", g / x }')
		echo "$m,$mode,${t[$mode]},$sp,$d,$agree,$mb,$theory,$comm,$K,$B,${u[$mode]:-}" >>"$csv"
		echo "train: $m $mode: ${sp}x Gloo, parameters $d from Gloo's, ranks agree: $agree"
		[ "$agree" = yes ] || bad "$m $mode: every rank's parameters equal"
		case $mode in
		pbox) line+=" ddp_vs_gloo=$sp" ;;
		hook) line+=" hook_vs_gloo=$sp" ;;
		sched) line+=" sched_vs_gloo=$sp" ;;
		sched-fifo) line+=" sched_fifo_vs_gloo=$sp" ;;
		async) line+=" async_vs_gloo=$sp" ;;
		esac
	done
	[ -n "${t[async]:-}" ] && [ -n "${t[async-slow]:-}" ] &&
		line+=" async_fast_rank=$(awk -v a="${t[async]}" -v b="${t[async-slow]}" 'BEGIN { printf "%.3f", a / b }')"
	[ -n "${t[sched]:-}" ] && [ -n "${t[pbox]:-}" ] &&
		line+=" sched_vs_ddp=$(awk -v a="${t[pbox]}" -v b="${t[sched]}" 'BEGIN { printf "%.3f", a / b }')"
	[ -n "$worst_state" ] && line+=" box_state=$worst_state"
	for mode in gloo pbox sched; do # the host's CPUs: near 1, they bound the step
		[ -n "${u[$mode]:-}" ] && line+=" busy_${mode/pbox/ddp}=${u[$mode]}"
	done
	worst_state=
	echo "$line theory=$theory theory_comm=$comm${laid:+ theory_laid=$laid}"
	unset t u
done
# the chart: each mode's speedup over Gloo per model, beside the theory's
if command -v gnuplot >/dev/null && [ "$(wc -l <"$csv")" -gt 1 ]; then
	awk -F, -v modes="$MODES" 'NR > 1 { sp[$1, $2] = $4; th[$1] = $8; if (!($1 in seen)) { seen[$1]; order[++n] = $1 } }
		END { m = split(modes, md, " "); printf "model theory"; for (j = 1; j <= m; j++) if (md[j] != "gloo") printf " %s", md[j]; print ""
		      for (i = 1; i <= n; i++) { printf "%s %s", order[i], th[order[i]]
			for (j = 1; j <= m; j++) if (md[j] != "gloo") printf " %s", ((order[i], md[j]) in sp) ? sp[order[i], md[j]] : "-"; print "" } }' \
		"$csv" >"$out/train-speedup.dat"
	cols=$(head -1 "$out/train-speedup.dat" | wc -w)
	gnuplot <<-EOF
		set terminal pngcairo size 900,560 font "sans,11"
		set output "$out/train.png"
		set title "Real models through pbox: n = $N workers at B = $B Mb/s, k = $K"
		set ylabel "speedup over DDP on Gloo (step time)"
		set style data histograms
		set style histogram clustered gap 1
		set style fill solid 0.8 border -1
		set datafile missing "-"
		set key top left
		set grid ytics
		set yrange [0:*]
		set termoption noenhanced
		plot for [i=2:$cols] "$out/train-speedup.dat" using i:xtic(1) title columnheader(i)
	EOF
	echo "train: wrote $csv and $out/train.png"
fi
[ "$fail" -eq 0 ]
