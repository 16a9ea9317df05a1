# shellcheck shell=bash
# PASS/FAIL lines and their counts, for the shell test scripts
# (tests/net/lib.sh, tests/deploy/deploy.sh, deploy/boot-test.sh). Source it;
# CHECK_SUFFIX, if it is a function name, adds to each PASS line (e.g. the
# time so far).
pass=0
fail=0
ok() { echo "  PASS  $*${CHECK_SUFFIX:+$($CHECK_SUFFIX)}"; pass=$((pass + 1)); }
bad() { echo "  FAIL  $*"; fail=$((fail + 1)); }
check() { # DESCRIPTION COMMAND...
	local d=$1
	shift
	if "$@"; then ok "$d"; else bad "$d"; fi
}
