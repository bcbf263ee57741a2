/* SPDX-License-Identifier: MIT */
/*
 * molly-perplexity: held-out perplexity of a model on a corpus, per source, per language and
 * overall, and of the unigram and bigram baselines in the same token space.
 *
 *   molly-perplexity --model M.gguf --data DOCS.jsonl [--split heldout] [--ctx N]
 *                    [--stride S] [--threads T] [--baselines] [--train-split train]
 *                    [--no-model] [--max-docs N] [--json]
 *
 * DOCS.jsonl is tools/build-corpus.sh's docs.jsonl: one object per line with "text" and
 * optionally "split", "source" and "lang" (a line without "split" belongs to every split).
 * Each document is tokenized by the model's tokenizer, with BOS when the tokenizer adds one
 * (as in training). Its targets are tokens 1..n-1 (not BOS; no EOS is appended): every target
 * is scored with -ln p(token | the tokens before it).
 *
 * Window (sliding, daemon/engine/perplexity.h): a document is run in windows of --ctx tokens
 * (default: the model's training context), each started from an empty cache at position 0,
 * the next one --stride tokens later (default ctx/2); a window scores only the targets no
 * earlier window scored. So a target sees all tokens before it when it is within the first
 * ctx of its document, and at least ctx - stride of them otherwise. --stride equal to --ctx
 * gives disjoint chunks (cheaper, each chunk's first targets see little context). Only the
 * first window starts with BOS.
 *
 * Figures, token-weighted (a group's total NLL over its number of targets):
 *   ppl = exp(Σ NLL / tokens)       bits/byte = Σ NLL / ln 2 / the documents' UTF-8 bytes
 * for the groups "all", "lang=L" and "source=S".
 *
 * --baselines counts the --train-split documents (default "train") with the same tokenizer
 * and scores the same targets with a unigram (add-one) and an interpolated Kneser-Ney bigram
 * model (daemon/engine/ngram.h has the formulas). --no-model skips the forward pass (only the
 * tokenizer is read from M.gguf, which may then be a vocabulary-only file).
 *
 * Exit status: 0; 1 on an error; 2 on a usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/ngram.h"
#include "engine/perplexity.h"
#include "engine/threadpool.h"
#include "engine/vocab.h"

#define MAX_GROUPS 256

enum { SCORER_MODEL, SCORER_UNIGRAM, SCORER_BIGRAM, N_SCORERS };
static const char *const scorer_names[N_SCORERS] = { "model", "unigram", "bigram" };

struct group {
	char *name; /* owned: "all", "lang=en", "source=man-en" */
	uint64_t docs, tokens, bytes;
	double nll[N_SCORERS];
};

struct options {
	const char *model, *data, *split, *train_split;
	long ctx, stride, max_docs;
	int threads;
	bool baselines, no_model, json;
};

struct eval {
	const struct options *o;
	const struct model *m;  /* borrowed; NULL with --no-model */
	const struct vocab *v;  /* borrowed */
	struct ngram *ngram;    /* borrowed; NULL without --baselines */
	struct threadpool *pool; /* borrowed */
	uint32_t ctx, stride, n_vocab;
	struct ppl *ppl;        /* borrowed; NULL with --no-model */
	struct group groups[MAX_GROUPS];
	size_t n_groups;
	uint64_t n_docs;
};

/* ---- the corpus ---- */

static bool split_matches(const char *want, const char *have)
{
	/* "held-out" is what the docs call "heldout" */
	if (strcmp(want, "held-out") == 0)
		want = "heldout";
	return strcmp(want, have) == 0;
}

typedef int (*doc_fn)(const char *text, size_t len, const char *source, const char *lang,
		      void *userdata);

