/* SPDX-License-Identifier: MIT */
/*
 * molly-bpe-train: trains Molly's byte-level BPE tokenizer on a JSONL corpus and writes it as
 * a vocabulary-only GGUF (tokenizer.* keys, no tensors), which `molly-mkmodel --vocab` puts
 * into a model. Optionally measures it on other text with the run-time tokenizer (vocab.c):
 * bytes per token per language, and that every document decodes back to its exact bytes.
 *
 *   molly-bpe-train --data F.jsonl [--split train] --vocab-size N [--min-count C]
 *                   [--pre NAME] --out TOK.gguf
 *                   [--eval F.jsonl [--eval-split heldout] [--eval-by lang]] [--verbose]
 *
 * Each JSONL line is an object with "text" (a string), and optionally "split" and "lang"
 * (tools/build-corpus.sh's docs.jsonl has both). With --split S only lines whose "split" is
 * S are used (lines without "split" always are). The vocabulary has --vocab-size tokens:
 * 256 bytes, the merges, 4 special tokens (fewer merges when the text runs out of pairs
 * seen --min-count times, default 2). Same input, same options: same file, byte for byte.
 *
 * Exit status: 0; 1 on an error; 2 on a usage error; 3 when --eval finds a document that
 * does not decode back to itself.
 */
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "engine/bpe-train.h"
#include "engine/gguf-writer.h"
#include "engine/gguf.h"
#include "engine/vocab.h"

#define MAX_LANGS 64

/* Calls fn(text, len, lang, userdata) for every selected line of path; -errno or fn's. */
static const char *group_key = "lang";

static int for_each_doc(const char *path, const char *split,
			int (*fn)(const char *, size_t, const char *, void *), void *userdata)
{
	_cleanup_free_ char *line = NULL;
	size_t cap = 0, lineno = 0;
	ssize_t n;
	FILE *f = fopen(path, "re");
	int r = 0;

	if (!f) {
		r = -errno;
		fprintf(stderr, "molly-bpe-train: %s: %s\n", path, strerror(errno));
		return r;
	}
	while (r >= 0 && (n = getline(&line, &cap, f)) >= 0) {
		struct json_object *o, *v;
		const char *lang = "";

		lineno++;
		if (n == 0 || line[0] == '\n')
			continue;
		o = json_tokener_parse(line);
		if (!o || !json_object_is_type(o, json_type_object) ||
		    !json_object_object_get_ex(o, "text", &v) ||
		    !json_object_is_type(v, json_type_string)) {
			fprintf(stderr, "molly-bpe-train: %s:%zu: not an object with a \"text\" "
					"string\n",
				path, lineno);
			json_object_put(o);
			r = -EINVAL;
			break;
		}
		struct json_object *sv, *lv;
		if (split && json_object_object_get_ex(o, "split", &sv) &&
		    strcmp(json_object_get_string(sv), split) != 0) {
			json_object_put(o);
			continue;
		}
		if (json_object_object_get_ex(o, group_key, &lv))
			lang = json_object_get_string(lv);
		r = fn(json_object_get_string(v), (size_t) json_object_get_string_len(v), lang,
		       userdata);
		json_object_put(o);
	}
	fclose(f);
	return r;
}

static int add_doc(const char *text, size_t len, const char *lang, void *userdata)
{
	(void) lang;
	return bpe_train_add_text(userdata, text, len);
}

/* ---- evaluation ---- */

struct lang_stats {
	char name[32];
	uint64_t docs, bytes, tokens, bad;
};

struct eval {
	const struct vocab *vocab;
	struct lang_stats langs[MAX_LANGS + 1]; /* the last one is the total */
	size_t n_langs;
	int32_t *ids;
	size_t cap_ids;
	char *back;
	size_t cap_back;
	bool verbose;
};

static struct lang_stats *lang_of(struct eval *ev, const char *lang)
{
	for (size_t i = 0; i < ev->n_langs; i++)
		if (strcmp(ev->langs[i].name, lang) == 0)
			return &ev->langs[i];
	if (ev->n_langs == MAX_LANGS)
		return NULL;
	snprintf(ev->langs[ev->n_langs].name, sizeof(ev->langs[0].name), "%s",
		 lang[0] ? lang : "-");
	return &ev->langs[ev->n_langs++];
}

