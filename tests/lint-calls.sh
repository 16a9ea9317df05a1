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
# The same order holds for headers: worker/F.c includes the header of
# worker/G.c (wk_G.h) only where G is F itself or below it.
#
# Prints each call and each include up the order; exit 1 if any.
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
src=$(dirname "$0")/../worker
for f in "$@"; do
	[ -r "$src/$f.c" ] || continue
	while read -r g; do
		r=${rank_of[$g]:-}
		if [ -z "$r" ]; then
			[ "$g" = ctx ] || { echo "worker/$f.c includes wk_$g.h, of no file in the order" >&2; bad=1; }
		elif [ "$r" -gt "${rank_of[$f]}" ]; then
			echo "worker/$f.c includes wk_$g.h, the header of worker/$g.c, which is above it" >&2
			bad=1
		fi
	done < <(sed -n 's/^#include "wk_\([a-z_]*\)\.h"$/\1/p' "$src/$f.c")
done
[ $bad = 0 ] || echo "lint-calls: the order is the Makefile's LIBPBOX_LAYERS (worker/README.md)" >&2
exit $bad
