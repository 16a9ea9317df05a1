#!/usr/bin/env bash
# The layering make lint holds the tree to:
#   nic/            the wire and NIC layer: includes only nic/ headers
#   appliance/ss/   the SS core and sum kernels (linked by pboxd and libpbox):
#                   only its own headers and nic/'s, and no DPDK header
#   worker/dpdk.c   the DPDK transport module: libpbox's transport interface
#                   (transport.h) and public header, never its internals
# Prints each offending include with its file and line; exit 1 if any.
set -uo pipefail
cd "$(dirname "$0")/.."
bad=0

# layer DIR ALLOWED_DIRS...: every #include "x" in DIR resolves in ALLOWED_DIRS
layer() {
	local dir=$1 f line inc d found
	shift
	for f in "$dir"/*.[ch]; do
		while IFS=: read -r line inc; do
			inc=${inc#*\"}
			inc=${inc%%\"*}
			found=0
			for d in "$@"; do [ -e "$d/$inc" ] && found=1; done
			if [ $found = 0 ]; then
				echo "$f:$line: includes \"$inc\", which is not in ${*}" >&2
				bad=1
			fi
		done < <(grep -n '^#include "' "$f")
	done
}

layer nic nic
layer appliance/ss appliance/ss nic
if grep -nE '^#include <(rte_|dpdk/)' appliance/ss/*.[ch] >&2; then
	echo "appliance/ss: the SS core must not include DPDK headers" >&2
	bad=1
fi
if grep -nE '^#include "(wk_[a-z_]+|local)\.h"' worker/dpdk.c worker/transport.h >&2; then
	echo "worker/dpdk.c: a module sees transport.h, not libpbox's internals" >&2
	bad=1
fi
exit $bad
