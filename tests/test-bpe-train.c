/* SPDX-License-Identifier: MIT */
/*
 * test-bpe-train: the BPE trainer on inputs whose merges are worked out by hand (the tie rule
 * included), overlapping pairs, independence from the order of the text, and a trained
 * vocabulary written to GGUF, loaded by vocab.c and round-tripped on English, Italian and
 * Spanish text (and every byte).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "engine/bpe-train.h"
#include "engine/gguf-writer.h"
#include "engine/gguf.h"
#include "engine/vocab.h"
#include "test.h"

/* The example of Sennrich et al. (2016), as the Llama 3 pre-tokenizer splits it: "low" once,
 * " low" 4 times, " lower" 2, " newest" 6, " widest" 3. */
static const char sennrich[] = "low low low low low lower lower newest newest newest newest "
			       "newest newest widest widest widest";

TEST(sennrich_merges_in_order_with_ties)
{
	/* (e,s) and (s,t) both occur 9 times: "e" sorts first. At 7, (l,o) before (o,w). At 6,
	 * the pairs starting with a space (byte 0x20) come first, then by the right token. */
	static const char *const want[] = {
		"e s",	 "es t",     "l o",   "lo w",  "Ġ low",   "Ġ n",	 "Ġn e",   "Ġne w",
		"Ġnew est", "Ġ w",	   "Ġw i",  "Ġwi d", "Ġwid est", "Ġlow e", "Ġlowe r",
	};
	static const uint64_t counts[] = { 9, 9, 7, 7, 6, 6, 6, 6, 6, 3, 3, 3, 3, 2, 2 };
	_cleanup_(bpe_train_freep) struct bpe_train *t = NULL;
	struct errmsg e = {};

	ASSERT_OK(bpe_train_new("llama-bpe", &t, &e));
	ASSERT_OK(bpe_train_add_text(t, sennrich, strlen(sennrich)));
	ASSERT_EQ(bpe_train_n_words(t), 5u);
	ASSERT_EQ(bpe_train_n_word_occurrences(t), 16u);
	/* asks for more merges than there are: stops when every word is one token */
	ASSERT_EQ(bpe_train_run(t, 100, 1), (int64_t) ELEMENTSOF(want));
	for (uint32_t i = 0; i < ELEMENTSOF(want); i++) {
		ASSERT_STREQ(bpe_train_merge_text(t, i), want[i]);
		ASSERT_EQ(bpe_train_merge_count(t, i), counts[i]);
	}
	ASSERT_TRUE(bpe_train_merge_text(t, ELEMENTSOF(want)) == NULL);
	ASSERT_EQ(bpe_train_n_tokens(t), 256u + ELEMENTSOF(want) + BPE_TRAIN_N_SPECIAL);
	ASSERT_STREQ(bpe_train_token_text(t, ' '), "Ġ");
	ASSERT_STREQ(bpe_train_token_text(t, '\n'), "Ċ");
	ASSERT_STREQ(bpe_train_token_text(t, 'a'), "a");
	ASSERT_STREQ(bpe_train_token_text(t, 256 + 8), "Ġnewest");
	ASSERT_STREQ(bpe_train_token_text(t, 256 + ELEMENTSOF(want)), "<|begin_of_text|>");
	ASSERT_ERR(bpe_train_add_text(t, "x", 1), -EBUSY);
	return 0;
}

TEST(min_count_stops_early)
{
	_cleanup_(bpe_train_freep) struct bpe_train *t = NULL;

	ASSERT_OK(bpe_train_new("llama-bpe", &t, NULL));
	ASSERT_OK(bpe_train_add_text(t, sennrich, strlen(sennrich)));
	/* the merges seen at least 3 times: the first 13 */
	ASSERT_EQ(bpe_train_run(t, 100, 3), 13);
	ASSERT_STREQ(bpe_train_merge_text(t, 12), "Ġwid est");
	return 0;
}

TEST(overlapping_pair_merges_left_to_right)
{
	_cleanup_(bpe_train_freep) struct bpe_train *t = NULL;

	ASSERT_OK(bpe_train_new("llama-bpe", &t, NULL));
	/* "aaa": (a, a) at two positions counts 2; merged left to right it leaves "aa a" */
	ASSERT_OK(bpe_train_add_text(t, "aaa", 3));
	ASSERT_EQ(bpe_train_run(t, 10, 1), 2);
	ASSERT_STREQ(bpe_train_merge_text(t, 0), "a a");
	ASSERT_EQ(bpe_train_merge_count(t, 0), 2u);
	ASSERT_STREQ(bpe_train_merge_text(t, 1), "aa a");
	ASSERT_EQ(bpe_train_merge_count(t, 1), 1u);
	return 0;
}

