/* SPDX-License-Identifier: MIT */
/*
 * molly-run: generate text with the engine from a GGUF model.
 *
 *   molly-run --model M --prompt P [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]
 *             [--repeat-penalty R] [--repeat-last-n N] [--seed S] [--threads T] [--ctx N]
 *             [--chat] [--chat-template NAME] [--system TEXT] [--parse-special]
 *             [--logits-out F] [--ids-out F] [--prompt-ids-out F] [--quiet]
 *             [--lora FILE[:SCALE]]... [--skip-unsupported]
 *
 * --lora takes a PEFT directory, a GGUF LoRA file or a Molly adapter file; repeatable, the
 * deltas add up (y = W·x + Σ scale_i · s_i · B_i·(A_i·x)).
 *
 * Text streams to stdout as whole UTF-8 characters; statistics go to stderr.
 * --temp 0 is greedy (argmax, lowest id on ties).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "engine/chat.h"
#include "engine/forward.h"
#include "lora/adapter.h"
#include "lora/resident.h"
#include "engine/quant.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/threadpool.h"
#include "engine/vocab.h"

struct options {
	const char *model;
	const char *prompt;
	const char *system;
	long n_predict;
	struct sampler_params sp;
	bool seed_given;
	int threads;
	long n_ctx;
	bool chat;
	const char *chat_template;
	bool parse_special;
	bool quiet;
	const char *logits_out;
	const char *ids_out;
	const char *prompt_ids_out;
	const char *loras[16];
	float lora_scales[16];
	size_t n_loras;
	bool skip_unsupported;
};

static void usage(FILE *f)
{
	fputs("usage: molly-run --model M --prompt P [-n N] [--temp T] [--top-k K] [--top-p P]\n"
	      "                 [--min-p P] [--repeat-penalty R] [--repeat-last-n N] [--seed S]\n"
	      "                 [--threads T] [--ctx N] [--chat] [--chat-template NAME]\n"
	      "                 [--system TEXT] [--parse-special] [--logits-out F] [--ids-out F]\n"
	      "                 [--prompt-ids-out F] [--quiet] [--lora FILE[:SCALE]]...\n"
	      "                 [--skip-unsupported]\n",
	      f);
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *ret)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "molly-run: %s: '%s' is not an integer in [%ld, %ld]\n", opt, s, lo, hi);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

static int parse_float(const char *opt, const char *s, float lo, float hi, float *ret)
{
	char *end;
	float v;

	errno = 0;
	v = strtof(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi)) {
		fprintf(stderr, "molly-run: %s: '%s' is not a number in [%g, %g]\n", opt, s, lo, hi);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
	enum {
		OPT_TEMP = 256, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT_PENALTY, OPT_REPEAT_LAST_N,
		OPT_SEED, OPT_THREADS, OPT_CTX, OPT_CHAT, OPT_CHAT_TEMPLATE, OPT_SYSTEM,
		OPT_PARSE_SPECIAL, OPT_LOGITS_OUT, OPT_IDS_OUT, OPT_PROMPT_IDS_OUT, OPT_QUIET,
		OPT_LORA, OPT_SKIP_UNSUPPORTED,
	};
	static const struct option longopts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "prompt", required_argument, NULL, 'p' },
		{ "n-predict", required_argument, NULL, 'n' },
		{ "temp", required_argument, NULL, OPT_TEMP },
		{ "top-k", required_argument, NULL, OPT_TOP_K },
		{ "top-p", required_argument, NULL, OPT_TOP_P },
		{ "min-p", required_argument, NULL, OPT_MIN_P },
		{ "repeat-penalty", required_argument, NULL, OPT_REPEAT_PENALTY },
		{ "repeat-last-n", required_argument, NULL, OPT_REPEAT_LAST_N },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "ctx", required_argument, NULL, OPT_CTX },
		{ "chat", no_argument, NULL, OPT_CHAT },
		{ "chat-template", required_argument, NULL, OPT_CHAT_TEMPLATE },
		{ "system", required_argument, NULL, OPT_SYSTEM },
		{ "parse-special", no_argument, NULL, OPT_PARSE_SPECIAL },
		{ "logits-out", required_argument, NULL, OPT_LOGITS_OUT },
		{ "ids-out", required_argument, NULL, OPT_IDS_OUT },
		{ "prompt-ids-out", required_argument, NULL, OPT_PROMPT_IDS_OUT },
		{ "quiet", no_argument, NULL, OPT_QUIET },
		{ "lora", required_argument, NULL, OPT_LORA },
		{ "skip-unsupported", no_argument, NULL, OPT_SKIP_UNSUPPORTED },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	long v;
	int c;

	sampler_params_default(&o->sp);
	o->n_predict = 128;
	o->threads = (int) MIN(sysconf(_SC_NPROCESSORS_ONLN), 64);
	if (o->threads < 1)
		o->threads = 1;
	while ((c = getopt_long(argc, argv, "m:p:n:t:s:h", longopts, NULL)) >= 0) {
		switch (c) {
		case 'm':
			o->model = optarg;
			break;
		case 'p':
			o->prompt = optarg;
			break;
		case 'n':
			if (parse_long("-n", optarg, -1, 1L << 24, &o->n_predict) < 0)
				return -EINVAL;
			break;
		case OPT_TEMP:
			if (parse_float("--temp", optarg, -1e9f, 1e9f, &o->sp.temperature) < 0)
				return -EINVAL;
			break;
		case OPT_TOP_K:
			if (parse_long("--top-k", optarg, 0, 1L << 30, &v) < 0)
				return -EINVAL;
			o->sp.top_k = (int32_t) v;
			break;
		case OPT_TOP_P:
			if (parse_float("--top-p", optarg, 0.0f, 1.0f, &o->sp.top_p) < 0)
				return -EINVAL;
			break;
		case OPT_MIN_P:
			if (parse_float("--min-p", optarg, 0.0f, 1.0f, &o->sp.min_p) < 0)
				return -EINVAL;
			break;
		case OPT_REPEAT_PENALTY:
			if (parse_float("--repeat-penalty", optarg, 0.0f, 1e6f, &o->sp.repeat_penalty) < 0)
				return -EINVAL;
			break;
		case OPT_REPEAT_LAST_N:
			if (parse_long("--repeat-last-n", optarg, 0, 1L << 20, &v) < 0)
				return -EINVAL;
			o->sp.repeat_last_n = (int32_t) v;
			break;
		case 's':
		case OPT_SEED: {
			char *end;

			errno = 0;
			o->sp.seed = strtoull(optarg, &end, 10);
			if (errno || end == optarg || *end) {
				fprintf(stderr, "molly-run: --seed: '%s' is not an unsigned integer\n", optarg);
				return -EINVAL;
			}
			o->seed_given = true;
			break;
		}
		case 't':
		case OPT_THREADS:
			if (parse_long("--threads", optarg, 1, 1024, &v) < 0)
				return -EINVAL;
			o->threads = (int) v;
			break;
		case OPT_CTX:
			if (parse_long("--ctx", optarg, 1, 1L << 24, &o->n_ctx) < 0)
				return -EINVAL;
			break;
		case OPT_CHAT:
			o->chat = true;
			break;
		case OPT_CHAT_TEMPLATE:
			o->chat_template = optarg;
			break;
		case OPT_SYSTEM:
			o->system = optarg;
			break;
		case OPT_PARSE_SPECIAL:
			o->parse_special = true;
			break;
		case OPT_LOGITS_OUT:
			o->logits_out = optarg;
			break;
		case OPT_IDS_OUT:
			o->ids_out = optarg;
			break;
		case OPT_PROMPT_IDS_OUT:
			o->prompt_ids_out = optarg;
			break;
		case OPT_QUIET:
			o->quiet = true;
			break;
		case OPT_LORA: {
			/* FILE[:SCALE]: the scale is what follows the last ':' if it parses as a number
			 * (so paths with ':' still work without a scale) */
			char *colon = strrchr(optarg, ':'), *end = NULL;
			float scale = 1.0f;

			if (o->n_loras == ELEMENTSOF(o->loras)) {
				fprintf(stderr, "molly-run: at most %zu --lora\n", ELEMENTSOF(o->loras));
				return -EINVAL;
			}
			if (colon) {
				errno = 0;
				scale = strtof(colon + 1, &end);
				if (!errno && end != colon + 1 && *end == 0 && isfinite(scale))
					*colon = 0;
				else
					scale = 1.0f;
			}
			o->loras[o->n_loras] = optarg;
			o->lora_scales[o->n_loras++] = scale;
			break;
		}
		case OPT_SKIP_UNSUPPORTED:
			o->skip_unsupported = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "molly-run: unexpected argument '%s'\n", argv[optind]);
		return -EINVAL;
	}
	if (!o->model || !o->prompt) {
		fprintf(stderr, "molly-run: --model and --prompt are required\n");
		usage(stderr);
		return -EINVAL;
	}
	if ((o->chat_template || o->system) && !o->chat) {
		fprintf(stderr, "molly-run: --chat-template and --system need --chat\n");
		return -EINVAL;
	}
	if (!o->seed_given && getrandom(&o->sp.seed, sizeof(o->sp.seed), 0) != sizeof(o->sp.seed))
		o->sp.seed = (uint64_t) time(NULL);
	return 0;
}

