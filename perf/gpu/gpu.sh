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
#   local_ipc_vs_host  the 4 ranks as one machine (local aggregation):
#                   CUDA tensors summed on the GPU ([worker] local_cuda =
#                   ipc) over the same through host memory by the CPU
#                   (local_cuda = host): below 1 is the GPU path's gain
#   gpu_comp        each CUDA compressor's encode (error feedback included)
#                   over a device-to-device copy of the same 64 MiB
# Last lines: RESULT gpu staging=X device_vs_host=Y local_ipc_vs_host=Z, and
# RESULT gpu_comp sign_vs_copy=... Results in
# perf/gpu/results/.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
mkdir -p perf/gpu/results
{
	echo "perf/gpu: $(nvidia-smi -L | head -1), $(date -u +%F)"
	"$build/tests/gpu_check" perf 4
	"$build/tests/comp_check" perf
} | tee perf/gpu/results/last.txt
