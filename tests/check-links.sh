#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# make check-docs: every Markdown link in the repository's documents points
# to a file of the repository that exists: none leaves the repository (a
# URL, or a path above its root, which a clone does not have) and none
# points nowhere. Anchors (#...) are not followed.
#
#   tests/check-links.sh        (from the repository's root)
#
# Prints each bad link as FILE:LINE: TARGET: why; exit 1 if any.
set -uo pipefail
root=$(pwd -P)
bad=0
while IFS= read -r md; do
	dir=$(dirname "$md")
	while IFS=: read -r line target; do
		t=${target%%#*}
		[ -z "$t" ] && continue # an anchor in the same file
		case $t in
		*://* | mailto:*)
			echo "$md:$line: $target: leaves the repository" >&2
			bad=1
			continue
			;;
		esac
		p=$(realpath -m "$dir/$t")
		if [[ $p != "$root"/* ]]; then
			echo "$md:$line: $target: outside the repository (a clone does not have it)" >&2
			bad=1
		elif [ ! -e "$p" ]; then
			echo "$md:$line: $target: no such file" >&2
			bad=1
		fi
	done < <(grep -noE '\]\([^) ]+\)' "$md" | sed -E 's/^([0-9]+):\]\((.*)\)$/\1:\2/')
done < <(git ls-files --cached --others --exclude-standard '*.md')
[ $bad = 0 ] && echo "docs: every link in the repository's Markdown points to a file in it"
exit $bad
