#!/usr/bin/env bash
# deploy/mkimage.sh: the pbox appliance image, from Debian packages.
#
#   deploy/mkimage.sh [BUILD_DIR] [IMAGE_DIR]        (make image)
#
# A Debian bookworm root (mmdebstrap) with the kernel, systemd, DPDK's
# runtime and tools, rdma-core (mlx5 and the other verbs NICs), libnuma,
# and pboxd, pboxctl, pbox-setup and their units installed by make install.
# At boot: pbox-setup.service takes a PBOXCFG config drive if there is one,
# reserves hugepages for [memory] hugepage_budget and binds the data NICs of
# /etc/pbox/box.ini to vfio-pci (mlx4/mlx5 stay on their driver); then
# pboxd.service starts (restarted on failure). The management NIC is set up
# by systemd-networkd: DHCP on every Ethernet NIC left to the kernel, unless
# the config drive or the image brings a .network file of its own.
#
# Writes to IMAGE_DIR (BUILD_DIR/image):
#   pbox.raw         the disk: MBR, an EFI system partition (FAT32, label
#                    PBOXEFI) and the ext4 root (label pboxroot); GRUB for
#                    BIOS boot (MBR and the gap before the ESP) and, for
#                    UEFI with Secure Boot on or off, Debian's signed shim
#                    and GRUB at the removable-media path (EFI/BOOT/
#                    BOOTX64.EFI: no NVRAM entry needed); serial and VGA
#                    console; dd it to a disk, or boot it in qemu
#   pbox.qcow2       the same, for virtual machines
#   vmlinuz, initrd.img   the kernel and initrd inside it (for direct boot)
#   packages.lock    every package and version in the image
#   BUILDINFO        mirror, suite, date, pbox commit, sizes
#
# Environment:
#   MIRROR   Debian mirror (http://deb.debian.org/debian). For a rebuild of
#            an old image use http://snapshot.debian.org/archive/debian/<date>
#   LOCK     a packages.lock from an earlier build: install exactly those
#            versions, and fail if the result differs
#   CONFIG   a box.ini to seed /etc/pbox/box.ini (else the image waits for a
#            config drive)
#   NETWORK  a systemd .network file for the management NIC (else DHCP)
#   SIZE     disk size (2G)
#   EXTRA_PACKAGES  more Debian packages (e.g. openssh-server)
#   ROOT_PASSWORD   set root's password (else root is locked: console login
#                   off; the box needs no login to serve)
# Needs root, mmdebstrap, grub-pc-bin, dosfstools, mtools, e2fsprogs,
# fdisk, and qemu-utils for qcow2. No loop device, no mount: it runs in a
# container too.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
out=${2:-$build/image}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
SIZE=${SIZE:-2G}
LOCK=${LOCK:-}
CONFIG=${CONFIG:-}
NETWORK=${NETWORK:-}
EXTRA_PACKAGES=${EXTRA_PACKAGES:-}
ROOT_PASSWORD=${ROOT_PASSWORD:-}

die() { echo "mkimage: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (mmdebstrap in root mode, a chroot)"
grub=/usr/lib/grub/i386-pc
for t in mmdebstrap grub-mkimage mkfs.ext4 sfdisk mkfs.vfat mcopy; do
	command -v "$t" >/dev/null ||
		die "no $t: apt-get install mmdebstrap grub-pc-bin e2fsprogs fdisk dosfstools mtools"
done
[ -f "$grub/boot.img" ] || die "no $grub/boot.img: apt-get install grub-pc-bin"
[ -x "$build/bin/pboxd" ] || die "no $build/bin/pboxd: make"
[ -z "$CONFIG" ] || [ -r "$CONFIG" ] || die "CONFIG=$CONFIG: cannot read it"
[ -z "$NETWORK" ] || [ -r "$NETWORK" ] || die "NETWORK=$NETWORK: cannot read it"
[ -z "$LOCK" ] || [ -r "$LOCK" ] || die "LOCK=$LOCK: cannot read it"
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/pbox-image.XXXXXX)
root=$work/root
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

