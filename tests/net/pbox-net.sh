#!/usr/bin/env bash
# The emulated network: a box and W worker hosts in their own network
# namespaces, joined by a bridge in a switch namespace. Source it, or run it:
#
#   pbox-net.sh up TAG PORTS WORKERS   build it
#   pbox-net.sh shape TAG HOST ARGS... a qdisc (tbf for rate) on HOST's
#                                       link, both ways (HOST: box-pJ or wI)
#   pbox-net.sh impair TAG HOST LOSS% DUP%
#                                       drop and duplicate frames at random on
#                                       HOST's link, both ways: a tc BPF
#                                       program (tests/net/impair.bpf.c), since
#                                       kernels without netem are common in VMs
#   pbox-net.sh wire TAG HOST          HOST's link delivers frames as a wire
#                                       does: UDP GSO super-frames are cut into
#                                       datagrams on the way to it (for hosts
#                                       on DPDK's af_packet; see pbox_net_wire)
#   pbox-net.sh down TAG               remove everything TAG made
#
# Namespaces are pbox-TAG-{sw,box,w0..}. The box gets PORTS data interfaces
# pbox-p0.. (no kernel address: DPDK's net_af_packet takes them) and mgmt0
# with 198.18.0.1/16; worker I gets eth0 with 198.18.100.(I+1)/16. Box port
# J answers as 198.18.(J+1).1 (configured in pboxd, not in the kernel). MTU
# 9000 everywhere. Only 198.18.0.0/15 is used, and only inside these
# namespaces. Deleting a namespace deletes its veth ends.

PBOX_NET_MTU=${PBOX_NET_MTU:-9000}

pbox_ns() { echo "pbox-$1-$2"; }

# pbox_keygen FILE: a box key (64 hex digits, mode 0600), as pbox-setup
# --keygen makes one
pbox_keygen() { (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$1" && echo >>"$1"); }

# pbox_box_ini SRC DST KEYFILE: box configuration SRC with [management]
# key_file = KEYFILE, into DST
pbox_box_ini() {
	awk -v k="$3" '{ print } /^\[management\]/ { print "key_file = " k }' "$1" >"$2"
}

# pbox_ctl HOST:PORT REQUEST: one request to pboxd's control plane (bash's
# /dev/tcp); prints the reply's lines up to its OK or ERR line, true on OK.
# Run it inside a namespace with: ip netns exec NS bash -c "$(declare -f
# pbox_ctl); pbox_ctl ADDR REQUEST"
pbox_ctl() {
	local fd line
	exec {fd}<>"/dev/tcp/${1%:*}/${1##*:}" || return 1
	printf '%s\n' "$2" >&"$fd"
	while IFS= read -r -t 5 line <&"$fd"; do
		echo "$line"
		case $line in
		OK*) exec {fd}>&-; return 0 ;;
		ERR*) break ;;
		esac
	done
	exec {fd}>&-
	return 1
}

_pbox_quiet_ns() {
	local ns=$1
	ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
		net.ipv6.conf.default.disable_ipv6=1 >/dev/null 2>&1 || true
	ip -n "$ns" link set lo up
}

_pbox_link() { # NS IFACE SWITCH_IFACE
	local tag=$1 ns=$2 ifc=$3 swi=$4 sw
	sw=$(pbox_ns "$tag" sw)
	ip link add "$swi" netns "$sw" mtu "$PBOX_NET_MTU" type veth peer name "$ifc" netns "$ns" mtu "$PBOX_NET_MTU"
	ip -n "$sw" link set "$swi" master br0 up
	ip -n "$ns" link set "$ifc" up
}

pbox_net_up() {
	local tag=$1 ports=$2 workers=$3 sw box j i ns
	sw=$(pbox_ns "$tag" sw)
	box=$(pbox_ns "$tag" box)
	pbox_net_down "$tag"
	ip netns add "$sw"
	_pbox_quiet_ns "$sw"
	# a plain switch: no netfilter on bridged frames (it would drop the
	# malformed ones the tests send on purpose, before the box sees them)
	ip netns exec "$sw" sysctl -qw net.bridge.bridge-nf-call-iptables=0 \
		net.bridge.bridge-nf-call-ip6tables=0 net.bridge.bridge-nf-call-arptables=0 \
		>/dev/null 2>&1 || true
	ip -n "$sw" link add br0 mtu "$PBOX_NET_MTU" type bridge
	ip -n "$sw" link set br0 up
	ip netns add "$box"
	_pbox_quiet_ns "$box"
	for ((j = 0; j < ports; j++)); do
		_pbox_link "$tag" "$box" "pbox-p$j" "bp$j"
		pbox_net_wire "$tag" "box-p$j" # pboxd takes it with af_packet
	done
	_pbox_link "$tag" "$box" mgmt0 bm
	ip -n "$box" addr add 198.18.0.1/16 dev mgmt0
	for ((i = 0; i < workers; i++)); do
		ns=$(pbox_ns "$tag" "w$i")
		ip netns add "$ns"
		_pbox_quiet_ns "$ns"
		_pbox_link "$tag" "$ns" eth0 "w$i"
		ip -n "$ns" addr add "198.18.100.$((i + 1))/16" dev eth0
	done
}