static int write_ids(const char *path, const int32_t *ids, size_t n)
{
	FILE *f = fopen(path, "we");

	if (!f)
		return -errno;
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%" PRId32 "\n", ids[i]);
	if (fclose(f) != 0)
		return -errno;
	return 0;
}

static int write_logits(const char *path, const float *logits, uint32_t n)
{
	FILE *f = fopen(path, "we");

	if (!f)
		return -errno;
	for (uint32_t i = 0; i < n; i++)
		fprintf(f, "%u %.9g\n", i, logits[i]);
	if (fclose(f) != 0)
		return -errno;
	return 0;
}

/* The prompt text to tokenize: as given, or rendered as one user turn of a chat. */
static int build_prompt(const struct options *o, const struct model *m, char **ret, bool *special)
{
	struct chat_message msgs[2];
	enum chat_family fam;
	struct errmsg e = {};
	size_t n = 0;
	int r;

	if (!o->chat) {
		*ret = strdup(o->prompt);
		*special = o->parse_special;
		return *ret ? 0 : -ENOMEM;
	}
	r = chat_family_choose(o->chat_template, m->chat_template, &fam, &e);
	if (r < 0) {
		fprintf(stderr, "molly-run: chat template: %s (name one with --chat-template: "
				"llama2, llama3, chatml, mistral, phi3, gemma)\n",
			e.text);
		return r;
	}
	if (o->system)
		msgs[n++] = (struct chat_message){ .role = "system", .content = o->system };
	msgs[n++] = (struct chat_message){ .role = "user", .content = o->prompt };
	r = chat_render(fam, msgs, n, true, ret, &e);
	if (r < 0) {
		fprintf(stderr, "molly-run: chat template %s: %s\n", chat_family_name(fam), e.text);
		return r;
	}
	*special = true; /* the template's own markers are special tokens */
	return 0;
}

