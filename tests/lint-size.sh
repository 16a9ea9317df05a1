#!/usr/bin/env bash
# Functions of at most MAX lines (default 80, signature to closing brace):
# make lint holds libpbox's sources to it, so that each function reads in
# one screen. Prints each longer one with its file, line and length; exit 1
# if any.
#
#   tests/lint-size.sh [-m MAX] FILE...
set -uo pipefail
max=80
if [ "${1:-}" = -m ]; then
	max=$2
	shift 2
fi
awk -v max="$max" '
	FNR == 1 { start = 0 }
	# a function body opens with "{" alone at column 0; its signature starts
	# at the last line before it that begins at column 0
	/^[^ \t{}#\/*]/ { sig = FNR; name = $0 }
	/^\{$/ { start = sig; what = name }
	/^\}/ && start {
		n = FNR - start + 1
		if (n > max) {
			sub(/\(.*/, "", what)
			printf "%s:%d: %s is %d lines (at most %d)\n", FILENAME, start, what, n, max
			bad = 1
		}
		start = 0
	}
	END { exit bad }
' "$@"
