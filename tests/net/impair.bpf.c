/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Loss and duplication for the emulated network, as a tc egress program
 * (this kernel has no netem): each frame is dropped with probability
 * LOSS_PPM / 10^6 and sent twice with probability DUP_PPM / 10^6. Built by
 * tests/net/pbox-net.sh with the rates as -D flags; attached with
 * "tc filter add dev X egress bpf direct-action obj impair.o sec tc".
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf_helpers.h>

#ifndef LOSS_PPM
#define LOSS_PPM 0
#endif
#ifndef DUP_PPM
#define DUP_PPM 0
#endif
#define DUP_MARK 0x70b0c10eu /* the copy passes through this program once more */

SEC("tc")
int impair(struct __sk_buff *skb)
{
	__u32 r;

	if (skb->mark == DUP_MARK) {
		skb->mark = 0;
		return TC_ACT_OK;
	}
	r = bpf_get_prandom_u32() % 1000000u;
	if (r < LOSS_PPM)
		return TC_ACT_SHOT;
	if (r < LOSS_PPM + DUP_PPM) {
		skb->mark = DUP_MARK;
		bpf_clone_redirect(skb, skb->ifindex, 0);
		skb->mark = 0;
	}
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
