/* SPDX-License-Identifier: MIT */
/*
 * ops-loss.c: cross-entropy over the vocabulary with its gradient (see ops.h). The
 * log-sum-exp is taken around the row's maximum and summed in double.
 */
#include <math.h>
#include <string.h>

#include "ops.h"

double train_xent(const float *logits, const int32_t *target, int64_t n, int64_t n_vocab,
		  float scale, float *dlogits)
{
	double loss = 0.0;

	for (int64_t t = 0; t < n; t++) {
		const float *z = logits + t * n_vocab;
		float *dz = dlogits ? dlogits + t * n_vocab : NULL;
		float mx = -INFINITY;
		double sum = 0.0, lse;

		if (target[t] < 0) {
			if (dz)
				memset(dz, 0, (size_t) n_vocab * sizeof(float));
			continue;
		}
		for (int64_t i = 0; i < n_vocab; i++)
			if (z[i] > mx)
				mx = z[i];
		for (int64_t i = 0; i < n_vocab; i++)
			sum += exp((double) z[i] - mx);
		lse = mx + log(sum);
		loss += lse - z[target[t]];
		if (!dz)
			continue;
		for (int64_t i = 0; i < n_vocab; i++)
			dz[i] = (float) (exp((double) z[i] - lse) * scale);
		dz[target[t]] -= scale;
	}
	return loss;
}
