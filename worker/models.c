/* SPDX-License-Identifier: BSD-3-Clause */
/* Tensor size lists of real models, from their architectures. */
#include "models.h"

#include <stdlib.h>
#include <string.h>

const char model_names[] = "resnet50, vgg16, bert-base, bert-large, resnet50-12";

static int add(struct model *m, uint64_t count)
{
	uint64_t *p = realloc(m->count, (m->n + 1) * sizeof(*p));

	if (!p)
		return -1;
	m->count = p;
	m->count[m->n++] = count;
	m->total += count;
	return 0;
}

/* A convolution without bias, then its batch norm (gamma, beta). */
static int conv_bn(struct model *m, uint64_t k, uint64_t cin, uint64_t cout)
{
	return add(m, k * k * cin * cout) | add(m, cout) | add(m, cout);
}

static int resnet50(struct model *m)
{
	static const unsigned blocks[4] = {3, 4, 6, 3};
	uint64_t cin = 64;
	int rc = conv_bn(m, 7, 3, 64);

	for (unsigned s = 0; s < 4; s++) {
		uint64_t width = 64u << s, out = 4 * width;

		for (unsigned b = 0; b < blocks[s]; b++) {
			rc |= conv_bn(m, 1, cin, width);
			rc |= conv_bn(m, 3, width, width);
			rc |= conv_bn(m, 1, width, out);
			if (b == 0)
				rc |= conv_bn(m, 1, cin, out); /* the projection shortcut */
			cin = out;
		}
	}
	return rc | add(m, 2048 * 1000) | add(m, 1000);
}

static int vgg16(struct model *m)
{
	static const uint64_t ch[13] = {64,  64,  128, 128, 256, 256, 256,
					512, 512, 512, 512, 512, 512};
	static const uint64_t fc[4] = {512 * 7 * 7, 4096, 4096, 1000};
	uint64_t cin = 3;
	int rc = 0;

	for (unsigned i = 0; i < 13; i++) {
		rc |= add(m, 9 * cin * ch[i]) | add(m, ch[i]);
		cin = ch[i];
	}
	for (unsigned i = 0; i < 3; i++)
		rc |= add(m, fc[i] * fc[i + 1]) | add(m, fc[i + 1]);
	return rc;
}

/* BERT's encoder of @layers layers of width @h (feed-forward @ff), its
 * embeddings first, in the order of its parameters. */
static int bert(struct model *m, unsigned layers, uint64_t h, uint64_t ff)
{
	int rc = add(m, 30522 * h) | add(m, 512 * h) | add(m, 2 * h) | add(m, h) | add(m, h);

	for (unsigned l = 0; l < layers; l++) {
		for (unsigned q = 0; q < 4; q++) /* query, key, value, output */
			rc |= add(m, h * h) | add(m, h);
		rc |= add(m, h) | add(m, h);	   /* attention layer norm */
		rc |= add(m, h * ff) | add(m, ff); /* intermediate */
		rc |= add(m, ff * h) | add(m, h);  /* output */
		rc |= add(m, h) | add(m, h);	   /* output layer norm */
	}
	return rc | add(m, h * h) | add(m, h); /* pooler */
}

static int bert_large(struct model *m)
{
	return bert(m, 24, 1024, 4096);
}

/* 110M parameters: 199 tensors, 418 MiB of fp32 gradients */
static int bert_base(struct model *m)
{
	return bert(m, 12, 768, 3072);
}

/* ResNet-50's 12 largest tensors, in layer order: a reduced model small
 * enough to try every compression choice on (perf/compress). */
static int resnet50_12(struct model *m)
{
	struct model full = {0};
	uint32_t keep = 0;

	if (resnet50(&full))
		return -1;
	m->count = calloc(12, sizeof(uint64_t));
	if (!m->count) {
		model_free(&full);
		return -1;
	}
	for (uint32_t i = 0; i < full.n; i++) { /* ranked: fewer than 12 larger ones */
		uint32_t larger = 0;

		for (uint32_t j = 0; j < full.n; j++)
			larger += full.count[j] > full.count[i] ||
				  (j < i && full.count[j] == full.count[i]);
		if (larger < 12 && keep < 12) {
			m->count[keep++] = full.count[i];
			m->total += full.count[i];
		}
	}
	m->n = keep;
	model_free(&full);
	return 0;
}

int model_get(const char *name, struct model *m)
{
	static const struct {
		const char *name;
		int (*build)(struct model *);
	} known[] = {{"resnet50", resnet50},
		     {"vgg16", vgg16},
		     {"bert-base", bert_base},
		     {"bert-large", bert_large},
		     {"resnet50-12", resnet50_12}};

	memset(m, 0, sizeof(*m));
	for (unsigned i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		if (strcmp(name, known[i].name))
			continue;
		m->name = known[i].name;
		if (known[i].build(m)) {
			model_free(m);
			return -1;
		}
		return 0;
	}
	return -1;
}

void model_free(struct model *m)
{
	free(m->count);
	memset(m, 0, sizeof(*m));
}