# The packages: the image's base (dbus: for logind, which turns the power
# button into a clean shutdown), the shared libraries pboxd and pboxctl
# link (found from the binaries), DPDK's NIC drivers, rdma-core.
pkgs=(linux-image-amd64 initramfs-tools systemd-sysv udev dbus kmod iproute2 pciutils procps
	ethtool less ca-certificates dpdk rdma-core ibverbs-providers libnuma1
	librte-net-virtio23 librte-net-mlx5-23 librte-net-mlx4-23 librte-net-i40e23
	librte-net-ice23 librte-net-ixgbe23 librte-net-bnxt23 librte-net-e1000-23
	librte-net-memif23 librte-bus-pci23 librte-bus-vdev23 librte-mempool-ring23)
for p in $(ldd "$build/bin/pboxd" "$build/bin/pboxctl" | awk '$3 ~ /^\// { print $3 }' | sort -u); do
	dpkg -S "$p" 2>/dev/null || dpkg -S "/usr$p" 2>/dev/null || dpkg -S "$(readlink -f "$p")" 2>/dev/null ||
		die "$p (linked by pboxd) belongs to no Debian package"
done | cut -d: -f1 | sort -u >"$work/libs"
mapfile -t libs <"$work/libs"
# shellcheck disable=SC2206 # a list of package names
pkgs+=("${libs[@]}" $EXTRA_PACKAGES)
if [ -n "$LOCK" ]; then # every listed package at its locked version
	declare -A ver
	while IFS='=' read -r p v; do [ -n "$p" ] && [ "${p:0:1}" != "#" ] && ver[$p]=$v; done <"$LOCK"
	for i in "${!pkgs[@]}"; do
		v=${ver[${pkgs[$i]}]:-}
		[ -n "$v" ] || die "LOCK=$LOCK: no version for ${pkgs[$i]}"
		pkgs[i]="${pkgs[$i]}=$v"
	done
fi

