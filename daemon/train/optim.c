/* SPDX-License-Identifier: MIT */
/*
 * optim.c: AdamW, the schedule and clipping (see optim.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "net.h"
#include "optim.h"

struct train_optim {
	struct train_net *net; /* borrowed */
	struct train_optim_opts o;
	uint64_t steps;
	float **m, **v; /* owned, one pair per parameter */
	size_t n;
};

int train_optim_new(struct train_net *net, const struct train_optim_opts *o,
		    struct train_optim **ret)
{
	_cleanup_(train_optim_freep) struct train_optim *op = NULL;

	assert_return(net && o && ret, -EINVAL);
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->net = net;
	op->o = *o;
	op->n = train_net_n_params(net);
	op->m = calloc(op->n, sizeof(*op->m));
	op->v = calloc(op->n, sizeof(*op->v));
	if (!op->m || !op->v)
		return -ENOMEM;
	for (size_t i = 0; i < op->n; i++) {
		struct train_param *p = train_net_param(net, i);

		op->m[i] = calloc((size_t) (p->rows * p->cols), sizeof(float));
		op->v[i] = calloc((size_t) (p->rows * p->cols), sizeof(float));
		if (!op->m[i] || !op->v[i])
			return -ENOMEM;
	}
	*ret = TAKE_PTR(op);
	return 0;
}

struct train_optim *train_optim_free(struct train_optim *o)
{
	if (!o)
		return NULL;
	for (size_t i = 0; i < o->n; i++) {
		if (o->m)
			free(o->m[i]);
		if (o->v)
			free(o->v[i]);
	}
	free(o->m);
	free(o->v);
	free(o);
	return NULL;
}

float train_lr_at(const struct train_optim_opts *o, uint64_t step)
{
	double p;

	if (step < o->warmup)
		return (float) ((double) o->lr * (double) step / (double) o->warmup);
	if (o->sched == TRAIN_SCHED_CONSTANT)
		return o->lr;
	p = (double) (step - o->warmup) /
	    (double) (o->total_steps > o->warmup ? o->total_steps - o->warmup : 1);
	if (o->sched == TRAIN_SCHED_LINEAR)
		return (float) (o->lr * fmax(0.0, 1.0 - p));
	return (float) (o->lr * fmax(0.0, 0.5 * (1.0 + cos(M_PI * p))));
}

void train_optim_step(struct train_optim *o, double *ret_norm, float *ret_lr)
{
	const struct train_optim_opts *c = &o->o;
	float lr = train_lr_at(c, o->steps);
	double sq = 0, norm, bc1, bc2s;
	float step_size, b2s;

	for (size_t i = 0; i < o->n; i++) {
		struct train_param *p = train_net_param(o->net, i);

		for (int64_t k = 0; k < p->rows * p->cols; k++)
			sq += (double) p->g[k] * p->g[k];
	}
	norm = sqrt(sq);
	if (c->clip > 0 && norm > c->clip) {
		float coef = (float) (c->clip / (norm + 1e-6));

		for (size_t i = 0; i < o->n; i++) {
			struct train_param *p = train_net_param(o->net, i);

			for (int64_t k = 0; k < p->rows * p->cols; k++)
				p->g[k] *= coef;
		}
	}
	o->steps++;
	bc1 = 1.0 - pow(c->beta1, (double) o->steps);
	bc2s = sqrt(1.0 - pow(c->beta2, (double) o->steps));
	step_size = (float) (lr / bc1);
	b2s = (float) bc2s;
	for (size_t i = 0; i < o->n; i++) {
		struct train_param *p = train_net_param(o->net, i);
		float *m = o->m[i], *v = o->v[i];
		float decay = p->decay ? (float) (1.0 - (double) lr * c->weight_decay) : 1.0f;

		for (int64_t k = 0; k < p->rows * p->cols; k++) {
			float g = p->g[k];

			p->w[k] *= decay;
			m[k] = m[k] * c->beta1 + g * (1.0f - c->beta1);
			v[k] = v[k] * c->beta2 + g * g * (1.0f - c->beta2);
			p->w[k] -= step_size * (m[k] / (sqrtf(v[k]) / b2s + c->eps));
		}
	}
	if (ret_norm)
		*ret_norm = norm;
	if (ret_lr)
		*ret_lr = lr;
}

uint64_t train_optim_steps(const struct train_optim *o)
{
	return o->steps;
}

void train_optim_set_steps(struct train_optim *o, uint64_t steps)
{
	o->steps = steps;
}

float *train_optim_m(struct train_optim *o, size_t i)
{
	return i < o->n ? o->m[i] : NULL;
}

float *train_optim_v(struct train_optim *o, size_t i)
{
	return i < o->n ? o->v[i] : NULL;
}
