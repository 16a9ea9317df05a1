#!/usr/bin/env bash
# PyTorch through pboxd (make test): DDP on the emulated cluster, one rank
# per worker host (network namespace), each under its own torchrun as on a
# real cluster (--nnodes 4, rank 0's host the master), pboxd with 2 ports;
# rank 0 registers the job with the box (PBOX_BOX, PBOX_BOX_KEY_FILE) and
# grows it as DDP hands over new buckets. Then the same on Gloo. Checks:
# training runs on both; the final parameters are equal on every rank and
# within 1e-4 of Gloo's (fp32), also with DDP on a Gloo group and its
# buckets summed through pboxd by pbox.torch.allreduce_hook; fp32 and bf16
# parameters in one group train with every rank equal; the box registered the jobs, grew the mixed one by
# a segment of its other dtype, summed fragments for them, and freed them when training
# ended; DDP of a model whose share is more than the box's memory (the box
# takes what it holds); then a training loop that goes on without the box
# when pboxd is killed (pbox.torch.shrink()). Needs root and hugepages; everything is torn
# down on exit.
#
#   tests/python/cluster.sh [BUILD_DIR]
set -uo pipefail

. "$(dirname "$0")/../net/lib.sh"

need_root python-cluster
N=4
wbw=10000
export DDP_WIDTH=512 # DDP's buckets rebuilt unlike its first step's
$py -c 'import torch' 2>/dev/null || { echo "python-cluster: no torch for $py"; exit 1; }
pbox_net_up "$tag" 2 "$N" || { bad "emulated network"; exit 1; }
restart_box 10000 || exit 1 # 2 ports of 10G: k = 2 for workers at 10G
echo "python-cluster: DDP, 4 ranks on 4 emulated hosts, each under torchrun, pboxd with 2 ports"

c0=$(stat completed)
# the box's state for the DDP job in proportion to its model: pbox holds the
# gradients' size (DDP's parameter broadcast at the start and its buckets of
# the first step let go: pbox_forget()), and the box two buffers of what the
# layout gave it (rank 0's figure) in whole chunks, as its last incarnation
# registered it: not one set per step in flight (it was 4x), nor the first
# step's buckets and the broadcast beside the rebuilt ones (2x)
at=$(wc -l <"$log/pboxd.log")
if torch_ddp pbox fp32 29604; then
	ok "DDP, fp32 parameters, through pboxd: trains ($(grep -oh 'pbox: .* per step' "$log/pbox-fp32-h0.log"))"
else
	bad "DDP, fp32 parameters, through pboxd"
fi
state=$(tail -n +"$((at + 1))" "$log/pboxd.log" | grep -E "job [0-9]* (registered|grew)" |
	grep -o '[0-9]* bytes of state' | tail -1 | cut -d' ' -f1)
read -r laid share grads chunk < <(sed -n 's/.*laid out \([0-9]*\) bytes (box \([0-9]*\)) for \([0-9]*\) bytes of gradients, in chunks of \([0-9]*\)$/\1 \2 \3 \4/p' \
	"$log/pbox-fp32-h0.log")
check "pbox holds the DDP job's model: ${laid:-?} bytes laid out for ${grads:-?} bytes of gradients (within 5%)" \
	awk -v l="${laid:-0}" -v g="${grads:-0}" 'BEGIN { exit !(g > 0 && l <= 1.05 * g) }'
# (the box's share of the model: of what pbox laid out, the gradients' part)
read -r ratio _ < <(box_state_ratio "$state" "$laid" "$share" "$grads" "$chunk")
check "the box's state for the DDP job: ${state:-?} bytes, ${ratio:-?} of two buffers of its share of the model, within 5% (${share:-?} bytes of ${laid:-?} laid out, in chunks of ${chunk:-?})" \
	awk -v r="${ratio:-0}" 'BEGIN { exit !(r > 0 && r <= 1.05) }'
