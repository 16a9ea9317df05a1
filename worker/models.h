/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The gradient tensors of real models, in layer order (front first), built
 * from each architecture's definition: ResNet-50 (25,557,032 parameters),
 * VGG-16 (138,357,544) and BERT-large (335,141,888, with the pooler).
 */
#ifndef PBOX_MODELS_H
#define PBOX_MODELS_H

#include <stdint.h>

struct model {
	const char *name;
	uint32_t n;	 /* tensors */
	uint64_t *count; /* elements of each, layer order */
	uint64_t total;	 /* elements */
};

/* The model called @name (resnet50, vgg16, bert-large; resnet50-12, its 12
 * largest tensors) into @m; 0, or -1
 * when unknown or out of memory. model_free() releases it. */
int model_get(const char *name, struct model *m);
void model_free(struct model *m);

/* The names model_get() knows, comma-separated. */
extern const char model_names[];

#endif /* PBOX_MODELS_H */
