#!/usr/bin/env bash
# deploy/boot-test.sh: boot the appliance image as a multi-NIC server in qemu
# and use it as a worker would.              (make boot-test, after make image)
#
#   deploy/boot-test.sh [BUILD_DIR] [IMAGE_DIR]
#
# The server: q35 with an emulated IOMMU (intel-iommu), KVM where /dev/kvm
# works (else TCG), 2 CPUs, booted by FIRMWARE: bios (SeaBIOS, GRUB from the
# MBR), uefi (OVMF, shim and GRUB from the ESP's removable-media path, a
# fresh NVRAM with no boot entry) or uefi-sb (the same with Secure Boot on:
# OVMF with Microsoft's keys enrolled, so shim, GRUB and the kernel must
# each pass its signature check), the image's disk (GRUB, the kernel, systemd;
# written to a snapshot, the image stays as built), a config drive labelled
# PBOXCFG with box.ini and the management NIC's .network, a management NIC
# and 4 virtio-net data NICs (behind the IOMMU). Every NIC is a tap in a
# network namespace of this test: management 198.18.0.1 (guest) and
# 198.18.0.2 (here), data port J 198.18.J.1 (pboxd, DPDK's virtio driver on
# vfio-pci) and 198.18.J.2 (here).
#
# It checks, in order: pboxd comes up from systemd by itself and lists the 4
# data NICs as endpoints; W pbox-client workers (the protocol test client)
# push ROUNDS rounds of BYTES through the taps, every sum verified by every
# worker; the box's counters read over the management NIC (STATS) agree;
# a clean shutdown (ACPI power button: systemd stops pboxd, the machine
# powers off). Prints PASS/FAIL lines and the time each step took.
# Needs root, qemu-system-x86, ovmf for uefi and uefi-sb, and the image.
#   FIRMWARE (bios), W (2), ROUNDS (20), BYTES (4M), BOOT_TIMEOUT (300 s)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
img=${2:-$build/image}
W=${W:-2}
ROUNDS=${ROUNDS:-20}
BYTES=$(numfmt --from=iec "${BYTES:-4M}")
BOOT_TIMEOUT=${BOOT_TIMEOUT:-300}
FIRMWARE=${FIRMWARE:-bios}
ovmf=/usr/share/OVMF
. "$src/tests/net/pbox-net.sh"
client="$build/bin/pbox-client"
ns="pbox-boot$$"
mgmt=198.18.0.1:9570
log=$(mktemp -d /tmp/pbox-boot.XXXXXX)
qemu_pid=""
t_start=$(date +%s)
elapsed() { echo "  ($(($(date +%s) - t_start)) s)"; }
CHECK_SUFFIX=elapsed
. "$src/tests/check.sh"

[ "$(id -u)" -eq 0 ] || { echo "boot-test: needs root"; exit 1; }
command -v qemu-system-x86_64 >/dev/null || { echo "boot-test: no qemu: apt-get install qemu-system-x86"; exit 1; }
[ -r "$img/pbox.raw" ] || { echo "boot-test: no $img/pbox.raw: make image"; exit 1; }
[ -x "$client" ] || { echo "boot-test: no $client: make"; exit 1; }
smm=
case $FIRMWARE in
bios) firmware=() ;;
uefi) code=OVMF_CODE.fd vars=OVMF_VARS.fd ;;
uefi-sb) code=OVMF_CODE.secboot.fd vars=OVMF_VARS.ms.fd smm=,smm=on ;;
*) echo "boot-test: FIRMWARE=$FIRMWARE: bios, uefi or uefi-sb"; exit 1 ;;
esac
if [ "$FIRMWARE" != bios ] && { [ ! -r "$ovmf/$code" ] || [ ! -r "$ovmf/$vars" ]; }; then
	echo "boot-test: no $ovmf/$code or $vars: apt-get install ovmf"
	exit 1
fi