# UEFI's boot files, from the same mirror, unpacked for the ESP and not
# installed (their kernel hooks would rewrite grub.cfg at a kernel update):
# Debian's shim, signed by Microsoft's UEFI CA, and GRUB, signed by Debian,
# so that the image boots with Secure Boot on as well as off. Fetched by a
# hook while the root's apt still has its lists and network
mkdir -p "$work/efi"
cat >"$work/efi-hook" <<EOF
#!/bin/sh
set -e
chroot "\$1" sh -c 'cd /tmp && apt-get download -q shim-signed shim-helpers-amd64-signed grub-efi-amd64-signed'
mv "\$1"/tmp/*.deb "$work/efi/"
EOF
chmod +x "$work/efi-hook"

echo "mkimage: Debian $SUITE from $MIRROR, ${#pkgs[@]} packages and their dependencies"
mmdebstrap --variant=minbase --mode=root --format=directory \
	--include="$(IFS=,; echo "${pkgs[*]}")" \
	--essential-hook='echo "do_symlinks = no" >"$1/etc/kernel-img.conf"' \
	--customize-hook="$work/efi-hook" \
	"$SUITE" "$root" "$MIRROR" >"$work/mmdebstrap.log" 2>&1 ||
	{ tail -30 "$work/mmdebstrap.log"; die "mmdebstrap failed"; }
ls "$work"/efi/*.deb >/dev/null 2>&1 || die "no shim and signed GRUB were downloaded"
efi_pkgs=""
for d in "$work"/efi/*.deb; do
	dpkg-deb -x "$d" "$work/efi/x"
	efi_pkgs+="$(dpkg-deb -f "$d" Package)=$(dpkg-deb -f "$d" Version) "
done
shim=$work/efi/x/usr/lib/shim/shimx64.efi.signed
mokmgr=$work/efi/x/usr/lib/shim/mmx64.efi.signed
grub_signed=$work/efi/x/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed
[ -f "$shim" ] && [ -f "$mokmgr" ] && [ -f "$grub_signed" ] || die "the shim or signed GRUB packages lack their EFI files"

echo "mkimage: pbox into the root"
make -s -C "$src" BUILD="$build" install DESTDIR="$root" PREFIX=/usr >/dev/null
echo "pbox" >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tpbox\n' >"$root/etc/hosts"
echo "LABEL=pboxroot / ext4 defaults,noatime 0 1" >"$root/etc/fstab"
mkdir -p "$root/etc/systemd/network" "$root/etc/pbox"
if [ -n "$NETWORK" ]; then
	install -m 0644 "$NETWORK" "$root/etc/systemd/network/50-mgmt.network"
else
	cat >"$root/etc/systemd/network/90-mgmt-dhcp.network" <<-EOF
		# pbox: the management NIC by DHCP. The data NICs are DPDK's (vfio-pci)
		# and are not seen here; bifurcated ones (mlx5) are matched too: give
		# them a .network of their own with a higher priority (a lower name)
		[Match]
		Type=ether
		[Network]
		DHCP=yes
	EOF
fi
[ -n "$CONFIG" ] && install -m 0644 "$CONFIG" "$root/etc/pbox/box.ini"
if [ -n "$ROOT_PASSWORD" ]; then
	echo "root:$ROOT_PASSWORD" | chroot "$root" chpasswd
else
	chroot "$root" passwd -l root >/dev/null
fi
chroot "$root" ldconfig
chroot "$root" systemctl enable systemd-networkd.service systemd-networkd-wait-online.service \
	pbox-setup.service pboxd.service serial-getty@ttyS0.service >/dev/null 2>"$work/enable.log" ||
	{ cat "$work/enable.log"; die "systemctl enable failed in the root"; }
kver=$(basename "$(ls -d "$root"/lib/modules/*)")
[ -f "$root/boot/vmlinuz-$kver" ] && [ -f "$root/boot/initrd.img-$kver" ] ||
	die "no kernel or initrd for $kver in the root"
cmdline="root=LABEL=pboxroot ro console=tty0 console=ttyS0,115200 intel_iommu=on iommu=pt"
mkdir -p "$root/boot/grub/i386-pc"
cp "$grub"/*.mod "$grub"/*.lst "$root/boot/grub/i386-pc/"
cat >"$root/boot/grub/grub.cfg" <<EOF
# pbox appliance: serial and VGA console
serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
set timeout=2
menuentry "pbox ($kver)" {
	search --no-floppy --label pboxroot --set root
	linux /boot/vmlinuz-$kver $cmdline
	initrd /boot/initrd.img-$kver
}
EOF

chroot "$root" dpkg-query -W -f '${Package}=${Version}\n' | sort >"$work/packages.lock"
if [ -n "$LOCK" ]; then
	grep -v '^#' "$LOCK" | sort | diff -u - "$work/packages.lock" >"$work/lock.diff" ||
		{ cat "$work/lock.diff"; die "the image differs from LOCK=$LOCK (above)"; }
fi
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*

# The disk, MBR: the EFI system partition (type ef) from 1 MiB, the root
# (type 83, the active one) after it. BIOS firmware runs the MBR's code,
# UEFI firmware the ESP's EFI/BOOT/BOOTX64.EFI; both GRUBs find the root by
# its label and read the one grub.cfg there.
esp_mib=64
echo "mkimage: disk of $SIZE (MBR: EFI system partition, ext4 root; GRUB for BIOS and UEFI)"
raw=$work/pbox.raw
rm -f "$raw"
truncate -s "$SIZE" "$raw"
printf 'label: dos\nstart=2048, size=%d, type=ef\nstart=%d, type=83, bootable\n' \
	$((esp_mib * 2048)) $(((1 + esp_mib) * 2048)) | sfdisk -q "$raw"
part_bytes=$(($(stat -c %s "$raw") - (1 + esp_mib) * 1024 * 1024))
truncate -s "$part_bytes" "$work/root.ext4"
mkfs.ext4 -q -L pboxroot -d "$root" "$work/root.ext4" ||
	die "mkfs.ext4 -d: the root ($(du -sh "$root" | cut -f1)) does not fit in SIZE=$SIZE?"
dd if="$work/root.ext4" of="$raw" bs=1M seek=$((1 + esp_mib)) conv=notrunc,sparse status=none
rm -f "$work/root.ext4"
# GRUB, without a loop device (containers have no partition nodes). Its
# first words for either firmware: find the root by its label, whichever
# disk it is, and take the rest from there.
cat >"$work/early.cfg" <<'EOF'
search --no-floppy --label pboxroot --set root
set prefix=($root)/boot/grub
EOF
# BIOS: boot.img in the MBR's code area, core.img in the gap before the ESP
# (its blocklist defaults to "sector 2 onwards", which is where it lands)
grub-mkimage -O i386-pc -d "$grub" -c "$work/early.cfg" -p /boot/grub -o "$work/core.img" \
	biosdisk part_msdos ext2 search search_label normal configfile ||
	die "grub-mkimage (i386-pc) failed"
[ "$(stat -c %s "$work/core.img")" -le $((2047 * 512)) ] || die "core.img does not fit before the ESP"
dd if="$grub/boot.img" of="$raw" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$raw" bs=512 seek=1 conv=notrunc status=none
# UEFI: a FAT32 ESP, made by mkfs.vfat and mtools in a file, then written
# where the partition is. At the removable-media path, as Debian's
# grub-install --removable lays it out: shim as BOOTX64.EFI, which starts
# grubx64.efi beside it (verified by Debian's key under Secure Boot) and,
# when asked to enrol a key, MokManager (mmx64.efi). The signed GRUB reads
# grub.cfg from its own directory: find the root by its label, then the one
# grub.cfg there; it verifies the kernel through shim.
cat >"$work/efi/grub.cfg" <<'EOF'
search --no-floppy --label pboxroot --set root
set prefix=($root)/boot/grub
configfile $prefix/grub.cfg
EOF
rm -f "$work/esp.img"
mkfs.vfat -F 32 -n PBOXEFI -C "$work/esp.img" $((esp_mib * 1024)) >/dev/null ||
	die "mkfs.vfat failed"
mmd -i "$work/esp.img" ::/EFI ::/EFI/BOOT &&
	mcopy -i "$work/esp.img" "$shim" ::/EFI/BOOT/BOOTX64.EFI &&
	mcopy -i "$work/esp.img" "$grub_signed" ::/EFI/BOOT/grubx64.efi &&
	mcopy -i "$work/esp.img" "$mokmgr" ::/EFI/BOOT/mmx64.efi &&
	mcopy -i "$work/esp.img" "$work/efi/grub.cfg" ::/EFI/BOOT/grub.cfg ||
	die "mtools: the ESP's EFI/BOOT"
dd if="$work/esp.img" of="$raw" bs=1M seek=1 conv=notrunc status=none
rm -f "$work/esp.img"

cp "$root/boot/vmlinuz-$kver" "$out/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$out/initrd.img"
cp "$work/packages.lock" "$out/packages.lock"
mv "$raw" "$out/pbox.raw"
command -v qemu-img >/dev/null && qemu-img convert -O qcow2 "$out/pbox.raw" "$out/pbox.qcow2"
{
	echo "suite=$SUITE"
	echo "mirror=$MIRROR"
	echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "pbox=$(git -C "$src" describe --always --dirty 2>/dev/null || echo unknown)"
	echo "kernel=$kver"
	echo "efi=$efi_pkgs(on the ESP, not installed)"
	echo "cmdline=$cmdline"
	echo "packages=$(wc -l <"$work/packages.lock")"
	echo "config=${CONFIG:-none (config drive)}"
	echo "disk=$SIZE root_used=$(du -sh --apparent-size "$out/pbox.raw" | cut -f1)"
} >"$out/BUILDINFO"
echo "mkimage: $out/pbox.raw ($(du -h "$out/pbox.raw" | cut -f1) used of $SIZE), pbox.qcow2, vmlinuz, initrd.img ($kver)"
echo "mkimage: $(wc -l <"$out/packages.lock") packages recorded in $out/packages.lock"