TEST(rejects_bad_arguments)
{
	_cleanup_(bpe_train_freep) struct bpe_train *t = NULL;
	struct errmsg e = {};

	ASSERT_ERR(bpe_train_new("no-such-pre", &t, &e), -EOPNOTSUPP);
	ASSERT_TRUE(strstr(e.text, "no-such-pre") != NULL);
	ASSERT_OK(bpe_train_new("gpt-2", &t, &e));
	ASSERT_ERR(bpe_train_run(t, 10, 0), -EINVAL);
	ASSERT_EQ(bpe_train_n_tokens(t), 0u);
	return 0;
}

/* ---- a vocabulary in three languages ---- */

static const char *const docs[] = {
	"The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.\n"
	"Use `ls -l` to list the files in a directory, and man ls for the manual page.",
	"Il gatto dorme sul divano mentre la città si sveglia. Perché l'uomo è così stanco?\n"
	"Questa è la pagina di manuale del comando ls: elenca i file della directory.",
	"El niño comió una manzana en la montaña. ¿Dónde está la estación de trenes?\n"
	"Ésta es la página de manual de la orden ls: muestra los ficheros del directorio.",
	"int main(void) { return printf(\"%d\\n\", 42) < 0; }  /* 1234567 numbers */",
};

static int train_docs(bool reversed, uint32_t n_merges, struct bpe_train **ret)
{
	_cleanup_(bpe_train_freep) struct bpe_train *t = NULL;
	int r;

	r = bpe_train_new("llama-bpe", &t, NULL);
	for (size_t k = 0; r >= 0 && k < 3; k++) /* a few times, so pairs repeat */
		for (size_t i = 0; r >= 0 && i < ELEMENTSOF(docs); i++) {
			const char *d = docs[reversed ? ELEMENTSOF(docs) - 1 - i : i];

			r = bpe_train_add_text(t, d, strlen(d));
		}
	if (r >= 0 && bpe_train_run(t, n_merges, 2) < 0)
		r = -EIO;
	if (r >= 0)
		*ret = TAKE_PTR(t);
	return r;
}

TEST(same_merges_in_any_text_order)
{
	_cleanup_(bpe_train_freep) struct bpe_train *a = NULL, *b = NULL;

	ASSERT_OK(train_docs(false, 200, &a));
	ASSERT_OK(train_docs(true, 200, &b));
	ASSERT_EQ(bpe_train_n_tokens(a), bpe_train_n_tokens(b));
	ASSERT_TRUE(bpe_train_n_tokens(a) > 256 + 50);
	for (uint32_t i = 0; i < bpe_train_n_tokens(a); i++)
		ASSERT_STREQ(bpe_train_token_text(a, i), bpe_train_token_text(b, i));
	for (uint32_t i = 0; bpe_train_merge_text(a, i); i++)
		ASSERT_STREQ(bpe_train_merge_text(a, i), bpe_train_merge_text(b, i));
	return 0;
}

static int decode(const struct vocab *v, const int32_t *ids, size_t n, char *out, size_t cap)
{
	size_t len = 0;

	for (size_t i = 0; i < n; i++) {
		int64_t k = vocab_token_to_piece(v, ids[i], false, out + len, cap - len);

		if (k < 0 || (size_t) k >= cap - len)
			return -ENOBUFS;
		len += (size_t) k;
	}
	return (int) len;
}