/* Adapters for one context: weights in malloc'd pages (no pool needed for a single run). */
struct loaded_loras {
	struct lora_adapter *adapters[16];
	struct lora_resident *res[16];
	struct forward_lora fl[16];
	void **pages;
	size_t n_pages, cap_pages;
	size_t page_bytes;
};

static void loaded_loras_done(struct loaded_loras *l)
{
	for (size_t i = 0; i < 16; i++) {
		lora_resident_free(l->res[i]);
		lora_adapter_free(l->adapters[i]);
	}
	for (size_t i = 0; i < l->n_pages; i++)
		free(l->pages[i]);
	free(l->pages);
}

static void *malloc_page(void *userdata, uint32_t *ret_id)
{
	struct loaded_loras *l = userdata;
	void *p;

	if (l->n_pages == l->cap_pages) {
		size_t cap = l->cap_pages ? 2 * l->cap_pages : 64;
		void **n = realloc(l->pages, cap * sizeof(*n));
		if (!n)
			return NULL;
		l->pages = n;
		l->cap_pages = cap;
	}
	if (posix_memalign(&p, 4096, l->page_bytes) != 0)
		return NULL;
	l->pages[l->n_pages] = p;
	*ret_id = (uint32_t) l->n_pages++;
	return p;
}

static int load_loras(const struct options *o, const struct model *m, struct loaded_loras *l)
{
	l->page_bytes = 1 << 16;
	for (size_t i = 0; i < o->n_loras; i++) {
		/* keep_f32: an F32 file is computed in F32, as it was published */
		struct lora_open_opts lo = { .base = m, .skip_unsupported = o->skip_unsupported,
					     .keep_f32 = true };
		struct errmsg e = {}, warn = {};
		int r;

		r = lora_adapter_open(o->loras[i], &lo, &l->adapters[i], &warn, &e);
		if (warn.text[0])
			fprintf(stderr, "molly-run: %s: warning: %s\n", o->loras[i], warn.text);
		if (r < 0) {
			fprintf(stderr, "molly-run: adapter %s: %s\n", o->loras[i], e.text);
			return r;
		}
		r = lora_adapter_check_base(l->adapters[i], m, &e);
		if (r < 0) {
			fprintf(stderr, "molly-run: adapter %s: %s\n", o->loras[i], e.text);
			return r;
		}
		/* a page must hold the longest row */
		size_t need = lora_resident_pages_needed(l->adapters[i], LORA_HOT_STORED,
							 l->page_bytes);
		while (need == (size_t) -1 && l->page_bytes < (1u << 26)) {
			l->page_bytes *= 2;
			need = lora_resident_pages_needed(l->adapters[i], LORA_HOT_STORED, l->page_bytes);
		}
		r = lora_resident_new(l->adapters[i], LORA_HOT_STORED, m->hp.n_layer, l->page_bytes,
				      malloc_page, l, &l->res[i], &e);
		if (r < 0) {
			fprintf(stderr, "molly-run: adapter %s: %s\n", o->loras[i], e.text);
			return r;
		}
		l->fl[i] = (struct forward_lora){ .res = l->res[i], .scale = o->lora_scales[i],
						  .order = i };
	}
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int run(int argc, char **argv)
{
	struct options o = {};
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_(model_ctx_freep) struct model_ctx *ctx = NULL;
	_cleanup_(threadpool_freep) struct threadpool *pool = NULL;
	_cleanup_(sampler_freep) struct sampler *smp = NULL;
	_cleanup_(loaded_loras_done) struct loaded_loras ad = {};
	_cleanup_free_ char *text = NULL;
	_cleanup_free_ int32_t *ids = NULL;
	_cleanup_free_ float *logits = NULL;
	struct errmsg e = {};
	struct detok dt;
	char piece[256];
	bool special;
	int64_t n_prompt;
	size_t n_ids, cap;
	uint32_t n_ctx, n_vocab;
	double t0, t1, t2;
	int r;

	r = parse_args(argc, argv, &o);
	if (r < 0)
		return r;
	t0 = now_s();
	r = model_load(o.model, &m, &e);
	if (r < 0) {
		fprintf(stderr, "molly-run: %s: %s\n", o.model, e.text[0] ? e.text : strerror(-r));
		return r;
	}
	n_vocab = m->hp.n_vocab;
	r = load_loras(&o, m, &ad);
	if (r < 0)
		return r;
	r = build_prompt(&o, m, &text, &special);
	if (r < 0)
		return r;

	n_prompt = vocab_tokenize(m->vocab, text, strlen(text), vocab_add_bos(m->vocab), special, NULL, 0);
	if (n_prompt < 0) {
		fprintf(stderr, "molly-run: tokenizing the prompt: %s\n", strerror((int) -n_prompt));
		return (int) n_prompt;
	}
	if (n_prompt == 0) {
		fprintf(stderr, "molly-run: the prompt is empty and the model adds no BOS token\n");
		return -EINVAL;
	}
	n_ctx = o.n_ctx ? (uint32_t) o.n_ctx : MIN(m->hp.n_ctx_train, 4096u);
	if (o.n_predict < 0 || (uint64_t) n_prompt + (uint64_t) o.n_predict > n_ctx)
		o.n_predict = MAX((int64_t) n_ctx - n_prompt, 0);
	if ((uint64_t) n_prompt >= n_ctx) {
		fprintf(stderr, "molly-run: the prompt has %" PRId64 " tokens, more than the context of "
				"%u allows (use --ctx up to the model's %u)\n",
			n_prompt, n_ctx, m->hp.n_ctx_train);
		return -E2BIG;
	}
	cap = (size_t) n_prompt + (size_t) o.n_predict;
	ids = malloc(cap * sizeof(*ids));
	logits = malloc(n_vocab * sizeof(float));
	if (!ids || !logits)
		return -ENOMEM;
	(void) vocab_tokenize(m->vocab, text, strlen(text), vocab_add_bos(m->vocab), special, ids,
			      (size_t) n_prompt);
	n_ids = (size_t) n_prompt;
	if (o.prompt_ids_out && (r = write_ids(o.prompt_ids_out, ids, n_ids)) < 0) {
		fprintf(stderr, "molly-run: %s: %s\n", o.prompt_ids_out, strerror(-r));
		return r;
	}

	if ((r = threadpool_new(o.threads, &pool)) < 0 ||
	    (r = model_ctx_new(m, n_ctx, 512, &ctx)) < 0 ||
	    (r = model_ctx_set_loras(ctx, ad.fl, o.n_loras)) < 0 ||
	    (r = sampler_new(&o.sp, n_vocab, &smp)) < 0) {
		fprintf(stderr, "molly-run: setting up: %s\n", strerror(-r));
		return r;
	}
	for (size_t i = 0; i < n_ids; i++)
		sampler_accept(smp, ids[i]);

	if (!o.quiet) {
		fputs(o.chat ? "" : o.prompt, stdout);
		fflush(stdout);
	}
	t1 = now_s();
	r = model_decode(ctx, pool, ids, n_ids, logits);
	if (r < 0) {
		fprintf(stderr, "molly-run: evaluating the prompt: %s\n", strerror(-r));
		return r;
	}
	t2 = now_s();
	if (o.logits_out && (r = write_logits(o.logits_out, logits, n_vocab)) < 0) {
		fprintf(stderr, "molly-run: %s: %s\n", o.logits_out, strerror(-r));
		return r;
	}

	detok_init(&dt, m->vocab, false);
	dt.first = false; /* the prompt was printed already; keep the continuation's spaces */
	size_t n_gen = 0;
	for (long i = 0; i < o.n_predict; i++) {
		int32_t id = sampler_sample(smp, logits);
		int64_t len;

		ids[n_ids++] = id;
		n_gen++;
		sampler_accept(smp, id);
		if (vocab_is_eog(m->vocab, id))
			break;
		len = detok_push(&dt, id, piece, sizeof(piece));
		if (len > 0 && !o.quiet) {
			fwrite(piece, 1, (size_t) len, stdout);
			fflush(stdout);
		}
		if (i + 1 == o.n_predict)
			break;
		r = model_decode(ctx, pool, &id, 1, logits);
		if (r < 0) {
			fprintf(stderr, "\nmolly-run: decoding: %s\n", strerror(-r));
			return r;
		}
	}
	int64_t len = detok_flush(&dt, piece, sizeof(piece));
	if (len > 0 && !o.quiet)
		fwrite(piece, 1, (size_t) len, stdout);
	if (!o.quiet)
		fputc('\n', stdout);
	fflush(stdout);
	double t3 = now_s();

	if (o.ids_out && (r = write_ids(o.ids_out, ids + n_prompt, n_gen)) < 0) {
		fprintf(stderr, "molly-run: %s: %s\n", o.ids_out, strerror(-r));
		return r;
	}
	fprintf(stderr,
		"molly-run: load %.3f s; prompt %" PRId64 " tokens %.1f tok/s; generated %zu tokens "
		"%.1f tok/s; seed %" PRIu64 "; %d threads, %s kernels\n",
		t1 - t0, n_prompt, n_prompt / MAX(t2 - t1, 1e-9), n_gen,
		n_gen > 1 ? (n_gen - 1) / MAX(t3 - t2, 1e-9) : 0.0, o.sp.seed, o.threads,
		quant_simd_level());
	return 0;
}

int main(int argc, char **argv)
{
	return run(argc, argv) < 0 ? 1 : 0;
}
