/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The data link: which interface holds this rank's [data] address, and B,
 * the line rate the layout and the pacing are computed from. Unset, B is
 * the interface's link speed as the kernel reports it
 * (/sys/class/net/IF/speed); an interface that reports none (a tunnel,
 * some virtual NICs) leaves 100 Gb/s with a warning (loopback, whose rate
 * is the CPU's, without one). A data
 * address on the interface of the default route, on a host with several
 * interfaces, is warned about too: the route to MASTER_ADDR or the
 * rendezvous host is often the management NIC's. Once per context, at
 * pbox_start().
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wk_base.h"
#include "wk_datalink.h"
#include "wk_ranks.h"

#define WK_BANDWIDTH_ASSUMED 100000u /* Mb/s */

uint32_t wk_link_speed(const char *sysfs, const char *ifname)
{
	char path[256];
	FILE *f;
	long v = -1;

	snprintf(path, sizeof(path), "%s/%s/speed", sysfs, ifname);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v > 0 && v <= 10000000 ? (uint32_t)v : 0;
}

bool wk_default_route_on(const char *route, const char *ifname)
{
	char line[256], ifc[IF_NAMESIZE + 1];
	unsigned long dst, mask;
	unsigned flags;
	bool on = false;
	FILE *f = fopen(route, "r");

	if (!f)
		return false;
	while (!on && fgets(line, sizeof(line), f))
		/* Iface Destination Gateway Flags RefCnt Use Metric Mask ... */
		if (sscanf(line, "%16s %lx %*x %x %*d %*d %*d %lx", ifc, &dst, &flags, &mask) == 4)
			on = dst == 0 && mask == 0 && (flags & 1) && strcmp(ifc, ifname) == 0;
	fclose(f);
	return on;
}

/* The interface holding @ip_be into @name (@lo: loopback), and how many
 * interfaces up with an IPv4 address this host has besides loopback;
 * false: none has it. */
static bool iface_of(uint32_t ip_be, char *name, size_t cap, bool *lo, unsigned *others)
{
	struct ifaddrs *all, *a;
	char seen[16][IF_NAMESIZE];
	unsigned n_seen = 0;
	bool found = false;

	*others = 0;
	if (getifaddrs(&all))
		return false;
	for (a = all; a; a = a->ifa_next) {
		unsigned i;

		if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP))
			continue;
		if (((const struct sockaddr_in *)(const void *)a->ifa_addr)->sin_addr.s_addr ==
		    ip_be) {
			snprintf(name, cap, "%s", a->ifa_name);
			*lo = (a->ifa_flags & IFF_LOOPBACK) != 0;
			found = true;
		}
		if (a->ifa_flags & IFF_LOOPBACK)
			continue;
		for (i = 0; i < n_seen && strcmp(seen[i], a->ifa_name); i++)
			;
		if (i == n_seen && n_seen < 16)
			snprintf(seen[n_seen++], IF_NAMESIZE, "%s", a->ifa_name);
	}
	freeifaddrs(all);
	*others = n_seen;
	return found;
}

void wk_data_link(struct pbox *px)
{
	char ifname[IF_NAMESIZE] = "", ip[INET_ADDRSTRLEN];
	unsigned nics = 0;
	bool lo = false,
	     known = iface_of(px->cfg.data.address.be, ifname, sizeof(ifname), &lo, &nics);
	uint32_t speed = known ? wk_link_speed("/sys/class/net", ifname) : 0;

	inet_ntop(AF_INET, &px->cfg.data.address.be, ip, sizeof(ip));
	if (px->cfg.data.bandwidth_mbps) {
		wk_log(px, CFG_LOG_INFO,
		       "data link: %s (%s), B = %" PRIu64 " Mb/s ([data] bandwidth)",
		       known ? ifname : "an interface not found", ip, px->cfg.data.bandwidth_mbps);
	} else if (speed) {
		px->cfg.data.bandwidth_mbps = speed;
		wk_log(px, CFG_LOG_INFO, "data link: %s (%s), B = %u Mb/s, its link speed", ifname,
		       ip, speed);
	} else {
		px->cfg.data.bandwidth_mbps = WK_BANDWIDTH_ASSUMED;
		/* loopback has no line rate to tell: a test's or a demo's */
		wk_log(px, lo ? CFG_LOG_INFO : CFG_LOG_WARNING,
		       "data link: %s (%s) reports no link speed: B = %u Mb/s assumed; set [data] "
		       "bandwidth (PBOX_DATA_BANDWIDTH) to its line rate, which the layout's k and "
		       "the pacing are computed from",
		       known ? ifname : "no interface found", ip, WK_BANDWIDTH_ASSUMED);
	}
	if (known && nics > 1 && wk_default_route_on("/proc/net/route", ifname))
		wk_log(px, CFG_LOG_WARNING,
		       "data link: %s (%s) carries the default route, and this host has %u "
		       "interfaces: the data NIC is usually another one; set [data] address "
		       "(PBOX_DATA_ADDRESS) to its address",
		       ifname, ip, nics);
}