TEST(gguf_loads_and_round_trips)
{
	_cleanup_(bpe_train_freep) struct bpe_train *t = NULL;
	_cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;
	_cleanup_(gguf_freep) struct gguf *g = NULL;
	_cleanup_(vocab_freep) struct vocab *v = NULL;
	char dir[] = "/tmp/test-bpe-train-XXXXXX", path[64], back[4096], all_bytes[512];
	int32_t ids[2048];
	struct errmsg e = {};
	uint32_t n_tok;

	ASSERT_OK(train_docs(false, 200, &t));
	n_tok = bpe_train_n_tokens(t);
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/tok.gguf", dir);
	ASSERT_OK(gguf_writer_new(path, &w, &e));
	ASSERT_OK(bpe_train_write_gguf(t, w, &e));
	ASSERT_OK(gguf_writer_finish(w, &e));
	w = gguf_writer_free(w);
	ASSERT_OK(gguf_open(path, &g, &e));
	(void) unlink(path);
	(void) rmdir(dir);
	ASSERT_OK(vocab_load(g, &v, &e));

	ASSERT_EQ(vocab_kind(v), VOCAB_KIND_BPE);
	ASSERT_EQ(vocab_n_tokens(v), n_tok);
	ASSERT_EQ(vocab_bos(v), (int32_t) n_tok - 4);
	ASSERT_EQ(vocab_eos(v), (int32_t) n_tok - 3);
	ASSERT_TRUE(vocab_add_bos(v));
	ASSERT_TRUE(vocab_is_eog(v, (int32_t) n_tok - 3));
	ASSERT_TRUE(vocab_is_eog(v, vocab_find(v, "<|im_end|>")));
	ASSERT_TRUE(vocab_is_control(v, vocab_find(v, "<|im_start|>")));

	/* every training document, and text it never saw, decodes back to its bytes */
	static const char *const unseen[] = {
		"A lazy fox? Never! Foxes run, dogs sleep: 3.14159 and 2718281828.",
		"Domani andrò al mare con gli amici; sarà una giornata stupenda, perché c'è il sole.",
		"Mañana iré a la playa con mis amigos; ¡será un día estupendo, porque hace sol!",
		"tabs\tand\r\nnewlines\n\n  indented\u00a0nbsp — em dash “quotes” 日本語 🙂",
	};
	for (size_t i = 0; i < ELEMENTSOF(docs) + ELEMENTSOF(unseen); i++) {
		const char *s = i < ELEMENTSOF(docs) ? docs[i] : unseen[i - ELEMENTSOF(docs)];
		int64_t n = vocab_tokenize(v, s, strlen(s), false, false, ids, ELEMENTSOF(ids));
		int len;

		ASSERT_TRUE(n > 0 && n < (int64_t) ELEMENTSOF(ids));
		/* trained on it (min count 2, every document 3 times): the prose's words are
		 * mostly whole tokens; the C line has more punctuation and digits, split apart */
		if (i < 3)
			ASSERT_TRUE((size_t) n * 3 < strlen(s));
		else if (i < ELEMENTSOF(docs))
			ASSERT_TRUE((size_t) n < strlen(s));
		len = decode(v, ids, (size_t) n, back, sizeof(back));
		ASSERT_EQ(len, (int) strlen(s));
		ASSERT_TRUE(memcmp(back, s, strlen(s)) == 0);
	}
	/* a word of the training text that the merges build whole is one token */
	{
		int64_t n = vocab_tokenize(v, " the", 4, false, false, ids, ELEMENTSOF(ids));

		ASSERT_EQ(n, 1);
		ASSERT_STREQ(vocab_token_text(v, ids[0]), "Ġthe");
	}
	/* every byte value of valid UTF-8 text: 1..0x7f, and 2-byte characters for 0x80..0xff */
	{
		size_t n_bytes = 0;
		int64_t n;
		int len;

		for (int b = 1; b < 0x80; b++)
			all_bytes[n_bytes++] = (char) b;
		for (int cp = 0x80; cp < 0x800 && n_bytes + 2 < sizeof(all_bytes); cp += 11) {
			all_bytes[n_bytes++] = (char) (0xc0 | (cp >> 6));
			all_bytes[n_bytes++] = (char) (0x80 | (cp & 0x3f));
		}
		n = vocab_tokenize(v, all_bytes, n_bytes, false, false, ids, ELEMENTSOF(ids));
		ASSERT_TRUE(n > 0 && n < (int64_t) ELEMENTSOF(ids));
		len = decode(v, ids, (size_t) n, back, sizeof(back));
		ASSERT_EQ(len, (int) n_bytes);
		ASSERT_TRUE(memcmp(back, all_bytes, n_bytes) == 0);
	}
	/* the special tokens are text unless asked for */
	{
		static const char chat[] = "<|im_start|>user\nciao<|im_end|>";
		int64_t n = vocab_tokenize(v, chat, strlen(chat), true, true, ids, ELEMENTSOF(ids));

		ASSERT_TRUE(n >= 4);
		ASSERT_EQ(ids[0], vocab_bos(v));
		ASSERT_EQ(ids[1], vocab_find(v, "<|im_start|>"));
		ASSERT_EQ(ids[n - 1], vocab_find(v, "<|im_end|>"));
		n = vocab_tokenize(v, chat, strlen(chat), false, false, ids, ELEMENTSOF(ids));
		for (int64_t i = 0; i < n; i++)
			ASSERT_TRUE(!vocab_is_control(v, ids[i]));
	}
	return 0;
}