static int eval_doc(const char *text, size_t len, const char *lang, void *userdata)
{
	struct eval *ev = userdata;
	struct lang_stats *ls = lang_of(ev, lang), *all = &ev->langs[MAX_LANGS];
	int64_t n;
	size_t blen = 0;

	n = vocab_tokenize(ev->vocab, text, len, false, false, ev->ids, ev->cap_ids);
	if (n < 0)
		return (int) n;
	if ((size_t) n > ev->cap_ids) {
		free(ev->ids);
		ev->cap_ids = (size_t) n;
		ev->ids = malloc(ev->cap_ids * sizeof(*ev->ids));
		if (!ev->ids)
			return -ENOMEM;
		n = vocab_tokenize(ev->vocab, text, len, false, false, ev->ids, ev->cap_ids);
		if (n < 0)
			return (int) n;
	}
	if (ev->cap_back < len + 64) {
		free(ev->back);
		ev->cap_back = len + 64;
		ev->back = malloc(ev->cap_back);
		if (!ev->back)
			return -ENOMEM;
	}
	for (int64_t i = 0; i < n; i++) {
		/* past the buffer (a decoding longer than the text) only the length counts */
		bool room = blen < ev->cap_back;
		int64_t k = vocab_token_to_piece(ev->vocab, ev->ids[i], false,
						 room ? ev->back + blen : ev->back,
						 room ? ev->cap_back - blen : 0);
		if (k < 0)
			return (int) k;
		blen += (size_t) k;
	}
	for (struct lang_stats *s = ls; s; s = s == all ? NULL : all) {
		s->docs++;
		s->bytes += len;
		s->tokens += (uint64_t) n;
		if (blen != len || memcmp(ev->back, text, len) != 0)
			s->bad++;
	}
	if (ev->verbose && (blen != len || memcmp(ev->back, text, len) != 0))
		fprintf(stderr, "molly-bpe-train: round trip differs: %.60s...\n", text);
	return 0;
}

