/* SPDX-License-Identifier: MIT */
/*
 * molly-tokenize: print the token ids of a text, as the model's tokenizer gives them.
 *
 *   molly-tokenize --model M [--no-bos] [--parse-special] TEXT
 *
 * The ids go to stdout on one line, separated by spaces. BOS is added when the model's
 * vocabulary says so (tokenizer.ggml.add_bos_token, else its kind's default) unless --no-bos;
 * --parse-special turns control-token texts such as "<|im_start|>" into their ids. Only the
 * tokenizer.* keys are read, so vocabulary-only GGUF files work.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/vocab.h"

struct options {
	const char *model;
	const char *text;
	bool no_bos;
	bool parse_special;
};

static void usage(FILE *f)
{
	fputs("usage: molly-tokenize --model M [--no-bos] [--parse-special] TEXT\n", f);
}

static int parse_args(int argc, char **argv, struct options *o)
{
	enum { OPT_NO_BOS = 0x100, OPT_PARSE_SPECIAL };
	static const struct option longopts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "no-bos", no_argument, NULL, OPT_NO_BOS },
		{ "parse-special", no_argument, NULL, OPT_PARSE_SPECIAL },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	int c;

	while ((c = getopt_long(argc, argv, "m:h", longopts, NULL)) >= 0) {
		switch (c) {
		case 'm':
			o->model = optarg;
			break;
		case OPT_NO_BOS:
			o->no_bos = true;
			break;
		case OPT_PARSE_SPECIAL:
			o->parse_special = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (!o->model) {
		fputs("molly-tokenize: --model is required\n", stderr);
		usage(stderr);
		return -EINVAL;
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "molly-tokenize: expected exactly one TEXT argument, got %d\n",
			argc - optind);
		usage(stderr);
		return -EINVAL;
	}
	o->text = argv[optind];
	return 0;
}

static int run(int argc, char **argv)
{
	_cleanup_(gguf_freep) struct gguf *g = NULL;
	_cleanup_(vocab_freep) struct vocab *v = NULL;
	_cleanup_free_ int32_t *ids = NULL;
	struct options o = {};
	struct errmsg e = {};
	size_t len;
	int64_t n;
	bool bos;
	int r;

	r = parse_args(argc, argv, &o);
	if (r < 0)
		return r;

	r = gguf_open(o.model, &g, &e);
	if (r >= 0)
		r = vocab_load(g, &v, &e);
	if (r < 0) {
		fprintf(stderr, "molly-tokenize: %s: %s\n", o.model,
			e.text[0] ? e.text : strerror(-r));
		return r;
	}

	len = strlen(o.text);
	bos = !o.no_bos && vocab_add_bos(v);
	n = vocab_tokenize(v, o.text, len, bos, o.parse_special, NULL, 0);
	if (n >= 0) {
		ids = malloc(((size_t) n + 1) * sizeof(*ids));
		if (!ids)
			n = -ENOMEM;
		else
			n = vocab_tokenize(v, o.text, len, bos, o.parse_special, ids, (size_t) n);
	}
	if (n < 0) {
		fprintf(stderr, "molly-tokenize: tokenizing: %s\n", strerror((int) -n));
		return (int) n;
	}

	for (int64_t i = 0; i < n; i++)
		printf(i ? " %d" : "%d", ids[i]);
	putchar('\n');
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "molly-tokenize: writing the ids: %s\n", strerror(errno));
		return -EIO;
	}
	return 0;
}

int main(int argc, char **argv)
{
	return run(argc, argv) < 0 ? 1 : 0;
}
