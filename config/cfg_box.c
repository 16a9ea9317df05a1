/* SPDX-License-Identifier: BSD-3-Clause */
/* pboxd's configuration schema and its cross-field checks. */
#include "cfg_box.h"
#include "nic_wire.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define MB (1ull << 20)
#define GB (1ull << 30)

static const char *const poll_modes[] = {"busy", "adaptive", NULL};
const char *const cfg_log_levels[] = {"error", "warning", "info", "debug", NULL};

typedef struct box_cfg B;
typedef struct box_port_cfg P;

static const struct cfg_key mgmt_keys[] = {
	CFG_KEY(B, mgmt.address, "address", CFG_IPV4, CFG_REQUIRED, 0, 0, NULL,
		"IPv4 address of the control plane (TCP)"),
	CFG_KEY(B, mgmt.port, "port", CFG_UINT, 0, 1, 65535, "9570",
		"TCP port of the control plane"),
	CFG_KEY(B, mgmt.key_file, "key_file", CFG_STR, 0, 0, 0, "/etc/pbox/box.key",
		"the box key (64 hex digits; pbox-setup --keygen makes one): every control "
		"connection but ENDPOINTS proves it holds it"),
};

static const struct cfg_key core_keys[] = {
	CFG_KEY(B, cores.list, "list", CFG_CORES, 0, 0, 0, "auto",
		"data-plane cores: 'auto' (all allowed but the first) or a list such as 1-7,9"),
};

static const struct cfg_key mem_keys[] = {
	CFG_KEY(B, memory.hugepage_budget, "hugepage_budget", CFG_SIZE, 0, 64 * MB, 1ull << 40,
		"1G", "hugepage memory pboxd may use: mbuf pools and job state"),
};

static const struct cfg_key data_keys[] = {
	CFG_KEY(B, data.chunk_size, "chunk_size", CFG_SIZE, CFG_POW2, 1024, 1 * MB, "32K",
		"unit of ownership: a chunk belongs to one endpoint, so to one core"),
	CFG_KEY(B, data.fragment_size, "fragment_size", CFG_SIZE, CFG_POW2 | CFG_AUTO, 256, 1 * MB,
		"auto", "payload of one packet; 'auto' is the largest that fits the MTU"),
	CFG_KEY(B, data.mtu, "mtu", CFG_UINT, 0, 576, 9216, "9000", "IP MTU of the data ports"),
	CFG_KEY(B, data.udp_port, "udp_port", CFG_UINT, 0, 1024, 65000, "9600",
		"UDP port of queue 0 of every data port; queue q listens on udp_port + q"),
	CFG_KEY(B, data.rx_desc, "rx_desc", CFG_UINT, CFG_POW2, 64, 16384, "1024",
		"receive descriptors per queue"),
	CFG_KEY(B, data.tx_desc, "tx_desc", CFG_UINT, CFG_POW2, 64, 16384, "1024",
		"transmit descriptors per queue"),
};

static const struct cfg_key limit_keys[] = {
	CFG_KEY(B, limits.jobs, "jobs", CFG_UINT, 0, 1, 4096, "16", "jobs registered at once"),
	CFG_KEY(B, limits.workers, "workers", CFG_UINT, 0, 2, BOX_MAX_WORKERS, "256",
		"workers per job"),
	CFG_KEY(B, limits.job_memory, "job_memory", CFG_SIZE, CFG_AUTO, 1 * MB, 1ull << 40, "auto",
		"state one job may take; 'auto' is the whole hugepage budget"),
};

static const struct cfg_key poll_keys[] = {
	CFG_KEY_ENUM(B, polling.mode, "mode", poll_modes, "busy",
		     "busy: spin on every queue; adaptive: sleep when idle (shared hosts)"),
	CFG_KEY(B, polling.idle_sleep_us, "idle_sleep", CFG_DURATION, 0, 1, 100000, "50us",
		"adaptive: how long an idle core sleeps"),
	CFG_KEY(B, polling.idle_sleep_first_us, "idle_sleep_first", CFG_DURATION, CFG_AUTO, 1,
		100000, "auto",
		"adaptive: a core's first nap after traffic, doubled at each nap up to idle_sleep; "
		"'auto' is idle_sleep"),
	CFG_KEY(B, polling.idle_polls, "idle_polls", CFG_UINT, 0, 1, 100000000, "10000",
		"adaptive: empty polls before a core sleeps"),
};

static const struct cfg_key tele_keys[] = {
	CFG_KEY(B, telemetry.enabled, "enabled", CFG_BOOL, 0, 0, 0, "true",
		"serve /pbox/* on DPDK's telemetry socket"),
	CFG_KEY(B, telemetry.metrics_port, "metrics_port", CFG_UINT, 0, 0, 65535, "9571",
		"TCP port of the Prometheus endpoint (GET /metrics) on the management address; 0: "
		"off"),
};

