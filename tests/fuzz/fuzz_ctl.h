/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What fuzz_ctl and gen_seeds agree on: the parser an input's first byte
 * selects, and the fixed control session (box key and nonces) whose
 * wrapped job keys the seeds carry, so that REGISTER inputs get past the
 * key's tag to the fields after it.
 */
#ifndef PBOX_TESTS_FUZZ_CTL_H
#define PBOX_TESTS_FUZZ_CTL_H

#include <string.h>

#include "nic_ctl.h"

enum fuzz_ctl_target {
	FZ_RANK_LINE,	   /* rp_parse: a line ranks say to each other */
	FZ_RANK_LIST,	   /* rp_ranks_parse: ERR's gone= */
	FZ_BOX_EP,	   /* nic_ctl_parse_ep */
	FZ_BOX_GEOMETRY,   /* nic_ctl_parse_geometry */
	FZ_BOX_REG_OK,	   /* nic_ctl_parse_reg_ok */
	FZ_BOX_REGISTER,   /* nic_ctl_parse_register, after "REGISTER " */
	FZ_BOX_GROW,	   /* the same, after "GROW " */
	FZ_BOX_UNREGISTER, /* nic_ctl_parse_unregister */
	FZ_BOX_AUTH_OK,	   /* nic_ctl_parse_auth_ok */
	FZ_CFG_WORKER,	   /* a worker's INI file */
	FZ_CFG_BOX,	   /* a box's INI file */
	FZ_TARGETS
};

/* What the box checks a REGISTER against in these runs: four endpoints. */
static const struct nic_ctl_reg_limits fuzz_ctl_limits = {
	.max_workers = 256, .max_frag = 8192, .dflt_frag = 8192, .dflt_chunk = 32768, .n_eps = 4};

static inline void fuzz_ctl_session(struct nic_ctl_session *s)
{
	uint8_t box_key[NIC_KEY_LEN];

	memset(s, 0, sizeof(*s));
	memset(box_key, 0x5a, sizeof(box_key));
	memset(s->nc, 0x11, sizeof(s->nc));
	memset(s->nb, 0x22, sizeof(s->nb));
	nic_ctl_session_derive(s, box_key);
	s->authed = true;
}

#endif /* PBOX_TESTS_FUZZ_CTL_H */
