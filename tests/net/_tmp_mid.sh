#!/usr/bin/env bash
set -uo pipefail
N=4; B=${B:-1000}; ports=2
. "$(dirname "$0")/lib.sh"
harness mid
pbox_net_up "$tag" "$ports" "$N" || exit 1
shape 0 || exit 1
for s in ${SIZES:-512K}; do
	worker_cfgs 0 "priority = 0"
	bench_all "mid-$s" --size "$s" --iters ${ITERS:-50} --sync --warmup 3 >/dev/null
	echo "== $s"; grep -h "RESULT" "$log/mid-$s"-w*.log | grep -o "mean_ms=[0-9.]*" | tr '\n' ' '; echo
	grep -h "retransmits\|recovery\|datagrams" "$log/mid-$s-w0.log"
done