/* Calls fn for every line of path whose "split" is split; -errno or fn's error. */
static int for_each_doc(const char *path, const char *split, long max_docs, doc_fn fn,
			void *userdata)
{
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	long n_line = 0, n_docs = 0;
	ssize_t len;
	FILE *f;
	int r = 0;

	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (r >= 0 && (max_docs <= 0 || n_docs < max_docs) &&
	       (len = getline(&line, &cap, f)) > 0) {
		struct json_object *o, *t, *sv, *srcv, *lv;

		n_line++;
		if (len == 1 && line[0] == '\n')
			continue;
		o = json_tokener_parse(line);
		if (!o || !json_object_is_type(o, json_type_object) ||
		    !json_object_object_get_ex(o, "text", &t) ||
		    !json_object_is_type(t, json_type_string)) {
			json_object_put(o);
			fprintf(stderr, "molly-perplexity: %s:%ld: not an object with \"text\"\n",
				path, n_line);
			r = -EINVAL;
			break;
		}
		if (!split || !json_object_object_get_ex(o, "split", &sv) ||
		    split_matches(split, json_object_get_string(sv))) {
			const char *source = "?", *lang = "?";

			if (json_object_object_get_ex(o, "source", &srcv))
				source = json_object_get_string(srcv);
			if (json_object_object_get_ex(o, "lang", &lv))
				lang = json_object_get_string(lv);
			r = fn(json_object_get_string(t), (size_t) json_object_get_string_len(t),
			       source, lang, userdata);
			n_docs++;
		}
		json_object_put(o);
	}
	fclose(f);
	return r;
}

