#!/usr/bin/env bash
# What a host needs to build, test and demo pbox: the one list of Debian
# packages, 2 MB hugepages and a hugetlbfs mount. `make demo`, `make test`
# and `.ci/run` call it first; it installs only what is missing, says what,
# and does nothing when everything is there.
#
#   deploy/host-setup.sh [--perf] [--image] [--check]
#     --perf    also what the perf harnesses need (Gloo, gnuplot, dpdk-testpmd)
#     --image   also what `make image` / `make boot-test` need (mmdebstrap, qemu, GRUB)
#     --check   install nothing: list what is missing, exit 1 if anything is
#
# Needs root to install (Debian 12 or Ubuntu 22.04+, apt). Hugepages:
# HUGEPAGES (default 512 x 2 MB) unless the machine already has as many.
set -euo pipefail

# build: compilers, DPDK 22.11, libnuma, libinih (config), Check (unit tests),
#        libmicrohttpd (pboxd's /metrics), libsodium (MACs, the control handshake)
# test:  lint (cppcheck, clang-format), libFuzzer and sanitizers (clang,
#        compiler-rt), the emulated network (iproute2, ping, the tc BPF loss
#        program: libbpf), Prometheus (promtool and a server for the scrape
#        test), curl, PyTorch (the pbox backend's DDP test), systemd
#        (systemd-analyze verify of the installed units), venv, pip,
#        setuptools and wheel (make wheel, and the wheel installed in a venv)
# perf:  Gloo's ring (perf/cluster), gnuplot for the charts, torchvision
#        (perf/train's models), dpdk-dev
#        (dpdk-testpmd for perf/dataplane)
# image: mmdebstrap, GRUB for BIOS (UEFI's signed shim and GRUB come from the
#        image's mirror), partitioning, ext4 and FAT (the ESP, by dosfstools
#        and mtools), qemu and OVMF for the boot test
pkgs_build=(build-essential pkg-config git libdpdk-dev dpdk libnuma-dev libinih-dev check
	libsubunit-dev libmicrohttpd-dev libsodium-dev)
pkgs_test=(cppcheck clang-format clang libclang-rt-14-dev iproute2 iputils-ping procps
	libbpf-dev linux-libc-dev prometheus curl ca-certificates python3 python3-torch systemd
	python3-venv python3-pip python3-setuptools python3-wheel)
pkgs_perf=(libgloo-dev gnuplot-nox dpdk-dev python3-torchvision)
pkgs_image=(mmdebstrap grub-pc-bin dosfstools mtools fdisk e2fsprogs qemu-system-x86 qemu-utils ovmf)

perf=0 image=0 check=0
for a in "$@"; do
	case $a in
	--perf) perf=1 ;;
	--image) image=1 ;;
	--check) check=1 ;;
	*)
		echo "host-setup: unknown option '$a' (--perf, --image, --check)" >&2
		exit 2
		;;
	esac
done

want=("${pkgs_build[@]}" "${pkgs_test[@]}")
[ $perf = 1 ] && want+=("${pkgs_perf[@]}")
[ $image = 1 ] && want+=("${pkgs_image[@]}")

missing=()
for p in "${want[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
	if [ $check = 1 ]; then
		echo "host-setup: missing packages: ${missing[*]}"
		exit 1
	fi
	if [ "$(id -u)" != 0 ]; then
		echo "host-setup: missing packages: ${missing[*]}" >&2
		echo "host-setup: run as root (or: sudo apt-get install ${missing[*]})" >&2
		exit 1
	fi
	command -v apt-get >/dev/null || {
		echo "host-setup: no apt-get: pbox's set-up needs Debian 12 or Ubuntu 22.04+" >&2
		exit 1
	}
	echo "host-setup: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# prometheus' maintainer scripts start its service where systemd runs;
	# policy-rc.d keeps this host's services as they are.
	prc=/usr/sbin/policy-rc.d
	made_prc=0
	if [ ! -e $prc ]; then
		printf '#!/bin/sh\nexit 101\n' >$prc && chmod 0755 $prc && made_prc=1
	fi
	rc=0
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/pbox-host-setup.log 2>&1 || rc=$?
	[ $made_prc = 1 ] && rm -f $prc
	if [ $rc != 0 ]; then
		tail -20 /tmp/pbox-host-setup.log >&2
		echo "host-setup: apt-get install failed (log: /tmp/pbox-host-setup.log)" >&2
		exit 1
	fi
	echo "host-setup: installed ${#missing[@]} packages"
fi

# Hugepages for the DPDK tests: HUGEPAGES x 2 MB and a hugetlbfs mount.
want_hp=${HUGEPAGES:-512}
hp=/proc/sys/vm/nr_hugepages
have_hp=$(cat $hp)
mnt_ok=0
grep -qs ' hugetlbfs ' /proc/mounts && mnt_ok=1
if [ "$have_hp" -ge "$want_hp" ] && [ $mnt_ok = 1 ]; then
	exit 0
fi
if [ $check = 1 ]; then
	[ "$have_hp" -ge "$want_hp" ] || echo "host-setup: $have_hp hugepages, want $want_hp"
	[ $mnt_ok = 1 ] || echo "host-setup: no hugetlbfs mount"
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "host-setup: hugepages ($have_hp of $want_hp) or the hugetlbfs mount missing: run as root" >&2
	exit 1
fi
if [ "$have_hp" -lt "$want_hp" ]; then
	echo "$want_hp" >$hp 2>/dev/null || true
	got=$(cat $hp)
	echo "host-setup: hugepages $have_hp -> $got x 2 MB"
	[ "$got" -ge "$want_hp" ] || {
		echo "host-setup: the kernel gave $got of $want_hp hugepages (memory fragmented?)" >&2
		exit 1
	}
fi
if [ $mnt_ok = 0 ]; then
	mkdir -p /dev/hugepages
	mount -t hugetlbfs nodev /dev/hugepages
	echo "host-setup: mounted hugetlbfs on /dev/hugepages"
fi
