#!/usr/bin/env bash
# libpbox loads on a host without DPDK (a GPU machine): the library needs no
# librte_* (the DPDK transport is the module pbox-3/dpdk.so), and a
# worker-only build (make worker) compiles with no DPDK header in reach.
#   tests/deps.sh BUILD
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
fail=0
check() { # what, command...
	local what=$1
	shift
	if "$@"; then echo "  ok    $what"; else echo "  FAIL  $what"; fail=1; fi
}
needs() { ldd "$1" | awk '{print $1}'; }

echo "deps: what libpbox and its modules load"
lib=$(readlink -f "$build/lib/libpbox.so.3")
needs "$lib" | sed 's/^/        libpbox: /'
check "libpbox.so.3 needs no DPDK library" bash -c "! ldd '$lib' | grep -q librte_"
check "libpbox.so.3 needs no CUDA library" bash -c "! ldd '$lib' | grep -qE 'libcuda|libcudart'"
check "pbox-3/dpdk.so carries the DPDK transport" \
	bash -c "ldd '$build/lib/pbox-3/dpdk.so' | grep -q librte_ethdev &&
		 nm -D --defined-only '$build/lib/pbox-3/dpdk.so' | grep -q ' pbox_module_dpdk_open'"

tmp=$(mktemp -d /tmp/pbox-deps.XXXXXX)
trap 'rm -rf "$tmp" "$tmp.log"' EXIT
# DPDK's headers are under /usr/include/dpdk: without DPDK_CFLAGS none is found
check "make worker builds without DPDK's flags" \
	bash -c "make --no-print-directory BUILD='$tmp' DPDK_LIBS= DPDK_CFLAGS= worker >'$tmp.log' 2>&1 ||
		 { cat '$tmp.log'; false; }"
check "that libpbox needs no DPDK library either" \
	bash -c "test -e '$tmp/lib/libpbox.so.3' && ! ldd '$tmp/lib/libpbox.so.3' | grep -q librte_"
exit $fail