static int tokenize(const struct vocab *v, const char *text, size_t len, int32_t **ret_ids,
		    size_t *ret_n)
{
	bool bos = vocab_add_bos(v);
	int64_t n = vocab_tokenize(v, text, len, bos, false, NULL, 0);
	int32_t *ids;

	if (n < 0)
		return (int) n;
	ids = malloc(MAX((size_t) n, (size_t) 1) * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	n = vocab_tokenize(v, text, len, bos, false, ids, (size_t) n);
	if (n < 0) {
		free(ids);
		return (int) n;
	}
	*ret_ids = ids;
	*ret_n = (size_t) n;
	return 0;
}

/* ---- groups ---- */

static struct group *group_get(struct eval *ev, const char *kind, const char *value)
{
	char name[256];

	snprintf(name, sizeof(name), "%s%s%s", kind, *kind ? "=" : "", value);
	for (size_t i = 0; i < ev->n_groups; i++)
		if (strcmp(ev->groups[i].name, name) == 0)
			return &ev->groups[i];
	if (ev->n_groups == MAX_GROUPS)
		return NULL;
	ev->groups[ev->n_groups] = (struct group){ .name = strdup(name) };
	if (!ev->groups[ev->n_groups].name)
		return NULL;
	return &ev->groups[ev->n_groups++];
}

/* ---- per document ---- */

static int eval_doc(const char *text, size_t len, const char *source, const char *lang,
		    void *userdata)
{
	struct eval *ev = userdata;
	_cleanup_free_ int32_t *ids = NULL;
	_cleanup_free_ double *nll = NULL;
	struct group *g[3];
	double sum[N_SCORERS] = {};
	size_t n = 0;
	int r;

	r = tokenize(ev->v, text, len, &ids, &n);
	if (r < 0)
		return r;
	g[0] = group_get(ev, "", "all");
	g[1] = group_get(ev, "lang", lang);
	g[2] = group_get(ev, "source", source);
	if (!g[0] || !g[1] || !g[2])
		return -ENOMEM;
	if (n >= 2) {
		nll = calloc(n, sizeof(*nll));
		if (!nll)
			return -ENOMEM;
		if (ev->ppl) {
			r = ppl_doc_nll(ev->ppl, ids, n, nll);
			if (r < 0)
				return r;
			for (size_t t = 1; t < n; t++)
				sum[SCORER_MODEL] += nll[t];
		}
		if (ev->ngram)
			for (size_t t = 1; t < n; t++) {
				sum[SCORER_UNIGRAM] -= ngram_unigram_logp(ev->ngram, ids[t]);
				sum[SCORER_BIGRAM] -= ngram_bigram_logp(ev->ngram, ids[t - 1], ids[t]);
			}
	}
	for (int i = 0; i < 3; i++) {
		g[i]->docs++;
		g[i]->tokens += n >= 2 ? n - 1 : 0;
		g[i]->bytes += len;
		for (int s = 0; s < N_SCORERS; s++)
			g[i]->nll[s] += sum[s];
	}
	ev->n_docs++;
	return 0;
}

static int count_doc(const char *text, size_t len, const char *source, const char *lang,
		     void *userdata)
{
	struct eval *ev = userdata;
	_cleanup_free_ int32_t *ids = NULL;
	size_t n = 0;
	int r;

	(void) source;
	(void) lang;
	r = tokenize(ev->v, text, len, &ids, &n);
	if (r < 0)
		return r;
	return ngram_add(ev->ngram, ids, n);
}

/* ---- output ---- */

static int group_order(const void *a, const void *b)
{
	const struct group *x = a, *y = b;
	int kx = strcmp(x->name, "all") == 0 ? 0 : strncmp(x->name, "lang=", 5) == 0 ? 1 : 2;
	int ky = strcmp(y->name, "all") == 0 ? 0 : strncmp(y->name, "lang=", 5) == 0 ? 1 : 2;

	return kx != ky ? kx - ky : strcmp(x->name, y->name);
}

static bool scorer_on(const struct eval *ev, int s)
{
	return s == SCORER_MODEL ? ev->ppl != NULL : ev->ngram != NULL;
}

static void print_text(const struct eval *ev)
{
	printf("# %s, split %s: %" PRIu64 " documents", ev->o->data, ev->o->split, ev->n_docs);
	if (ev->m)
		printf("; window %u, stride %u (%s)", ev->ctx, ev->stride,
		       ev->stride == ev->ctx ? "disjoint chunks" : "sliding");
	if (ev->ngram)
		printf("; baselines from split %s: %" PRIu64 " tokens, bigram discount %.4f",
		       ev->o->train_split, ngram_n_targets(ev->ngram), ngram_discount(ev->ngram));
	printf("\n%-28s %6s %10s %11s", "group", "docs", "tokens", "bytes");
	for (int s = 0; s < N_SCORERS; s++)
		if (scorer_on(ev, s))
			printf(" %10s_ppl %6s_bpb", scorer_names[s], scorer_names[s]);
	putchar('\n');
	for (size_t i = 0; i < ev->n_groups; i++) {
		const struct group *g = &ev->groups[i];

		printf("%-28s %6" PRIu64 " %10" PRIu64 " %11" PRIu64, g->name, g->docs, g->tokens,
		       g->bytes);
		for (int s = 0; s < N_SCORERS; s++) {
			if (!scorer_on(ev, s))
				continue;
			if (g->tokens == 0)
				printf(" %14s %10s", "-", "-");
			else
				printf(" %14.4f %10.4f", exp(g->nll[s] / (double) g->tokens),
				       g->nll[s] / M_LN2 / (double) g->bytes);
		}
		putchar('\n');
	}
}

static int print_json(const struct eval *ev)
{
	struct json_object *root = json_object_new_object(), *groups = json_object_new_array();

	if (!root || !groups) {
		json_object_put(root);
		json_object_put(groups);
		return -ENOMEM;
	}
	json_object_object_add(root, "data", json_object_new_string(ev->o->data));
	json_object_object_add(root, "split", json_object_new_string(ev->o->split));
	json_object_object_add(root, "documents", json_object_new_int64((int64_t) ev->n_docs));
	if (ev->m) {
		json_object_object_add(root, "model", json_object_new_string(ev->o->model));
		json_object_object_add(root, "ctx", json_object_new_int64(ev->ctx));
		json_object_object_add(root, "stride", json_object_new_int64(ev->stride));
	}
	if (ev->ngram) {
		json_object_object_add(root, "train_split",
				       json_object_new_string(ev->o->train_split));
		json_object_object_add(root, "train_tokens",
				       json_object_new_int64((int64_t) ngram_n_targets(ev->ngram)));
		json_object_object_add(root, "bigram_discount",
				       json_object_new_double(ngram_discount(ev->ngram)));
	}
	for (size_t i = 0; i < ev->n_groups; i++) {
		const struct group *g = &ev->groups[i];
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "group", json_object_new_string(g->name));
		json_object_object_add(o, "docs", json_object_new_int64((int64_t) g->docs));
		json_object_object_add(o, "tokens", json_object_new_int64((int64_t) g->tokens));
		json_object_object_add(o, "bytes", json_object_new_int64((int64_t) g->bytes));
		for (int s = 0; s < N_SCORERS; s++) {
			struct json_object *so;

			if (!scorer_on(ev, s) || g->tokens == 0)
				continue;
			so = json_object_new_object();
			json_object_object_add(so, "nll", json_object_new_double(g->nll[s]));
			json_object_object_add(
			    so, "ppl", json_object_new_double(exp(g->nll[s] / (double) g->tokens)));
			json_object_object_add(
			    so, "bits_per_byte",
			    json_object_new_double(g->nll[s] / M_LN2 / (double) g->bytes));
			json_object_object_add(o, scorer_names[s], so);
		}
		json_object_array_add(groups, o);
	}
	json_object_object_add(root, "groups", groups);
	puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
							  JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(root);
	return 0;
}

