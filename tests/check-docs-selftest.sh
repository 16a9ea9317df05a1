#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# make check-docs checks its own checks, in a scratch repository: a planted
# dead link, a link out of the repository and a README figure that
# docs/performance.md does not give must each fail; a good link and a
# recorded figure must pass.
#
#   tests/check-docs-selftest.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/pbox-docs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
git -C "$tmp" init -q
links() { printf '# a\n\n%s\n' "$1" >"$tmp/a.md" && (cd "$tmp" && "$here/check-links.sh") >/dev/null 2>&1; }
figures() {
	printf '## Measured\n\n| what | figure | command |\n| --- | --- | --- |\n| a run | %s | make x |\n' "$1" >"$tmp/README.md"
	printf 'The run: %s.\n' "$2" >"$tmp/perf.md"
	"$here/check-figures.py" "$tmp/README.md" "$tmp/perf.md" >/dev/null
}
fail() { echo "check-docs: $*"; exit 1; }
printf '# b\n' >"$tmp/b.md"
links '[b](b.md)' || fail "a good link was refused"
links '[b](nowhere.md)' && fail "a planted dead link passed"
links '[b](../../outside.md)' && fail "a planted link out of the repository passed"
links '[b](https://example.org/)' && fail "a planted URL passed"
figures '1.19×' '1.190' || fail "a recorded figure was refused"
figures '1.777' '1.234' && fail "a planted figure the record lacks passed"
figures 'fast' '1.234' && fail "a headline with no figure passed"
echo "docs: the checks fail on a planted dead link, a link out of the repository and a figure the record lacks"