cleanup() {
	if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
		kill "$qemu_pid" 2>/dev/null
		sleep 1
		kill -9 "$qemu_pid" 2>/dev/null
	fi
	ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
	ip netns del "$ns" 2>/dev/null
	if [ "$fail" -ne 0 ]; then echo "boot-test: logs kept in $log (console.log: the server's console)"; else rm -rf "$log"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_ns() { ip netns exec "$ns" "$@"; }
ctl() { in_ns "$build/bin/pboxctl" --box "$mgmt" request "$1"; }

# the host side: one tap per NIC, in our namespace
ip netns add "$ns" && ip -n "$ns" link set lo up || exit 1
for j in 0 1 2 3 4; do
	ip -n "$ns" tuntap add dev "tap$j" mode tap &&
		ip -n "$ns" addr add "198.18.$j.2/24" dev "tap$j" &&
		ip -n "$ns" link set "tap$j" up || { bad "tap$j"; exit 1; }
done

# the config drive: box.ini for the 4 data NICs (PCI slots 0x10..0x13 below)
# and a static management address
mkdir -p "$log/cfg"
# the box key travels on the drive (pbox-setup installs it as
# /etc/pbox/box.key); the registrar and pboxctl here hold a copy
pbox_keygen "$log/cfg/box.key"
export PBOX_BOX_KEY_FILE=$log/cfg/box.key
cat >"$log/cfg/box.ini" <<EOF
; the boot test's box: 4 virtio-net data NICs behind an emulated IOMMU
[management]
address = 198.18.0.1
[cores]
list = 1
[memory]
hugepage_budget = 256M
[data]
mtu = 1500
[polling]
mode = adaptive
EOF
for j in 1 2 3 4; do
	printf '[port d%d]\npci = 0000:00:%02x.0\nip = 198.18.%d.1\nbandwidth = 10G\n' \
		"$j" $((0x10 + j - 1)) "$j" >>"$log/cfg/box.ini"
done
cat >"$log/cfg/mgmt.network" <<EOF
[Match]
MACAddress=52:54:00:00:00:10
[Network]
Address=198.18.0.1/24
EOF
truncate -s 8M "$log/cfg.img"
mkfs.ext4 -q -L PBOXCFG -d "$log/cfg" "$log/cfg.img" || { bad "config drive"; exit 1; }
if [ "$FIRMWARE" != bios ]; then # the firmware read-only, its variables a copy (no boot entry)
	cp "$ovmf/$vars" "$log/vars.fd"
	firmware=(-drive "if=pflash,format=raw,unit=0,readonly=on,file=$ovmf/$code"
		-drive "if=pflash,format=raw,unit=1,file=$log/vars.fd")
	# Secure Boot's variables are writable by SMM only; OVMF's SMM build
	# stops before any output where the chipset offers S3
	[ -n "$smm" ] && firmware+=(-global driver=cfi.pflash01,property=secure,value=on
		-global ICH9-LPC.disable_s3=1)
fi

# KVM when the image's kernel really boots under it (it then panics at once
# for want of a root, and the machine stops): nested KVM may hang a Linux
# guest, or refuse the ARCH_CAPABILITIES MSR (left out). Else TCG
accel=tcg cpu=max
if [ -w /dev/kvm ]; then
	timeout 20 qemu-system-x86_64 -machine q35,accel=kvm -cpu host,-arch-capabilities -m 256 \
		-nodefaults -display none -serial "file:$log/kvm-probe.log" -no-reboot \
		-kernel "$img/vmlinuz" -append "console=ttyS0 panic=-1" >/dev/null 2>&1
	if grep -q "Kernel panic" "$log/kvm-probe.log" 2>/dev/null; then
		accel=kvm cpu=host,-arch-capabilities
	else
		echo "boot-test: /dev/kvm is there but a guest kernel does not boot under it: TCG"
	fi
fi
# shellcheck disable=SC2054 # commas belong to qemu options
nics=(-netdev tap,id=m0,ifname=tap0,script=no,downscript=no
	-device virtio-net-pci,netdev=m0,mac=52:54:00:00:00:10,addr=0x8)
for j in 1 2 3 4; do
	nics+=(-netdev "tap,id=d$j,ifname=tap$j,script=no,downscript=no"
		-device "virtio-net-pci,netdev=d$j,mac=52:54:00:00:01:0$j,addr=0x$((10 + j - 1)),disable-legacy=on,iommu_platform=on,ats=on")
done
echo "boot-test: qemu ($accel, $FIRMWARE): q35 + intel-iommu, 2 CPUs, 2 GB, 1 management and 4 data NICs; logs in $log"
in_ns qemu-system-x86_64 -machine q35,accel="$accel",kernel-irqchip=split$smm -cpu "$cpu" -smp 2 -m 2048 \
	"${firmware[@]}" -device intel-iommu,intremap=on,caching-mode=on,device-iotlb=on \
	-drive file="$img/pbox.raw",format=raw,if=virtio,snapshot=on \
	-drive file="$log/cfg.img",format=raw,if=virtio,readonly=on \
	"${nics[@]}" -display none -serial "file:$log/console.log" \
	-monitor tcp:127.0.0.1:4444,server,nowait -no-reboot >"$log/qemu.log" 2>&1 &
qemu_pid=$!

# 1. pboxd up by itself, 4 endpoints
up=0
for ((s = 0; s < BOOT_TIMEOUT; s += 2)); do
	kill -0 "$qemu_pid" 2>/dev/null || break
	if ctl ENDPOINTS >"$log/endpoints.txt" 2>/dev/null; then
		up=1
		break
	fi
	sleep 2
done
if [ "$up" -eq 0 ]; then
	bad "pboxd up from systemd within $BOOT_TIMEOUT s (console below)"
	tail -40 "$log/console.log" | sed 's/^/        /'
	exit 1
fi
ok "booted ($FIRMWARE); pboxd up from systemd, serving on the management NIC: $(tail -1 "$log/endpoints.txt")"
if [ "$FIRMWARE" != bios ]; then # not a fallback: the kernel found the firmware's EFI tables
	if grep -q "efi: EFI v.* by EDK II" "$log/console.log"; then
		ok "UEFI boot: shim and GRUB from the ESP's EFI/BOOT with no NVRAM entry; the kernel on OVMF's EFI"
	else
		bad "UEFI boot: no 'efi: EFI v... by EDK II' from the kernel"
	fi
	sb=$(grep -o "secureboot: Secure boot [a-z]*" "$log/console.log" | head -1)
	if [ "$FIRMWARE" = uefi-sb ] && [ "$sb" = "secureboot: Secure boot enabled" ]; then
		ok "Secure Boot on: shim, GRUB and the kernel passed their signature checks ($sb; $(grep -o 'Kernel is locked down[^;]*' "$log/console.log" | head -1))"
	elif [ "$FIRMWARE" = uefi ] && [ "$sb" != "secureboot: Secure boot enabled" ]; then
		ok "Secure Boot off: ${sb:-no secureboot line}"
	else
		bad "Secure Boot: $FIRMWARE, but the kernel says '${sb:-nothing}'"
	fi
fi
n_eps=$(grep -c '^EP ' "$log/endpoints.txt")
if [ "$n_eps" -eq 4 ] && grep -q 'ip=198.18.4.1' "$log/endpoints.txt"; then
	ok "the 4 virtio data NICs are pboxd's endpoints (DPDK on vfio-pci behind the IOMMU)"
else
	bad "4 endpoints, got $n_eps"
fi

# 2. workers push through the taps; each verifies every sum
common=(--box "$mgmt" --job 1 --token 7919 --n "$W" --dtype fp32 --bytes "$BYTES" --quiet --deadline-s 120)
# not through in_ns: $! must be the client itself
# every worker sends from 198.18.0.2 (this namespace's management address)
# through whichever tap reaches the endpoint: one address per rank, which the
# box binds the rank to
ranks=$(for ((i = 0; i < W; i++)); do printf '%s198.18.0.2:%d' "$([ "$i" -gt 0 ] && echo ,)" $((9700 + i)); done)
ip netns exec "$ns" "$client" "${common[@]}" --rank 0 --register --ranks "$ranks" --hold --rounds 0 \
	>"$log/reg.log" 2>&1 &
reg=$!
for _ in $(seq 100); do grep -q registered "$log/reg.log" 2>/dev/null && break; sleep 0.1; done
pids=()
t0=$(date +%s.%N)
for ((i = 0; i < W; i++)); do
	in_ns "$client" "${common[@]}" --rank "$i" --addr 198.18.0.2 --port $((9700 + i)) \
		--rounds "$ROUNDS" >"$log/w$i.log" 2>&1 &
	pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
t1=$(date +%s.%N)
if [ "$rc" -eq 0 ]; then
	ok "$W workers, $ROUNDS rounds of $BYTES bytes fp32 through 4 taps: every sum verified" \
		"($(awk -v a="$t0" -v b="$t1" -v r="$ROUNDS" -v n="$BYTES" 'BEGIN { printf "%.2f Gb/s of tensor per worker", r * n * 8 / (b - a) / 1e9 }'))"
else
	bad "workers: every sum verified"
	cat "$log"/w*.log | tail -20 | sed 's/^/        /'
fi

# 3. telemetry over the management NIC
ctl STATS >"$log/stats.txt" 2>&1
ctl LIST >"$log/list.txt" 2>&1
kill "$reg" 2>/dev/null
wait "$reg" 2>/dev/null
v() { sed -n "s/^STAT $1=//p" "$log/stats.txt"; }
completed=$(v completed) results=$(v results)
if [ -n "$completed" ] && [ "$completed" -gt 0 ] && [ "$results" -eq $((W * completed)) ] &&
	grep -q '^JOB id=1 ' "$log/list.txt"; then
	ok "telemetry over the management NIC: $completed fragments completed, $results results, job 1 listed," \
		"$(v rx_pkts) frames in, $(v drop_ip_csum) bad checksums"
else
	bad "telemetry over the management NIC (STATS, LIST)"
	sed 's/^/        /' "$log/stats.txt" "$log/list.txt" | head -20
fi

# 4. clean shutdown: the power button
in_ns bash -c 'exec 3<>/dev/tcp/127.0.0.1/4444 && echo system_powerdown >&3 && sleep 1' 2>/dev/null
down=0
for _ in $(seq 120); do
	kill -0 "$qemu_pid" 2>/dev/null || { down=1; break; }
	sleep 1
done
wait "$qemu_pid" 2>/dev/null
qrc=$?
if [ "$down" -eq 1 ] && [ "$qrc" -eq 0 ] && grep -q "Stopped pboxd.service\|Stopped.*pbox summation" "$log/console.log" &&
	grep -qi "reboot: Power down" "$log/console.log"; then
	ok "clean shutdown: systemd stopped pboxd, the server powered off"
	qemu_pid=""
else
	bad "clean shutdown (qemu exit $qrc, powered off: $down)"
	tail -15 "$log/console.log" | sed 's/^/        /'
fi

echo "boot-test ($FIRMWARE): $pass passed, $fail failed in $(($(date +%s) - t_start)) s"
[ "$fail" -eq 0 ]
