#!/usr/bin/env bash
# Tests of deploy/ that need no image and change nothing on this host:
# make install / uninstall into a staging DESTDIR, the units it installs,
# and pbox-setup --dry-run on good and bad configurations (every error names
# the file, section or device). The image itself: make image && make boot-test.
#
#   tests/deploy/deploy.sh [BUILD_DIR]
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
tmp=$(mktemp -d /tmp/pbox-deploy.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. "$src/tests/check.sh"
setup="$src/deploy/pbox-setup"
export PBOXD="$build/bin/pboxd" # the one it asks to read the config

echo "deploy: make install, pbox-setup"

# install and uninstall, staged
dest=$tmp/root
make -s -C "$src" BUILD="$build" install DESTDIR="$dest" PREFIX=/usr >"$tmp/install.log" 2>&1
check "make install PREFIX=/usr DESTDIR=...: binaries, library, header, units, docs" \
	test -x "$dest/usr/bin/pboxd" -a -x "$dest/usr/bin/pboxctl" -a -x "$dest/usr/sbin/pbox-setup" -a \
	-L "$dest/usr/lib/libpbox.so.3" -a -f "$dest/usr/include/pbox.h" -a \
	-f "$dest/lib/systemd/system/pboxd.service" -a -f "$dest/lib/systemd/system/pbox-setup.service" -a \
	-f "$dest/usr/share/doc/pbox/examples/box-pbox.ini"
check "the installed Python package loads the installed libpbox" \
	env PBOX_LIB="$dest/usr/lib/libpbox.so.3" PYTHONPATH="$dest/usr/lib/python3/dist-packages" \
	python3 -c 'import pbox, sys; sys.exit(0 if pbox.library.pbox_version() and pbox.__file__.startswith(sys.argv[1]) else 1)' "$dest"
check "the installed pboxd runs (--check-config on an example)" \
	bash -c "'$dest/usr/bin/pboxd' --check-config '$src/config/examples/box-emulated.ini' >/dev/null"
check "units name the installed paths, pboxd ordered after pbox-setup and restarted on failure" \
	bash -c "grep -q '^ExecStart=/usr/bin/pboxd /etc/pbox/box.ini' '$dest/lib/systemd/system/pboxd.service' &&
		grep -q '^ExecStart=/usr/sbin/pbox-setup' '$dest/lib/systemd/system/pbox-setup.service' &&
		grep -q '^After=pbox-setup.service' '$dest/lib/systemd/system/pboxd.service' &&
		grep -q '^Restart=on-failure' '$dest/lib/systemd/system/pboxd.service' &&
		! grep -q '@[A-Z]*@' '$dest'/lib/systemd/system/*.service"
# (the commands are not on this host's /usr: only that may be said)
check "systemd-analyze verify: the units are valid (no unknown key, no bad dependency)" \
	bash -c "command -v systemd-analyze >/dev/null &&
		systemd-analyze verify '$dest/lib/systemd/system/pboxd.service' \
		'$dest/lib/systemd/system/pbox-setup.service' 2>&1 | grep -v 'is not executable' | (! grep .)"
make -s -C "$src" BUILD="$build" uninstall DESTDIR="$dest" PREFIX=/usr >"$tmp/uninstall.log" 2>&1
check "make uninstall removes every file install put" \
	bash -c "! find '$dest' -type f -o -type l | grep ."

# pbox-setup --dry-run
cfg() { # NAME CONTENT
	printf '%s\n' "$2" >"$tmp/$1.ini"
	echo "$tmp/$1.ini"
}
base="[management]
address = 198.18.0.1
key_file = $tmp/box.key
[memory]
hugepage_budget = 1G"
good=$(cfg good "$base
[port v0]
vdev = net_null0
ip = 198.18.1.1
bandwidth = 10G")
out=$("$setup" --dry-run "$good" 2>&1)
check "dry run on a good config: 1 GB + 512 MB of pools = 768 pages of 2 MB, nothing bound, ready" \
	bash -c "grep -q 'would reserve 768 pages of 2 MB\|would run: sh -c echo 768' <<<'$out' && grep -q 'ready for pboxd' <<<'$out'"
check "dry run: the box key of [management] key_file would be made on this first boot" \
	grep -q "would make a new box key in $tmp/box.key" <<<"$out"
"$setup" --keygen "$tmp/box.key" >"$tmp/keygen.log" 2>&1
check "pbox-setup --keygen: 64 hex digits, readable by root alone, and never over an existing key" \
	bash -c "grep -qxE '[0-9a-f]{64}' '$tmp/box.key' && [ \$(stat -c %a '$tmp/box.key') = 600 ] &&
		! '$setup' --keygen '$tmp/box.key' >/dev/null 2>&1 && grep -qxE '[0-9a-f]{64}' '$tmp/box.key'"
out=$("$setup" --dry-run "$tmp/none.ini" 2>&1)
check "a missing config is named" grep -q "none.ini: no such file" <<<"$out"
bad_size=$(cfg badsize "${base/1G/lots}")
out=$("$setup" --dry-run "$bad_size" 2>&1)
check "a bad hugepage_budget is named with its line and section (pboxd's own parser)" \
	grep -q "badsize.ini:5: \[memory\] hugepage_budget: 'lots' is not a number" <<<"$out"
nopci=$(cfg nopci "$base
[port d0]
pci = 0000:ff:1f.7
ip = 198.18.1.1
bandwidth = 10G")
out=$("$setup" --dry-run "$nopci" 2>&1)
rc=$?
check "a data NIC that is not there is named, and setup fails" \
	bash -c "[ $rc -eq 1 ] && grep -q 'pci = 0000:ff:1f.7: no such PCI device' <<<'$out'"
commented=$(cfg commented "$base ; a comment
; [port x] pci = 0000:ff:1f.7
[port v0] ; the null port
vdev = net_null0 ; no PCI
ip = 198.18.1.1
bandwidth = 10G ; line rate")
out=$("$setup" --dry-run "$commented" 2>&1)
check "comments are not read as keys or sections" grep -q "ready for pboxd" <<<"$out"

echo "deploy: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
