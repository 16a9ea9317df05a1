#!/usr/bin/env bash
# perf/compress, its cluster half (make perf-compress runs it after
# build/perf/perf_comp): ByteComp's strategy on the emulated cluster. n = 4
# workers (pbox-bench over libpbox) at B Mb/s and a box of 2 ports at k = 1
# and k = 2; every rank plays a backward pass of a real model's tensors
# (ResNet-50's 161 and BERT-base's 199, scaled down by SCALE_RN and
# SCALE_BERT to fit these links) with per-layer compute (GAP_US each, plus
# PER_MB us per MiB of the layer), communication-bound; the job's [job]
# compression = SCHEME (sign: EFSignSGD). Per model and k, the step time of:
#   none      every layer as it is
#   all       every layer compressed
#   bytecomp  ByteComp's decision algorithm over each run's own model (the
#             link's time per byte measured by one plain allreduce, the
#             compressor profiled on this CPU, each layer's bytes and
#             compute): which layers to compress
# and on a reduced model of 12 layers of mixed sizes (k = 2), bytecomp
# against brute, the best of all 2^12 choices in the same model.
# Writes $OUT/compress.csv and ends with
#   RESULT compress speedup_vs_none=S vs_all=A gap_to_best=G decide_ms=D
# S and A the least over models and k (bytecomp's step against none's and
# all's), G the reduced model's measured gap (bytecomp over brute, - 1), D
# the most any rank took to decide. Needs root and hugepages.
#
#   perf/compress/compress.sh [BUILD_DIR]   B (200), SCHEME (sign), ITERS (2),
#                                           GAP_US (2000), PER_MB (10000),
#                                           SCALE_RN (4), SCALE_BERT (10), OUT
set -uo pipefail

N=4
B=${B:-200}
ports=2
SCHEME=${SCHEME:-sign}
ITERS=${ITERS:-2}
GAP_US=${GAP_US:-2000}
PER_MB=${PER_MB:-10000}
SCALE_RN=${SCALE_RN:-4}
SCALE_BERT=${SCALE_BERT:-10}
. "$(dirname "$0")/../../tests/net/lib.sh"

harness compress
export PBOX_JOB_COMPRESSION=$SCHEME

run() { # NAME ARGS...
	bench_ran "$1" "$1" --iters "$ITERS" --warmup 1 --backprop "$GAP_US" \
		--compute-per-mb "$PER_MB" "${@:2}"
}

# decided NAME: the slowest rank's decision time of run NAME, in ms
decided() { slowest "$1" decide_ms; }

echo "compress: n=$N workers at B=$B Mb/s, box of $ports ports at k = 1 and 2, $SCHEME;" \
	"compute ${GAP_US} us a layer + ${PER_MB} us a MiB; $ITERS iterations after 1 warm-up; logs in $log"
pbox_net_up "$tag" "$ports" "$N" || exit 1
echo "model,k,plan,step_ms,compressed_layers,decide_ms" >"$csv"
dec=0
for k in 1 2; do
	shape "$k" || exit 1
	restart_box $((k * wbw / ports)) || exit 1
	worker_cfgs 1
	for spec in "resnet50 $SCALE_RN" "bert-base $SCALE_BERT"; do
		set -- $spec
		for plan in none all bytecomp; do
			run "$1-k$k-$plan" --model "$1" --scale "$2" --compress "$SCHEME:$plan" || exit 1
			grep -h "^bench: rank 0: $SCHEME on" "$log/$1-k$k-$plan-w0.log" | sed 's/^/        /'
			echo "$1,$k,$plan,$(slowest "$1-k$k-$plan"),$(slowest "$1-k$k-$plan" compressed),$(decided "$1-k$k-$plan")" >>"$csv"
		done
	done
done
# the reduced model: 12 layers of 1 to 6 MiB (a --size model is equal
# layers; --model is real ones): ResNet-50's 12 largest, scaled
for plan in none all bytecomp brute; do
	run "reduced-$plan" --model resnet50-12 --scale "$SCALE_RN" --compress "$SCHEME:$plan" || exit 1
	grep -h "^bench: rank 0: $SCHEME on" "$log/reduced-$plan-w0.log" | sed 's/^/        /'
	echo "reduced,2,$plan,$(slowest "reduced-$plan"),$(slowest "reduced-$plan" compressed),$(decided "reduced-$plan")" >>"$csv"
done
cat "$csv" | sed 's/^/        /'
# D is ByteComp's decision alone (brute force tries every combination)
awk -F, 'NR > 1 { t[$1 "," $2 "," $3] = $4; if ($3 != "brute" && $6 != "" && $6 + 0 > d) d = $6 + 0 }
	END {
		s = 1e9; a = 1e9
		split("resnet50 bert-base", m, " ")
		for (i = 1; i <= 2; i++) for (k = 1; k <= 2; k++) {
			b = t[m[i] "," k ",bytecomp"]
			if (b > 0) {
				if (t[m[i] "," k ",none"] / b < s) s = t[m[i] "," k ",none"] / b
				if (t[m[i] "," k ",all"] / b < a) a = t[m[i] "," k ",all"] / b
			}
		}
		g = t["reduced,2,bytecomp"] / t["reduced,2,brute"] - 1
		printf "compress: bytecomp against none at worst %.3fx, against all %.3fx; reduced model %.3f from brute force\n", s, a, g
		printf "RESULT compress speedup_vs_none=%.3f vs_all=%.3f gap_to_best=%.4f decide_ms=%.1f\n", s, a, g, d
	}' "$csv"
[ "$fail" -eq 0 ]