static const struct cfg_key log_keys[] = {
	CFG_KEY_ENUM(B, log.level, "level", cfg_log_levels, "info", "error, warning, info, debug"),
};

static const struct cfg_key port_keys[] = {
	CFG_KEY(P, pci, "pci", CFG_STR, 0, 0, 0, NULL, "PCI address, e.g. 0000:3b:00.0"),
	CFG_KEY(P, vdev, "vdev", CFG_STR, 0, 0, 0, NULL,
		"DPDK virtual device, e.g. net_af_packet0,iface=veth0"),
	CFG_KEY(P, ip, "ip", CFG_IPV4, CFG_REQUIRED, 0, 0, NULL, "IPv4 address of this data port"),
	CFG_KEY(P, gateway_mac, "gateway_mac", CFG_MAC, 0, 0, 0, NULL,
		"optional next hop for every frame (routed fabrics)"),
	CFG_KEY(P, bandwidth_mbps, "bandwidth", CFG_RATE, CFG_REQUIRED, 1, 10000000, NULL,
		"line rate, e.g. 100G: weighs the port's share of chunks"),
	CFG_KEY(P, max_queues, "max_queues", CFG_UINT, CFG_AUTO, 1, 1024, "auto",
		"queues the port may use; 'auto' is one per local core with flow steering"),
};

#define SEC_ONE(nm, fl, tbl, h)                                                                    \
	{                                                                                          \
		.name = (nm), .kind = CFG_SEC_ONE, .flags = (fl), .keys = (tbl),                   \
		.n_keys = CFG_NKEYS(tbl), .help = (h)                                              \
	}

static const struct cfg_section box_sections[] = {
	SEC_ONE("management", CFG_REQUIRED, mgmt_keys,
		"the control plane: job registration and telemetry"),
	SEC_ONE("cores", 0, core_keys, "the cores that poll the data ports"),
	SEC_ONE("memory", 0, mem_keys, "hugepage memory"),
	SEC_ONE("data", 0, data_keys, "the data path: chunks, fragments, queues"),
	SEC_ONE("limits", 0, limit_keys, "what a job registration may ask for"),
	SEC_ONE("polling", 0, poll_keys, "how data cores poll"),
	SEC_ONE("telemetry", 0, tele_keys, "counters through DPDK telemetry"),
	SEC_ONE("log", 0, log_keys, "logging"),
	{
		.name = "port",
		.kind = CFG_SEC_MANY,
		.flags = CFG_REQUIRED,
		.keys = port_keys,
		.n_keys = CFG_NKEYS(port_keys),
		.off = offsetof(B, port),
		.elem_size = sizeof(P),
		.max = BOX_MAX_PORTS,
		.count_off = offsetof(B, n_ports),
		.iname_off = offsetof(P, name),
		.help = "a data port, named by the section",
	},
};

/* @n hex digits at *@p, no sign, space or 0x; moves *@p past them. */
static int hex_field(const char **p, unsigned n, unsigned *out)
{
	unsigned v = 0, i;

	for (i = 0; i < n; i++) {
		char c = (*p)[i];

		if (!isxdigit((unsigned char)c))
			return -1;
		v = v * 16 +
		    (unsigned)(isdigit((unsigned char)c) ? c - '0' : (c | 0x20) - 'a' + 10);
	}
	*p += n;
	*out = v;
	return 0;
}

/* DDDD:BB:DD.F or BB:DD.F (domain 0), as lspci writes them: one number per
 * device (domain, bus, device < 32, function < 8), so that two spellings
 * of one device compare equal; -1 for anything else. */
static int64_t pci_id(const char *s)
{
	unsigned dom = 0, bus, dev, fn;
	const char *p = s;

	if (strlen(s) == 12 && (hex_field(&p, 4, &dom) || *p++ != ':'))
		return -1;
	if (hex_field(&p, 2, &bus) || *p++ != ':' || hex_field(&p, 2, &dev) || *p++ != '.' ||
	    hex_field(&p, 1, &fn) || *p || dev >= 32 || fn >= 8)
		return -1;
	return (int64_t)dom << 16 | bus << 8 | dev << 3 | fn;
}

static void pci_canonical(char *out, size_t cap, int64_t id)
{
	snprintf(out, cap, "%04x:%02x:%02x.%x", (unsigned)(id >> 16), (unsigned)(id >> 8) & 0xff,
		 (unsigned)(id >> 3) & 0x1f, (unsigned)id & 7);
}