static void usage(FILE *f)
{
	fputs("Usage: molly-bpe-train --data F.jsonl [--split S] --vocab-size N [--min-count C]\n"
	      "                       [--pre NAME] --out TOK.gguf [--eval F.jsonl]\n"
	      "                       [--eval-split S] [--verbose]\n"
	      "Trains a byte-level BPE tokenizer on the \"text\" of each JSONL line.\n"
	      "  --data F        training text (repeatable)\n"
	      "  --split S       only lines whose \"split\" is S (e.g. train)\n"
	      "  --vocab-size N  tokens in all: 256 bytes + merges + 4 special (4096)\n"
	      "  --min-count C   stop merging below C occurrences (2)\n"
	      "  --pre NAME      pre-tokenizer, a tokenizer.ggml.pre llama.cpp knows (llama-bpe)\n"
	      "  --out F         the vocabulary-only GGUF\n"
	      "  --eval F        bytes per token and round trip per \"lang\" on F's lines\n"
	      "  --eval-split S  only lines whose \"split\" is S (heldout)\n"
	      "  --eval-by KEY   group the figures by this field (lang)\n",
	      f);
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "data", required_argument, NULL, 'd' },
		{ "split", required_argument, NULL, 's' },
		{ "vocab-size", required_argument, NULL, 'n' },
		{ "min-count", required_argument, NULL, 'm' },
		{ "pre", required_argument, NULL, 'p' },
		{ "out", required_argument, NULL, 'o' },
		{ "eval", required_argument, NULL, 'e' },
		{ "eval-split", required_argument, NULL, 'E' },
		{ "eval-by", required_argument, NULL, 'b' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	const char *data[16], *split = NULL, *pre = "llama-bpe", *out = NULL, *eval_path = NULL,
			      *eval_split = "heldout";
	size_t n_data = 0;
	unsigned long vocab_size = 4096, min_count = 2;
	bool verbose = false;
	struct errmsg e = {};
	int c, r;

	while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0) {
		char *end;

		switch (c) {
		case 'd':
			if (n_data == ELEMENTSOF(data)) {
				fprintf(stderr, "molly-bpe-train: at most 16 --data files\n");
				return 2;
			}
			data[n_data++] = optarg;
			break;
		case 's':
			split = optarg;
			break;
		case 'n':
		case 'm':
			errno = 0;
			unsigned long v = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' || v == 0 ||
			    v > (1ul << 24)) {
				fprintf(stderr, "molly-bpe-train: bad number '%s'\n", optarg);
				return 2;
			}
			*(c == 'n' ? &vocab_size : &min_count) = v;
			break;
		case 'p':
			pre = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		case 'e':
			eval_path = optarg;
			break;
		case 'E':
			eval_split = optarg;
			break;
		case 'b':
			group_key = optarg;
			break;
		case 'v':
			verbose = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc || n_data == 0 || !out) {
		usage(stderr);
		return 2;
	}
	if (vocab_size < 256 + BPE_TRAIN_N_SPECIAL) {
		fprintf(stderr, "molly-bpe-train: --vocab-size must be at least %d\n",
			256 + BPE_TRAIN_N_SPECIAL);
		return 2;
	}

	_cleanup_(bpe_train_freep) struct bpe_train *t = NULL;
	r = bpe_train_new(pre, &t, &e);
	if (r < 0) {
		fprintf(stderr, "molly-bpe-train: %s\n", e.text[0] ? e.text : strerror(-r));
		return r == -EOPNOTSUPP ? 2 : 1;
	}
	for (size_t i = 0; i < n_data; i++) {
		r = for_each_doc(data[i], split, add_doc, t);
		if (r < 0) {
			if (r != -EINVAL)
				fprintf(stderr, "molly-bpe-train: %s: %s\n", data[i], strerror(-r));
			return 1;
		}
	}
	int64_t n_merges = bpe_train_run(t, (uint32_t) (vocab_size - 256 - BPE_TRAIN_N_SPECIAL),
					 min_count);
	if (n_merges < 0) {
		fprintf(stderr, "molly-bpe-train: training: %s\n", strerror((int) -n_merges));
		return 1;
	}
	fprintf(stderr,
		"molly-bpe-train: %" PRIu64 " words (%zu distinct), %" PRId64 " merges (last "
		"seen %" PRIu64 " times), %" PRIu32 " tokens\n",
		bpe_train_n_word_occurrences(t), bpe_train_n_words(t), n_merges,
		n_merges ? bpe_train_merge_count(t, (uint32_t) n_merges - 1) : 0,
		bpe_train_n_tokens(t));

	{
		_cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;

		r = gguf_writer_new(out, &w, &e);
		if (r >= 0)
			r = gguf_writer_add_str(w, "general.name", "molly-bpe", &e);
		if (r >= 0)
			r = bpe_train_write_gguf(t, w, &e);
		if (r >= 0)
			r = gguf_writer_finish(w, &e);
		if (r < 0) {
			fprintf(stderr, "molly-bpe-train: %s: %s\n", out,
				e.text[0] ? e.text : strerror(-r));
			return 1;
		}
	}
	if (!eval_path)
		return 0;

	_cleanup_(gguf_freep) struct gguf *g = NULL;
	_cleanup_(vocab_freep) struct vocab *v = NULL;
	struct eval ev = { .verbose = verbose };

	r = gguf_open(out, &g, &e);
	if (r >= 0)
		r = vocab_load(g, &v, &e);
	if (r < 0) {
		fprintf(stderr, "molly-bpe-train: %s does not load: %s\n", out, e.text);
		return 1;
	}
	ev.vocab = v;
	snprintf(ev.langs[MAX_LANGS].name, sizeof(ev.langs[0].name), "all");
	r = for_each_doc(eval_path, eval_split, eval_doc, &ev);
	free(ev.ids);
	free(ev.back);
	if (r < 0) {
		if (r != -EINVAL)
			fprintf(stderr, "molly-bpe-train: %s: %s\n", eval_path, strerror(-r));
		return 1;
	}
	printf("%s\tdocs\tbytes\ttokens\tbytes/token\tround_trip_failures\n", group_key);
	for (size_t i = 0; i <= MAX_LANGS; i++) {
		const struct lang_stats *s = &ev.langs[i];

		if (i >= ev.n_langs && i < MAX_LANGS)
			continue;
		printf("%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%.3f\t%" PRIu64 "\n", s->name,
		       s->docs, s->bytes, s->tokens,
		       s->tokens ? (double) s->bytes / (double) s->tokens : 0.0, s->bad);
	}
	return ev.langs[MAX_LANGS].bad ? 3 : 0;
}