/* ---- main ---- */

static void usage(FILE *f)
{
	fputs("Usage: molly-perplexity --model M.gguf --data DOCS.jsonl [--split heldout]\n"
	      "                        [--ctx N] [--stride S] [--threads T] [--baselines]\n"
	      "                        [--train-split train] [--no-model] [--max-docs N] [--json]\n"
	      "Perplexity per source, per language and overall (token-weighted).\n"
	      "  --split S        documents whose \"split\" is S (default heldout)\n"
	      "  --ctx N          window in tokens (default: the model's context)\n"
	      "  --stride S       window step (default ctx/2; ctx = disjoint chunks)\n"
	      "  --baselines      also unigram and Kneser-Ney bigram models counted on\n"
	      "                   --train-split (default train)\n"
	      "  --no-model       baselines only (M.gguf may be a vocabulary-only file)\n"
	      "  --max-docs N     the first N documents of the split only\n",
	      f);
}

static int parse_long(const char *opt, const char *s, long min, long max, long *ret)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max) {
		fprintf(stderr, "molly-perplexity: %s '%s': expected %ld..%ld\n", opt, s, min, max);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

static int run(const struct options *o)
{
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_(gguf_freep) struct gguf *g = NULL;
	_cleanup_(vocab_freep) struct vocab *own_vocab = NULL;
	_cleanup_(ngram_freep) struct ngram *ngram = NULL;
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
	_cleanup_(ppl_freep) struct ppl *ppl = NULL;
	struct eval ev = { .o = o };
	struct errmsg e = {};
	int r;

	if (o->no_model) {
		r = gguf_open(o->model, &g, &e);
		if (r >= 0)
			r = vocab_load(g, &own_vocab, &e);
		ev.v = own_vocab;
	} else {
		r = model_load(o->model, &m, &e);
		if (r >= 0) {
			ev.m = m;
			ev.v = m->vocab;
		}
	}
	if (r < 0) {
		fprintf(stderr, "molly-perplexity: %s: %s\n", o->model,
			e.text[0] ? e.text : strerror(-r));
		return r;
	}
	ev.n_vocab = vocab_n_tokens(ev.v);
	if (m) {
		ev.n_vocab = m->hp.n_vocab;
		ev.ctx = o->ctx > 0 ? (uint32_t) o->ctx : m->hp.n_ctx_train;
		if (ev.ctx == 0)
			ev.ctx = 512;
		ev.stride = o->stride > 0 ? (uint32_t) o->stride : MAX(ev.ctx / 2, 1u);
		if (ev.stride > ev.ctx) {
			fprintf(stderr, "molly-perplexity: --stride %u is larger than --ctx %u\n",
				ev.stride, ev.ctx);
			return -EINVAL;
		}
		r = threadpool_new(o->threads, &pool);
		if (r < 0)
			return r;
		ev.pool = pool;
		r = ppl_new(m, pool, ev.ctx, ev.stride, &ppl);
		if (r < 0) {
			fprintf(stderr, "molly-perplexity: workspace: %s\n", strerror(-r));
			return r;
		}
		ev.ppl = ppl;
	}
	if (o->baselines) {
		r = ngram_new(ev.n_vocab, &ngram);
		if (r < 0)
			return r;
		ev.ngram = ngram;
		r = for_each_doc(o->data, o->train_split, 0, count_doc, &ev);
		if (r >= 0)
			r = ngram_finish(ngram);
		if (r < 0) {
			fprintf(stderr, "molly-perplexity: %s (split %s): %s\n", o->data,
				o->train_split, strerror(-r));
			return r;
		}
	}
	r = for_each_doc(o->data, o->split, o->max_docs, eval_doc, &ev);
	if (r < 0) {
		fprintf(stderr, "molly-perplexity: %s: %s\n", o->data, strerror(-r));
		goto out;
	}
	if (ev.n_docs == 0) {
		fprintf(stderr, "molly-perplexity: %s: no documents in split %s\n", o->data,
			o->split);
		r = -ENOENT;
		goto out;
	}
	qsort(ev.groups, ev.n_groups, sizeof(ev.groups[0]), group_order);
	if (o->json)
		r = print_json(&ev);
	else
		print_text(&ev);
out:
	for (size_t i = 0; i < ev.n_groups; i++)
		free(ev.groups[i].name);
	return r;
}

int main(int argc, char **argv)
{
	enum { OPT_STRIDE = 0x100, OPT_TRAIN_SPLIT, OPT_NO_MODEL, OPT_MAX_DOCS, OPT_JSON };
	static const struct option options[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "data", required_argument, NULL, 'd' },
		{ "split", required_argument, NULL, 's' },
		{ "ctx", required_argument, NULL, 'c' },
		{ "stride", required_argument, NULL, OPT_STRIDE },
		{ "threads", required_argument, NULL, 't' },
		{ "baselines", no_argument, NULL, 'b' },
		{ "train-split", required_argument, NULL, OPT_TRAIN_SPLIT },
		{ "no-model", no_argument, NULL, OPT_NO_MODEL },
		{ "max-docs", required_argument, NULL, OPT_MAX_DOCS },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN), v;
	struct options o = {
		.split = "heldout",
		.train_split = "train",
		.threads = (int) MAX(MIN(ncpu, 8L), 1L),
	};
	int c;

	while ((c = getopt_long(argc, argv, "m:d:s:c:t:bh", options, NULL)) >= 0) {
		switch (c) {
		case 'm':
			o.model = optarg;
			break;
		case 'd':
			o.data = optarg;
			break;
		case 's':
			o.split = optarg;
			break;
		case 'c':
			if (parse_long("--ctx", optarg, 2, 1 << 20, &o.ctx) < 0)
				return 2;
			break;
		case OPT_STRIDE:
			if (parse_long("--stride", optarg, 1, 1 << 20, &o.stride) < 0)
				return 2;
			break;
		case 't':
			if (parse_long("--threads", optarg, 1, 64, &v) < 0)
				return 2;
			o.threads = (int) v;
			break;
		case 'b':
			o.baselines = true;
			break;
		case OPT_TRAIN_SPLIT:
			o.train_split = optarg;
			break;
		case OPT_NO_MODEL:
			o.no_model = true;
			break;
		case OPT_MAX_DOCS:
			if (parse_long("--max-docs", optarg, 1, LONG_MAX, &o.max_docs) < 0)
				return 2;
			break;
		case OPT_JSON:
			o.json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !o.model || !o.data) {
		usage(stderr);
		return 2;
	}
	if (o.no_model)
		o.baselines = true;
	return run(&o) < 0 ? 1 : 0;
}