at=$(wc -l <"$log/pboxd.log")
if torch_ddp pbox mixed 29605; then
	ok "DDP, mixed parameters, through pboxd: trains ($(grep -oh 'pbox: .* per step' "$log/pbox-mixed-h0.log"))"
else
	bad "DDP, mixed parameters, through pboxd"
fi
mixed_job=$(tail -n +"$((at + 1))" "$log/pboxd.log" | grep -o 'job [0-9]* registered' | head -1 | cut -d' ' -f2)
c1=$(stat completed)
if torch_ddp gloo fp32 29610; then
	ok "DDP, fp32 parameters, on Gloo over the same links ($(grep -oh 'gloo: .* per step' "$log/gloo-fp32-h0.log"))"
else
	bad "DDP on Gloo"
fi
check "fp32 through pboxd: final parameters equal on every rank, within 1e-4 of Gloo's" \
	$py "$src/tests/python/compare.py" "$log" pbox-fp32 gloo-fp32
check "fp32 and bf16 in one group through pboxd: final parameters equal on every rank" \
	$py "$src/tests/python/compare.py" "$log" pbox-mixed
c2=$(stat completed)
if torch_ddp hook fp32 29612 && $py "$src/tests/python/compare.py" "$log" hook-fp32 gloo-fp32; then
	ok "DDP on a Gloo group with pbox.torch.allreduce_hook through pboxd: parameters equal on every rank, within 1e-4 of Gloo's"
else
	bad "DDP on a Gloo group with pbox.torch.allreduce_hook through pboxd"
fi
c3=$(stat completed)
# (the mixed job registers with the dtype of its first sum, DDP's broadcast
# of the bf16 parameters, and grows by the other)
check "the box summed for them: 3 jobs registered, the mixed one holding a bf16 and an fp32 segment; $((c1 - c0)) fragments completed for the backend, $((c3 - c2)) for the hook" \
	bash -c "[ \$(grep -c 'registered by' '$log/pboxd.log') -ge 3 ] &&
		 grep -qE 'job $mixed_job (registered by .* bf16,|grew by [0-9]* bf16 chunks)' '$log/pboxd.log' &&
		 grep -qE 'job $mixed_job (registered by .* fp32,|grew by [0-9]* fp32 chunks)' '$log/pboxd.log' &&
		 [ $((c1 - c0)) -gt 0 ] && [ $((c3 - c2)) -gt 0 ]"
check "the box freed every job when training ended (jobs 0, state 0 bytes)" jobs_gone

# DDP over the box's memory: pboxd with hugepage_budget = 64M (about 18 MB
# of state after its mbuf pools: its metrics say), a model of 16.8 MB
# (DDP_WIDTH=2048) whose Theorem 1 share would need 20 MB of it for each
# call of the model's size (DDP's broadcast of the parameters, each
# step's buckets). The box takes what its rooms hold (ENDPOINTS), the
# SS_GPUs the rest, as DDP's buckets grow the job and when the backend
# lets the first ones go (a new incarnation reads the rooms again): trains,
# parameters equal on every rank and within 1e-4 of Gloo's, the box never
# over its budget, and rank 0 said its endpoints were full
box_cfg 10000
sed -i 's/^hugepage_budget = .*/hugepage_budget = 64M/' "$log/box.ini"
[ -n "$pboxd_pid" ] && kill "$pboxd_pid" 2>/dev/null && wait "$pboxd_pid" 2>/dev/null
pboxd_pid=
start_box || exit 1
sb=$(box_metric pbox_state_bytes_budget)
at=$(wc -l <"$log/pboxd.log")
if DDP_WIDTH=2048 PBOX_LOG_LEVEL=info torch_ddp pbox wide 29614 &&
	DDP_WIDTH=2048 torch_ddp gloo wide 29616; then
	ok "DDP of a 16.8 MB model through a box with ${sb:-?} bytes of state: trains ($(grep -oh 'pbox: .* per step' "$log/pbox-wide-h0.log"))"
