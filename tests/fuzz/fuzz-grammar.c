/* SPDX-License-Identifier: MIT */
/*
 * fuzz-grammar: libFuzzer target for the GBNF parser, the JSON Schema compiler and the
 * matcher (daemon/grammar/).
 *
 * The first input byte picks the mode (its low bit): 0, the rest is GBNF; 1, the rest is a JSON
 * Schema. A schema the compiler accepts must compile to GBNF that the parser accepts (or
 * refuses only for size, -E2BIG): anything else is a bug in one of them. A grammar that parses
 * is then run: its mask over a small vocabulary (every byte, a few longer pieces) with budgets,
 * and a random walk through allowed tokens, each of which the matcher must then accept.
 *
 *   build/fuzz/bin/fuzz-grammar -max_total_time=60 /tmp/scratch tests/fuzz/corpus/grammar
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                 \
	do {                     \
		if (!(x))        \
			abort(); \
	} while (0)

static struct grammar_vocab *vocab(void)
{
	static struct grammar_vocab *tv;
	static const char *multi[] = { "{\"", "\":", "true", "null", "12", "é", "\xc3", "ab", "\"}" };
	const char *piece[256 + 9];
	size_t len[256 + 9];
	static char bytes[256];

	if (tv)
		return tv;
	for (size_t i = 0; i < 256; i++) {
		bytes[i] = (char) i;
		piece[i] = &bytes[i];
		len[i] = 1;
	}
	for (size_t i = 0; i < 9; i++) {
		piece[256 + i] = multi[i];
		len[256 + i] = strlen(multi[i]);
	}
	CHECK(grammar_vocab_new_pieces(piece, len, 256 + 9, &tv) == 0);
	return tv;
}

static void run(struct grammar *g, uint32_t seed)
{
	struct matcher *m = NULL;
	uint8_t allowed[256 + 9];

	if (matcher_new(g, vocab(), &m) < 0)
		return;
	for (uint32_t step = 0; step < 32; step++) {
		uint32_t left = 1 + (seed >> (step % 24)) % 40, pick, id;
		int64_t n = matcher_mask(m, left, allowed);

		if (n <= 0)
			break;
		pick = (seed * 2654435761u + step) % (uint32_t) n;
		for (id = 0; id < 256 + 9; id++)
			if (allowed[id] && pick-- == 0)
				break;
		CHECK(id < 256 + 9);
		CHECK(matcher_accept_token(m, (int32_t) id) == 0);
		if (matcher_done(m))
			break;
	}
	matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct grammar *g = NULL;
	struct errmsg e = { { 0 } };
	uint32_t seed = 0;

	if (size < 1 || size > 1 << 16)
		return 0;
	for (size_t i = 0; i < size && i < 4; i++)
		seed = seed * 31 + data[i];
	if ((data[0] & 1) == 0) {
		if (grammar_parse((const char *) data + 1, size - 1, &g, &e) == 0) {
			run(g, seed);
			grammar_unref(g);
		}
		return 0;
	}
	{
		struct json_tokener *tok = json_tokener_new_ex(64);
		struct json_object *s = json_tokener_parse_ex(tok, (const char *) data + 1, (int) size - 1);
		char *gbnf = NULL;
		size_t len;
		int r;

		json_tokener_free(tok);
		if (!s)
			return 0;
		r = schema_to_gbnf(s, &gbnf, &len, &e);
		json_object_put(s);
		if (r < 0)
			return 0;
		r = grammar_parse(gbnf, len, &g, &e);
		CHECK(r == 0 || r == -E2BIG);
		free(gbnf);
		if (r == 0) {
			run(g, seed);
			grammar_unref(g);
		}
	}
	return 0;
}