static void box_validate(struct cfg_ctx *ctx, void *v)
{
	struct box_cfg *c = v;
	unsigned i, j;

	for (i = 0; i < c->n_ports; i++) {
		const P *p = &c->port[i];
		bool has_pci = p->pci[0] != '\0', has_vdev = p->vdev[0] != '\0';
		int64_t pci = has_pci ? pci_id(p->pci) : -1;

		if (has_pci == has_vdev)
			cfg_error_at(ctx, "port", i, has_pci ? "vdev" : NULL,
				     "[port %s] needs exactly one of 'pci' or 'vdev'", p->name);
		if (has_pci && pci < 0)
			cfg_error_at(ctx, "port", i, "pci",
				     "[port %s] pci: '%s' is not a PCI address (0000:3b:00.0)",
				     p->name, p->pci);
		else if (has_pci) /* as sysfs and DPDK name it: "3B:00.0" is 0000:3b:00.0 */
			pci_canonical(c->port[i].pci, sizeof(c->port[i].pci), pci);
		if (p->ip.be == c->mgmt.address.be)
			cfg_error_at(
				ctx, "port", i, "ip",
				"[port %s] ip: the management address cannot be a data address",
				p->name);
		for (j = 0; j < i; j++) {
			if (p->ip.be == c->port[j].ip.be)
				cfg_error_at(ctx, "port", i, "ip",
					     "[port %s] ip: already used by [port %s]", p->name,
					     c->port[j].name);
			if ((pci >= 0 && strcmp(p->pci, c->port[j].pci) == 0) ||
			    (has_vdev && strcmp(p->vdev, c->port[j].vdev) == 0))
				cfg_error_at(ctx, "port", i, has_pci ? "pci" : "vdev",
					     "[port %s] names the same device as [port %s]",
					     p->name, c->port[j].name);
		}
	}
	if (!c->cores.list.autosel && cfg_cores_count(&c->cores.list) == 0)
		cfg_error_at(ctx, "cores", 0, "list", "[cores] list: no core given");

	uint64_t room = c->data.mtu - NIC_L3_BUDGET;
	if (c->data.fragment_size == 0) {
		c->data.fragment_size = nic_frag_for_mtu(c->data.mtu, c->data.chunk_size);
		if (c->data.fragment_size < 256)
			cfg_error_at(ctx, "data", 0, "mtu",
				     "[data] mtu: %u leaves no room for a 256-byte fragment",
				     c->data.mtu);
	} else if (c->data.fragment_size > room) {
		cfg_error_at(ctx, "data", 0, "fragment_size",
			     "[data] fragment_size: %llu bytes plus %u of headers exceed mtu %u",
			     (unsigned long long)c->data.fragment_size, NIC_L3_BUDGET, c->data.mtu);
	}
	if (c->data.fragment_size > c->data.chunk_size)
		cfg_error_at(ctx, "data", 0, "fragment_size",
			     "[data] fragment_size: larger than chunk_size (%llu)",
			     (unsigned long long)c->data.chunk_size);
	if (c->data.udp_port + BOX_MAX_WORKERS > 65535)
		cfg_error_at(ctx, "data", 0, "udp_port",
			     "[data] udp_port: leaves too few ports for the queues");
	if (c->data.udp_port == c->mgmt.port)
		cfg_error_at(ctx, "data", 0, "udp_port",
			     "[data] udp_port: same as the management port");
	if (c->telemetry.metrics_port && c->telemetry.metrics_port == c->mgmt.port)
		cfg_error_at(ctx, "telemetry", 0, "metrics_port",
			     "[telemetry] metrics_port: same as [management] port");

	if (c->polling.idle_sleep_first_us == 0)
		c->polling.idle_sleep_first_us = c->polling.idle_sleep_us;
	else if (c->polling.idle_sleep_first_us > c->polling.idle_sleep_us)
		cfg_error_at(ctx, "polling", 0, "idle_sleep_first",
			     "[polling] idle_sleep_first: longer than idle_sleep");

	if (c->limits.job_memory == 0)
		c->limits.job_memory = c->memory.hugepage_budget;
	else if (c->limits.job_memory > c->memory.hugepage_budget)
		cfg_error_at(ctx, "limits", 0, "job_memory",
			     "[limits] job_memory: larger than [memory] hugepage_budget");
}

const struct cfg_schema box_cfg_schema = {
	.what = "pboxd",
	.env_prefix = NULL, /* the box is configured by its file only */
	.sections = box_sections,
	.n_sections = CFG_NKEYS(box_sections),
	.size = sizeof(struct box_cfg),
	.validate = box_validate,
};

int box_cfg_load(const char *path, struct box_cfg *out, struct cfg_errors *errs)
{
	return cfg_load(&box_cfg_schema, path, NULL, out, errs);
}