# wire TAG HOST: a kernel UDP sender's GSO send (up to 64 KB of datagrams
# in one skb) crosses veth and the bridge whole, where a real NIC would have
# cut it into datagrams. A kernel socket on the far end copes; DPDK's
# af_packet takes it as one frame, which does not fit the ring's frame size
# and is lost, so every such run of pushes was resent (+3-13% bytes on the
# wire, failing worker.sh's Theorem 1 check). gso_max_segs 1 on the
# switch's port towards HOST makes the kernel segment there, as a wire would.
pbox_net_wire() {
	local tag=$1 host=$2 ns ifc swns swi
	read -r ns ifc swns swi < <(_pbox_host_ifaces "$tag" "$host") || return 1
	ip -n "$swns" link set dev "$swi" gso_max_segs 1
}

# shape TAG HOST qdisc-args...: the same qdisc on both directions of HOST's link.
pbox_net_shape() {
	local tag=$1 host=$2 sw ns ifc swi
	shift 2
	sw=$(pbox_ns "$tag" sw)
	case $host in
	box-p*) ns=$(pbox_ns "$tag" box); ifc=pbox-p${host#box-p}; swi=bp${host#box-p} ;;
	w*) ns=$(pbox_ns "$tag" "$host"); ifc=eth0; swi=$host ;;
	*) echo "pbox-net: unknown host $host" >&2; return 1 ;;
	esac
	ip netns exec "$ns" tc qdisc replace dev "$ifc" root "$@"
	ip netns exec "$sw" tc qdisc replace dev "$swi" root "$@"
}

_pbox_host_ifaces() { # TAG HOST -> "NS IFACE SWITCH_NS SWITCH_IFACE"
	local tag=$1 host=$2
	case $host in
	box-p*) echo "$(pbox_ns "$tag" box) pbox-p${host#box-p} $(pbox_ns "$tag" sw) bp${host#box-p}" ;;
	box-mgmt) echo "$(pbox_ns "$tag" box) mgmt0 $(pbox_ns "$tag" sw) bm" ;;
	w*) echo "$(pbox_ns "$tag" "$host") eth0 $(pbox_ns "$tag" sw) $host" ;;
	*) echo "pbox-net: unknown host $host" >&2; return 1 ;;
	esac
}

# impair TAG HOST LOSS_PERCENT DUP_PERCENT (0 0 removes it)
pbox_net_impair() {
	local tag=$1 host=$2 loss=$3 dup=$4 here obj ns ifc swns swi
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	read -r ns ifc swns swi < <(_pbox_host_ifaces "$tag" "$host")
	local lp dp
	lp=$(awk -v p="$loss" 'BEGIN { printf "%d", p * 10000 }')
	dp=$(awk -v p="$dup" 'BEGIN { printf "%d", p * 10000 }')
	obj=${PBOXNET_OBJDIR:-/tmp}/pbox-impair-$lp-$dp.o
	if [ ! -s "$obj" ]; then
		clang -O2 -g -target bpf -DLOSS_PPM="$lp" -DDUP_PPM="$dp" \
			-I/usr/include/x86_64-linux-gnu -c "$here/impair.bpf.c" -o "$obj.tmp" && mv "$obj.tmp" "$obj" || return 1
	fi
	local pair
	for pair in "$ns $ifc" "$swns $swi"; do
		set -- $pair
		ip netns exec "$1" tc qdisc replace dev "$2" clsact
		ip netns exec "$1" tc filter del dev "$2" egress 2>/dev/null || true
		if [ "$lp" != 0 ] || [ "$dp" != 0 ]; then
			ip netns exec "$1" tc filter add dev "$2" egress bpf direct-action obj "$obj" sec tc || return 1
		fi
	done
}

# lost TAG HOST...: frames the loss programs on these hosts' links (both
# ends) have dropped so far
pbox_net_lost() {
	local tag=$1 h ns ifc swns swi s=0 d
	shift
	for h in "$@"; do
		read -r ns ifc swns swi < <(_pbox_host_ifaces "$tag" "$h")
		for d in "$ns $ifc" "$swns $swi"; do
			set -- $d
			s=$((s + $(ip netns exec "$1" tc -s qdisc show dev "$2" |
				awk '/^qdisc/ { c = /^qdisc clsact/ }
					c && match($0, /dropped [0-9]+/) { d = substr($0, RSTART + 8, RLENGTH - 8) }
					END { print d + 0 }')))
		done
	done
	echo $s
}

pbox_net_down() {
	local tag=$1 ns
	for ns in $(ip netns list | awk '{print $1}' | grep "^pbox-$tag-" || true); do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
		ip netns del "$ns" 2>/dev/null || true
	done
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	set -euo pipefail
	cmd=${1:-}
	shift || true
	case $cmd in
	up) pbox_net_up "$@" ;;
	shape) pbox_net_shape "$@" ;;
	impair) pbox_net_impair "$@" ;;
	wire) pbox_net_wire "$@" ;;
	down) pbox_net_down "$@" ;;
	*) echo "usage: $0 up TAG PORTS WORKERS | shape TAG HOST QDISC... | impair TAG HOST LOSS% DUP% | wire TAG HOST | down TAG" >&2; exit 2 ;;
	esac
fi
