/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_DATALINK_H
#define PBOX_WK_DATALINK_H

#include "wk_ctx.h"

/* ---- datalink.c: the data link ------------------------------------------- */

/* [data] bandwidth, where unset, from the link speed of the interface
 * holding [data] address (100 Gb/s with a warning where it reports none);
 * the interface named in the log, and a warning where it carries the
 * default route on a host with several interfaces. */
void wk_data_link(struct pbox *px);
/* @ifname's speed in Mb/s under @sysfs (/sys/class/net), 0 where unknown. */
uint32_t wk_link_speed(const char *sysfs, const char *ifname);
/* Whether @route (/proc/net/route) has the default route on @ifname. */
bool wk_default_route_on(const char *route, const char *ifname);

#endif /* PBOX_WK_DATALINK_H */