else
	bad "DDP of a 16.8 MB model through a box with ${sb:-?} bytes of state"
fi
check "over the box's memory: final parameters equal on every rank, within 1e-4 of Gloo's" \
	$py "$src/tests/python/compare.py" "$log" pbox-wide gloo-wide
most=$(tail -n +"$((at + 1))" "$log/pboxd.log" | grep -E "job [0-9]* (registered|grew)" |
	grep -o '[0-9]* bytes of state' | cut -d' ' -f1 | sort -n | tail -1)
check "over the box's memory: the box held at most ${most:-?} bytes for the job, within its ${sb:-?}, and rank 0 said its endpoints were full" \
	bash -c "[ ${most:-0} -gt 0 ] && [ ${most:-0} -le ${sb:-0} ] &&
		grep -q 'box endpoints\\? full' '$log/pbox-wide-h0.log'"
restart_box 10000 || exit 1

# a training loop on the pbox group, through pboxd, and pboxd killed once
# every rank is at step 3: each rank catches the error, goes on without the
# box (pbox.torch.shrink(): k = 0, the box's chunks on their SS_GPUs) and
# finishes all 10 steps, every rank with the same parameters
pids=()
for ((i = 0; i < N; i++)); do
	wns "$i" env PYTHONPATH="$build/python" GLOO_SOCKET_IFNAME=eth0 PBOX_DATA_BANDWIDTH="${wbw}M" \
		PBOX_BOX="$boxaddr" RANK="$i" LOCAL_RANK=0 WORLD_SIZE="$N" LOCAL_WORLD_SIZE=1 \
		MASTER_ADDR=198.18.100.1 MASTER_PORT=29620 timeout 120 \
		$py "$src/tests/python/faults.py" rank survive-box - >"$log/survive-h$i.log" 2>&1 &
	pids+=($!)
done
for _ in $(seq 300); do
	[ "$(grep -l 'step 3$' "$log"/survive-h*.log 2>/dev/null | wc -l)" -eq "$N" ] && break
	sleep 0.1
done
kill -9 "$pboxd_pid"
wait "$pboxd_pid" 2>/dev/null
pboxd_pid=
for _ in $(seq 100); do # then pboxd again, taken back by pbox.torch.rejoin() at step 8
	[ "$(grep -l 'went on as' "$log"/survive-h*.log 2>/dev/null | wc -l)" -eq "$N" ] && break
	sleep 0.1
done
restart_box 10000 || exit 1
survived=1
for p in "${pids[@]}"; do wait "$p" || survived=0; done
grep -h "went on as\|rejoined" "$log"/survive-h*.log | cut -c1-220 | sed 's/^/        /'
check "pboxd killed mid-training: every rank goes on without the box (pbox.torch.shrink()), resuming the step in flight, to its last step, with equal parameters" \
	bash -c "[ $survived = 1 ] && [ \$(grep -l 'went on as rank [0-3] of 4 .*resuming the step' $log/survive-h*.log | wc -l) -eq $N ] &&
		 [ \$(grep -h 'ok, 10 steps' $log/survive-h*.log | awk '{ print \$NF }' | sort -u | wc -l) -eq 1 ] &&
		 [ \$(grep -l 'ok, 10 steps' $log/survive-h*.log | wc -l) -eq $N ]"
check "pboxd started again: pbox.torch.rejoin() at step 8 takes it back on every rank (k = 2); then reduce_scatter_tensor, all_gather_into_tensor and broadcast through it, exact" \
	bash -c "[ \$(grep -l 'step 8: rejoined, k=2.00' $log/survive-h*.log | wc -l) -eq $N ] &&
		 [ \$(grep -l 'ok, 10 steps' $log/survive-h*.log | wc -l) -eq $N ]"
echo "python-cluster: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
