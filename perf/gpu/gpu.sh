#!/usr/bin/env bash
# perf/gpu (make perf-gpu): CUDA tensors against their host-memory peers, on
# a machine with an NVIDIA GPU; 4 ranks share it on loopback, 64 MiB fp32.
#   staging         the pinned-memory copy peak (there and back, in pieces on
#                   two streams, measured in this run) over the stager alone
#                   moving the same bytes (a CUDA push-pull with
#                   PBOX_CUDA_STAGE_ONLY=1: every piece staged there and
#                   back, no network): goal >= 0.8
#   device_vs_host  4 ranks' allreduce of CUDA tensors over the same
#                   allreduce of host tensors: goal <= 1.1
# Last line: RESULT gpu staging=X device_vs_host=Y. Results in
# perf/gpu/results/.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
mkdir -p perf/gpu/results
{
	echo "perf/gpu: $(nvidia-smi -L | head -1), $(date -u +%F)"
	"$build/tests/gpu_check" perf 4
} | tee perf/gpu/results/last.txt
