#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# libpbox's files in layers: each file calls only the files before it in
# the order given (the Makefile's LIBPBOX_LAYERS, bottom first), so the
# files form no cycle of calls and a newcomer can read them bottom up.
# What a file calls is read from its object: every symbol it needs that
# another of the files defines (nm), calls and address-takings alike.
#
#   tests/lint-calls.sh OBJDIR FILE...      (FILE: a name in worker/, no .c)
#
# Prints each call up the order with the symbols it needs; exit 1 if any.
set -uo pipefail
dir=$1
shift
declare -A rank_of def_of
i=0
for f in "$@"; do
	rank_of[$f]=$i
	i=$((i + 1))
	[ -r "$dir/$f.o" ] || { echo "lint-calls: no $dir/$f.o" >&2; exit 2; }
	while read -r sym; do def_of[$sym]=$f; done < <(nm --defined-only "$dir/$f.o" |
		awk '$2 ~ /^[TDBR]$/ {print $3}')
done
bad=0
for f in "$@"; do
	declare -A up=()
	while read -r sym; do
		d=${def_of[$sym]:-}
		[ -n "$d" ] && [ "$d" != "$f" ] && [ "${rank_of[$d]}" -gt "${rank_of[$f]}" ] &&
			up[$d]+=" $sym"
	done < <(nm --undefined-only "$dir/$f.o" | awk '{print $2}')
	for d in "${!up[@]}"; do
		echo "worker/$f.c calls worker/$d.c, which is above it:${up[$d]}" >&2
		bad=1
	done
	unset up
done
[ $bad = 0 ] || echo "lint-calls: the order is the Makefile's LIBPBOX_LAYERS (worker/README.md)" >&2
exit $bad
