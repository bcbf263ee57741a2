/* SPDX-License-Identifier: MIT */
/*
 * test-vocab: the tokenizers against llama.cpp's own test vectors (reference/tokenizers/),
 * the reference prompts and generations of the shared models, the pre-tokenizer splits,
 * streaming detokenization, special tokens, and vocabularies built in memory for the load
 * rules and errors.
 */
#include <stdint.h>
#include <inttypes.h>
#include <pthread.h>
#include <time.h>

#include "engine/gguf.h"
#include "engine/vocab-pre.h"
#include "engine/vocab.h"
#include "test.h"

#define SPIECE_STR "\xe2\x96\x81" /* U+2581 */

/* ---- helpers ---- */

static int read_all(const char *path, char **ret, size_t *ret_len)
{
	FILE *f = fopen(path, "rbe");
	char *buf = NULL;
	size_t len = 0, cap = 0;

	if (!f)
		return -errno;
	for (;;) {
		size_t n;

		if (len + 4096 + 1 > cap) {
			char *nb = realloc(buf, cap = (len + 4096 + 1) * 2);

			if (!nb) {
				free(buf);
				fclose(f);
				return -ENOMEM;
			}
			buf = nb;
		}
		n = fread(buf + len, 1, cap - len - 1, f);
		len += n;
		if (n == 0)
			break;
	}
	fclose(f);
	buf[len] = 0;
	*ret = buf;
	*ret_len = len;
	return 0;
}

/* Parses whitespace-separated integers. */
static size_t parse_ids(const char *s, int32_t *ids, size_t max)
{
	size_t n = 0;

	while (*s) {
		char *end;
		long v = strtol(s, &end, 10);

		if (end == s) {
			s++;
			continue;
		}
		if (n < max)
			ids[n] = (int32_t) v;
		n++;
		s = end;
	}
	return n;
}

/* CPU time of this thread: unlike wall time it does not grow when other processes load the
 * machine. */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

/*
 * The speed cases run the inputs that would expose a quadratic walk (one 64 KiB word, 64 KiB of
 * spaces, 2000 specials, a 150k vocabulary) and check the results; their times are printed,
 * never asserted. Neither absolute times nor growth ratios hold on every machine: measured on a
 * loaded Zen 5, a release load of 150k entries cost 34 times its quarter (caches, not the
 * algorithm). Speed belongs to the benchmarks (docs/PERFORMANCE.md); a pathological case shows
 * here as a test that runs for minutes and hits ctest's timeout.
 */
static void print_growth(const char *what, double quarter_s, double full_s)
{
	printf("  %s: n/4 %.2f ms, n %.2f ms (x%.1f)\n", what, quarter_s * 1e3, full_s * 1e3,
	       quarter_s > 0 ? full_s / quarter_s : 0.0);
}

struct loaded {
	struct gguf *g;
	struct vocab *v;
};

static void loaded_done(struct loaded *l)
{
	vocab_free(l->v);
	gguf_free(l->g);
}

/* 0, TEST_SKIP when the shared file is missing, 1 on failure. */
static int load_shared(const char *rel, struct loaded *l)
{
	const char *path = test_shared_path(rel);
	struct errmsg e = {};
	int r;

	*l = (struct loaded){};
	if (access(path, R_OK) != 0) {
		fprintf(stderr, "  %s: missing, skipping\n", path);
		return TEST_SKIP;
	}
	r = gguf_open(path, &l->g, &e);
	if (r < 0) {
		fprintf(stderr, "  %s: %s\n", path, e.text);
		return 1;
	}
	r = vocab_load(l->g, &l->v, &e);
	if (r < 0) {
		fprintf(stderr, "  %s: %s\n", path, e.text);
		gguf_free(l->g);
		return 1;
	}
	return 0;
}

/* Tokenizes into a malloc'd array. */
static int64_t tok(const struct vocab *v, const char *s, size_t len, bool bos, bool special,
		   int32_t **ret)
{
	int64_t n = vocab_tokenize(v, s, len, bos, special, NULL, 0);
	int32_t *ids;

	*ret = NULL;
	if (n < 0)
		return n;
	ids = malloc(((size_t) n + 1) * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	if (vocab_tokenize(v, s, len, bos, special, ids, (size_t) n) != n) {
		free(ids);
		return -EIO;
	}
	*ret = ids;
	return n;
}

/* Streams ids through a detok into a malloc'd, NUL-terminated string. */
static int64_t detok_all(const struct vocab *v, const int32_t *ids, size_t n, bool special,
			 bool first, char **ret)
{
	struct detok d;
	size_t cap = 64, len = 0;
	char *out = malloc(cap);

	if (!out)
		return -ENOMEM;
	detok_init(&d, v, special);
	d.first = first;
	for (size_t i = 0; i <= n; i++) {
		int64_t k;

		for (;;) {
			k = i < n ? detok_push(&d, ids[i], out + len, cap - len - 1)
				  : detok_flush(&d, out + len, cap - len - 1);
			if (k != -ENOBUFS)
				break;
			cap *= 2;
			out = realloc(out, cap);
			if (!out)
				return -ENOMEM;
		}
		if (k < 0) {
			free(out);
			return k;
		}
		len += (size_t) k;
	}
	out[len] = 0;
	*ret = out;
	return (int64_t) len;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
	fprintf(stderr, "  %s:", what);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, " %d", ids[i]);
	fputc('\n', stderr);
}

/* ---- llama.cpp's tokenizer test vectors ---- */

/* Like llama.cpp's tests/test-tokenizer-0.cpp: the .inp strings are separated by
 * "\n__ggml_vocab_test__\n", the .out lines hold the ids (no BOS, parse_special off). */
static int run_vectors(const char *name)
{
	_cleanup_free_ char *inp = NULL, *outp = NULL;
	char rel[256], relinp[300], relout[300];
	static const char sep[] = "\n__ggml_vocab_test__\n";
	struct loaded l;
	size_t inp_len, out_len, n_tests = 0, n_failed = 0;
	const char *p, *line;
	int r;

	snprintf(rel, sizeof(rel), "reference/tokenizers/%s", name);
	snprintf(relinp, sizeof(relinp), "%s.inp", rel);
	snprintf(relout, sizeof(relout), "%s.out", rel);
	r = load_shared(rel, &l);
	if (r)
		return r;
	if (read_all(test_shared_path(relinp), &inp, &inp_len) < 0 ||
	    read_all(test_shared_path(relout), &outp, &out_len) < 0) {
		loaded_done(&l);
		TEST_FAIL_("cannot read %s.inp/.out", rel);
	}

	p = inp;
	line = outp;
	while (p < inp + inp_len) {
		const char *next = memmem(p, (size_t) (inp + inp_len - p), sep, strlen(sep));
		size_t slen = next ? (size_t) (next - p) : (size_t) (inp + inp_len - p);
		const char *eol = strchr(line, '\n');
		char lbuf[8192];
		int32_t want[2048], *got = NULL;
		size_t n_want, llen;
		int64_t n_got;

		if (!*line) {
			loaded_done(&l);
			TEST_FAIL_("%s: fewer .out lines than .inp strings", name);
		}
		llen = eol ? (size_t) (eol - line) : strlen(line);
		if (llen >= sizeof(lbuf)) {
			loaded_done(&l);
			TEST_FAIL_("%s: .out line too long", name);
		}
		memcpy(lbuf, line, llen);
		lbuf[llen] = 0;
		n_want = parse_ids(lbuf, want, ELEMENTSOF(want));
		n_got = tok(l.v, p, slen, false, false, &got);
		n_tests++;
		if (n_got < 0 || (size_t) n_got != n_want ||
		    memcmp(got, want, n_want * sizeof(*want)) != 0) {
			n_failed++;
			fprintf(stderr, "  %s: '%.*s'\n", name, (int) slen, p);
			print_ids("want", want, MIN(n_want, ELEMENTSOF(want)));
			print_ids("got ", got, n_got > 0 ? (size_t) n_got : 0);
		}
		free(got);
		line = eol ? eol + 1 : line + llen;
		p = next ? next + strlen(sep) : inp + inp_len;
	}
	loaded_done(&l);
	ASSERT_TRUE(n_tests >= 40);
	ASSERT_EQ(n_failed, 0);
	return 0;
}

TEST(vectors_llama_spm)
{
	return run_vectors("ggml-vocab-llama-spm.gguf");
}

TEST(vectors_gpt2)
{
	return run_vectors("ggml-vocab-gpt-2.gguf");
}

TEST(vectors_deepseek_coder)
{
	return run_vectors("ggml-vocab-deepseek-coder.gguf");
}

/* ---- the shared models' reference runs ---- */

TEST(stories260k_prompt)
{
	static const int32_t want[] = { 1, 403, 407, 261, 378, 383, 286 };
	const char *s = "Once upon a time there was";
	_cleanup_free_ int32_t *ids = NULL;
	struct loaded l;
	int64_t n;
	int r;

	r = load_shared("models/stories260K.gguf", &l);
	if (r)
		return r;
	ASSERT_EQ(vocab_kind(l.v), VOCAB_KIND_SPM);
	ASSERT_EQ(vocab_n_tokens(l.v), 512);
	ASSERT_EQ(vocab_bos(l.v), 1);
	ASSERT_EQ(vocab_eos(l.v), 2);
	ASSERT_TRUE(vocab_add_bos(l.v));
	ASSERT_TRUE(vocab_is_eog(l.v, 2));
	ASSERT_TRUE(!vocab_is_eog(l.v, 1));
	ASSERT_TRUE(vocab_is_control(l.v, 1));
	ASSERT_TRUE(!vocab_is_control(l.v, 403));
	n = tok(l.v, s, strlen(s), true, false, &ids);
	loaded_done(&l);
	ASSERT_EQ(n, ELEMENTSOF(want));
	ASSERT_TRUE(memcmp(ids, want, sizeof(want)) == 0);
	return 0;
}

/* The model file a reference run used (all share the 512-token vocabulary). */
static void model_of_run(const char *group, const char *run, char *out, size_t size)
{
	if (strcmp(group, "tiny") == 0)
		snprintf(out, size, "models/tiny/%s.gguf", run);
	else if (strstr(run, "q8_0"))
		snprintf(out, size, "models/stories260K-Q8_0.gguf");
	else
		snprintf(out, size, "models/stories260K.gguf");
}

static const char *const reference_runs[][2] = {
	{ "stories260K", "vis_base" },        { "stories260K", "vis_lora_attn_r8" },
	{ "stories260K", "vis_lora_all_r8" }, { "stories260K", "vis_lora_all_r8_s05" },
	{ "stories260K", "vis_q8_0_base" },   { "tiny", "tiny-llama-f32" },
	{ "tiny", "tiny-llama-f16" },         { "tiny", "tiny-llama-bf16" },
	{ "tiny", "tiny-llama-q8_0" },        { "tiny", "tiny-llama-q4_0" },
	{ "tiny", "tiny-llama-q4_k" },        { "tiny", "tiny-llama-q6_k" },
	{ "tiny", "tiny-qwen2-f32" },         { "tiny", "tiny-qwen2-q8_0" },
};

/* prompt_text.txt tokenizes (BOS by the vocab's rules) to prompt_ids.txt, and the prompt
 * and generated ids stream back to gen_text.txt (which ends with a newline of its own). */
TEST(reference_runs)
{
	size_t n_checked = 0;

	for (size_t i = 0; i < ELEMENTSOF(reference_runs); i++) {
		const char *group = reference_runs[i][0], *run = reference_runs[i][1];
		_cleanup_free_ char *prompt = NULL, *pids = NULL, *gids = NULL, *gen = NULL,
				    *text = NULL;
		_cleanup_free_ int32_t *ids = NULL;
		char model[256], rel[256];
		int32_t want[1024];
		size_t len, n_prompt, n_all, gen_len;
		struct loaded l;
		int64_t n;
		int r;

		model_of_run(group, run, model, sizeof(model));
		r = load_shared(model, &l);
		if (r == TEST_SKIP)
			continue;
		if (r)
			return r;
#define READ(name, var)                                                                            \
	snprintf(rel, sizeof(rel), "reference/%s/%s/" name, group, run);                           \
	r = read_all(test_shared_path(rel), &var, &len);
		READ("prompt_text.txt", prompt);
		if (r < 0) {
			loaded_done(&l);
			continue;
		}
		n = tok(l.v, prompt, len, vocab_add_bos(l.v), false, &ids);
		READ("prompt_ids.txt", pids);
		ASSERT_OK(r);
		n_prompt = parse_ids(pids, want, ELEMENTSOF(want));
		if (n != (int64_t) n_prompt || memcmp(ids, want, n_prompt * sizeof(*want)) != 0) {
			loaded_done(&l);
			print_ids("want", want, n_prompt);
			print_ids("got ", ids, n > 0 ? (size_t) n : 0);
			TEST_FAIL_("%s/%s: prompt ids differ", group, run);
		}

		READ("gen_ids.txt", gids);
		ASSERT_OK(r);
		n_all = n_prompt + parse_ids(gids, want + n_prompt, ELEMENTSOF(want) - n_prompt);
		ASSERT_TRUE(n_all <= ELEMENTSOF(want));
		READ("gen_text.txt", gen);
		ASSERT_OK(r);
		gen_len = len;
#undef READ
		n = detok_all(l.v, want, n_all, false, true, &text);
		loaded_done(&l);
		ASSERT_OK(n);
		ASSERT_TRUE(gen_len > 0 && gen[gen_len - 1] == '\n');
		if ((size_t) n != gen_len - 1 || memcmp(text, gen, gen_len - 1) != 0)
			TEST_FAIL_("%s/%s: detokenized '%s' != '%.*s'", group, run, text,
				   (int) gen_len - 1, gen);
		n_checked++;
	}
	if (n_checked == 0)
		return TEST_SKIP;
	return 0;
}

/* ---- special tokens ---- */

TEST(spm_special)
{
	_cleanup_free_ int32_t *a = NULL, *b = NULL, *c = NULL, *all = NULL;
	char piece[32];
	struct loaded l;
	int64_t na, nb, nc, n;
	int r;

	r = load_shared("reference/tokenizers/ggml-vocab-llama-spm.gguf", &l);
	if (r)
		return r;

	n = tok(l.v, "<s>", 3, false, true, &all);
	ASSERT_EQ(n, 1);
	ASSERT_EQ(all[0], 1);
	free(all);
	n = tok(l.v, "<unk>", 5, false, true, &all);
	ASSERT_EQ(n, 1);
	ASSERT_EQ(all[0], 0);
	free(all);
	/* off: the text is just text */
	n = tok(l.v, "<s>", 3, false, false, &all);
	ASSERT_TRUE(n > 1);
	for (int64_t i = 0; i < n; i++)
		ASSERT_TRUE(all[i] != 1);
	free(all);

	/* text after a special token gets the SentencePiece space prefix again */
	na = tok(l.v, "Hello", 5, false, false, &a);
	nb = tok(l.v, "world", 5, false, false, &b);
	n = tok(l.v, "Hello<s>world", 13, true, true, &all);
	ASSERT_TRUE(na > 0 && nb > 0);
	ASSERT_EQ(n, 2 + na + nb);
	ASSERT_EQ(all[0], 1);
	ASSERT_TRUE(memcmp(all + 1, a, (size_t) na * sizeof(*a)) == 0);
	ASSERT_EQ(all[1 + na], 1);
	ASSERT_TRUE(memcmp(all + 2 + na, b, (size_t) nb * sizeof(*b)) == 0);
	free(all);
	/* ... but not after a space that is left in the text */
	nc = tok(l.v, " world", 6, false, false, &c);
	n = tok(l.v, "<s> world", 9, false, true, &all);
	ASSERT_EQ(n, 1 + nc);
	ASSERT_TRUE(memcmp(all + 1, c, (size_t) nc * sizeof(*c)) == 0);

	/* pieces */
	ASSERT_EQ(vocab_token_to_piece(l.v, 1, false, piece, sizeof(piece)), 0);
	ASSERT_EQ(vocab_token_to_piece(l.v, 1, true, piece, sizeof(piece)), 3);
	ASSERT_TRUE(memcmp(piece, "<s>", 3) == 0);
	ASSERT_EQ(vocab_token_to_piece(l.v, 3 + 'A', false, piece, sizeof(piece)), 1);
	ASSERT_EQ(piece[0], 'A');
	ASSERT_EQ(vocab_token_to_piece(l.v, 3 + 0xff, false, piece, sizeof(piece)), 1);
	ASSERT_EQ((uint8_t) piece[0], 0xff);
	r = vocab_find(l.v, "\xe2\x96\x81Hello");
	ASSERT_TRUE(r > 0);
	ASSERT_EQ(vocab_token_to_piece(l.v, r, false, piece, sizeof(piece)), 6);
	ASSERT_TRUE(memcmp(piece, " Hello", 6) == 0);
	/* a short buffer gets the start, the return value the whole length */
	memset(piece, 0, sizeof(piece));
	ASSERT_EQ(vocab_token_to_piece(l.v, r, false, piece, 2), 6);
	ASSERT_TRUE(memcmp(piece, " H\0", 3) == 0);
	ASSERT_EQ(vocab_token_to_piece(l.v, -1, false, piece, sizeof(piece)), -EINVAL);
	ASSERT_EQ(vocab_token_to_piece(l.v, 32000, false, piece, sizeof(piece)), -EINVAL);
	ASSERT_STREQ(vocab_token_text(l.v, 1), "<s>");
	ASSERT_TRUE(vocab_token_text(l.v, 32000) == NULL);
	ASSERT_TRUE(vocab_token_text(l.v, -5) == NULL);
	ASSERT_EQ(vocab_find(l.v, "<s>"), 1);
	ASSERT_EQ(vocab_find(l.v, "no such token, surely"), -1);
	loaded_done(&l);
	return 0;
}

TEST(bpe_special)
{
	_cleanup_free_ int32_t *a = NULL, *b = NULL, *all = NULL;
	char piece[64];
	struct loaded l;
	int64_t na, nb, n;
	int32_t id;
	int r;

	r = load_shared("reference/tokenizers/ggml-vocab-gpt-2.gguf", &l);
	if (r)
		return r;
	ASSERT_EQ(vocab_kind(l.v), VOCAB_KIND_BPE);
	ASSERT_EQ(vocab_eos(l.v), 50256);
	ASSERT_TRUE(vocab_is_eog(l.v, 50256));
	ASSERT_TRUE(!vocab_add_bos(l.v)); /* gpt-2 adds no BOS */
	n = tok(l.v, "<|endoftext|>", 13, false, true, &all);
	ASSERT_EQ(n, 1);
	ASSERT_EQ(all[0], 50256);
	free(all);
	n = tok(l.v, "<|endoftext|>", 13, false, false, &all);
	ASSERT_TRUE(n > 1);
	for (int64_t i = 0; i < n; i++)
		ASSERT_TRUE(all[i] != 50256);
	free(all);
	/* no space prefix business in BPE */
	na = tok(l.v, "Hello", 5, false, false, &a);
	nb = tok(l.v, " world", 6, false, false, &b);
	n = tok(l.v, "Hello<|endoftext|> world", 24, false, true, &all);
	ASSERT_EQ(n, na + 1 + nb);
	ASSERT_TRUE(memcmp(all, a, (size_t) na * sizeof(*a)) == 0);
	ASSERT_EQ(all[na], 50256);
	ASSERT_TRUE(memcmp(all + na + 1, b, (size_t) nb * sizeof(*b)) == 0);

	id = vocab_find(l.v, "\xc4\xa0the"); /* "Ġthe" */
	ASSERT_TRUE(id > 0);
	ASSERT_EQ(vocab_token_to_piece(l.v, id, false, piece, sizeof(piece)), 4);
	ASSERT_TRUE(memcmp(piece, " the", 4) == 0);
	id = vocab_find(l.v, "\xc4\x8a"); /* "Ċ" */
	ASSERT_TRUE(id > 0);
	ASSERT_EQ(vocab_token_to_piece(l.v, id, false, piece, sizeof(piece)), 1);
	ASSERT_EQ(piece[0], '\n');
	ASSERT_EQ(vocab_token_to_piece(l.v, 50256, false, piece, sizeof(piece)), 0);
	ASSERT_EQ(vocab_token_to_piece(l.v, 50256, true, piece, sizeof(piece)), 13);
	loaded_done(&l);
	return 0;
}

/* User-defined tokens are cut out of the text even without parse_special. */
TEST(bpe_user_defined)
{
	_cleanup_free_ int32_t *all = NULL;
	const int32_t user = 32019; /* "<|User|>" */
	char piece[64], *back = NULL;
	struct loaded l;
	int64_t n;
	int r;

	r = load_shared("reference/tokenizers/ggml-vocab-deepseek-coder.gguf", &l);
	if (r)
		return r;
	ASSERT_STREQ(vocab_token_text(l.v, user), "<|User|>");
	ASSERT_TRUE(!vocab_is_control(l.v, user));
	ASSERT_TRUE(vocab_add_bos(l.v)); /* add_bos_token = true in the file */
	ASSERT_EQ(vocab_bos(l.v), 32013);
	ASSERT_TRUE(vocab_is_eog(l.v, 32014));
	for (int special = 0; special < 2; special++) {
		n = tok(l.v, "a<|User|>b", 10, true, special, &all);
		ASSERT_EQ(n, 4);
		ASSERT_EQ(all[0], 32013);
		ASSERT_EQ(all[2], user);
		free(all);
		all = NULL;
	}
	/* and always print as themselves */
	ASSERT_EQ(vocab_token_to_piece(l.v, user, false, piece, sizeof(piece)), 8);
	n = tok(l.v, "x<|User|>y", 10, false, false, &all);
	ASSERT_OK(detok_all(l.v, all, (size_t) n, false, true, &back));
	ASSERT_STREQ(back, "x<|User|>y");
	free(back);
	/* the FIM tokens are recognised by name and become control tokens */
	ASSERT_TRUE(vocab_is_control(l.v, 32015));
	loaded_done(&l);
	return 0;
}

/* ---- round trips ---- */

static const char *const roundtrip_texts[] = {
	"Hello world",
	"  leading spaces",
	"trailing spaces   ",
	"tabs\tand\nnewlines\n\n\nhere",
	"emoji \xf0\x9f\xa6\x99\xf0\x9f\x9a\x80 and CJK \xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8"
	"apple"
	"\xe5\xb7\xa5\xe4\xbd\x9c and \xc3\x9c" "n\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9",
	"multiple   spaces    here\r\n\r\n",
	"\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd0\xbc\xd0\xb8\xd1\x80",
	"code: for (int i = 0; i < n; i++) { x += a[i] * 3.14159; } // 12345678",
	"I'M y'all don't WE'LL \"quoted\" $100 #tag @user",
	" ",
	"\n",
	"x",
};

static int roundtrip(const char *model, bool spm)
{
	struct loaded l;
	int r;

	r = load_shared(model, &l);
	if (r)
		return r;
	for (size_t i = 0; i < ELEMENTSOF(roundtrip_texts); i++) {
		const char *s = roundtrip_texts[i];
		_cleanup_free_ int32_t *ids = NULL;
		_cleanup_free_ char *back = NULL;
		int64_t n;

		n = tok(l.v, s, strlen(s), false, false, &ids);
		ASSERT_TRUE(n > 0);
		ASSERT_OK(detok_all(l.v, ids, (size_t) n, false, true, &back));
		if (strcmp(back, s) != 0)
			TEST_FAIL_("%s: '%s' came back as '%s'", model, s, back);
		if (spm) {
			/* after BOS the SentencePiece space prefix shows, as in llama.cpp */
			free(ids);
			free(back);
			back = NULL;
			n = tok(l.v, s, strlen(s), true, false, &ids);
			ASSERT_TRUE(n > 1);
			ASSERT_EQ(ids[0], vocab_bos(l.v));
			ASSERT_OK(detok_all(l.v, ids, (size_t) n, false, true, &back));
			ASSERT_EQ(back[0], ' ');
			if (strcmp(back + 1, s) != 0)
				TEST_FAIL_("%s: BOS + '%s' came back as '%s'", model, s, back);
		}
	}
	loaded_done(&l);
	return 0;
}

TEST(roundtrip_spm)
{
	return roundtrip("reference/tokenizers/ggml-vocab-llama-spm.gguf", true);
}

TEST(roundtrip_gpt2)
{
	return roundtrip("reference/tokenizers/ggml-vocab-gpt-2.gguf", false);
}

TEST(roundtrip_deepseek_coder)
{
	return roundtrip("reference/tokenizers/ggml-vocab-deepseek-coder.gguf", false);
}

TEST(empty_input)
{
	int32_t ids[4];
	struct loaded l;
	int r;

	r = load_shared("reference/tokenizers/ggml-vocab-llama-spm.gguf", &l);
	if (r)
		return r;
	ASSERT_EQ(vocab_tokenize(l.v, "", 0, false, false, ids, 4), 0);
	ASSERT_EQ(vocab_tokenize(l.v, NULL, 0, true, true, ids, 4), 1);
	ASSERT_EQ(ids[0], 1);
	/* too small a buffer: the count, and as many ids as fit */
	ids[1] = -7;
	ASSERT_EQ(vocab_tokenize(l.v, "Hello world", 11, true, false, ids, 1), 3);
	ASSERT_EQ(ids[0], 1);
	ASSERT_EQ(ids[1], -7);
	loaded_done(&l);
	return 0;
}

/* ---- invalid UTF-8 ---- */

TEST(invalid_utf8_spm)
{
	/* bytes that are no token come back through the <0xXX> tokens */
	static const char s[] = "ab\xff\xfe\x80\x80" "c\xe2\x82xyz \xc3( end\xf0\x9f\xa6";
	/* llama.cpp quirk: spaces are escaped to U+2581 before the text is cut into symbols
	 * sized by their lead byte, so a broken sequence right before a space swallows bytes
	 * of the escape and the space comes back as U+2581 */
	static const char q[] = "\xe2\x82 x";
	_cleanup_free_ int32_t *ids = NULL;
	_cleanup_free_ char *back = NULL;
	struct loaded l;
	bool has_ff = false;
	int64_t n;
	int r;

	r = load_shared("reference/tokenizers/ggml-vocab-llama-spm.gguf", &l);
	if (r)
		return r;
	n = tok(l.v, s, sizeof(s) - 1, false, false, &ids);
	ASSERT_TRUE(n > 0);
	for (int64_t i = 0; i < n; i++)
		has_ff |= ids[i] == 3 + 0xff;
	ASSERT_TRUE(has_ff);
	ASSERT_EQ(detok_all(l.v, ids, (size_t) n, false, true, &back), sizeof(s) - 1);
	ASSERT_TRUE(memcmp(back, s, sizeof(s) - 1) == 0);
	free(ids);
	free(back);
	ids = NULL;
	back = NULL;
	n = tok(l.v, q, sizeof(q) - 1, false, false, &ids);
	ASSERT_OK(detok_all(l.v, ids, (size_t) n, false, true, &back));
	ASSERT_STREQ(back, "\xe2\x82\xe2\x96\x81x");
	loaded_done(&l);
	return 0;
}

TEST(invalid_utf8_bpe)
{
	/* llama.cpp decodes the text to code points first: every byte that does not start a
	 * well-formed sequence becomes U+FFFD */
	static const char s[] = "a\xff" "b \xe2\x82";
	static const char want[] = "a\xef\xbf\xbd" "b \xef\xbf\xbd\xef\xbf\xbd";
	_cleanup_free_ int32_t *ids = NULL;
	_cleanup_free_ char *back = NULL;
	struct loaded l;
	int64_t n;
	int r;

	r = load_shared("reference/tokenizers/ggml-vocab-gpt-2.gguf", &l);
	if (r)
		return r;
	n = tok(l.v, s, sizeof(s) - 1, false, false, &ids);
	ASSERT_TRUE(n > 0);
	ASSERT_OK(detok_all(l.v, ids, (size_t) n, false, true, &back));
	ASSERT_STREQ(back, want);
	loaded_done(&l);
	return 0;
}

/* ---- streaming detokenizer ---- */

TEST(detok_stream)
{
	_cleanup_free_ int32_t *ids = NULL;
	char out[64];
	struct detok d;
	struct loaded l;
	int32_t x, a, space_x;
	int64_t n;
	int r;

	r = load_shared("reference/tokenizers/ggml-vocab-llama-spm.gguf", &l);
	if (r)
		return r;

	/* U+1F999 is no token: four byte tokens; nothing shows until the last */
	n = tok(l.v, "\xf0\x9f\xa6\x99", 4, false, false, &ids);
	ASSERT_EQ(n, 5);
	ASSERT_EQ(ids[1], 3 + 0xf0);
	detok_init(&d, l.v, false);
	ASSERT_EQ(detok_push(&d, ids[0], out, sizeof(out)), 0); /* the stripped "▁" */
	ASSERT_EQ(detok_push(&d, ids[1], out, sizeof(out)), 0);
	ASSERT_EQ(detok_push(&d, ids[2], out, sizeof(out)), 0);
	ASSERT_EQ(detok_push(&d, ids[3], out, sizeof(out)), 0);
	ASSERT_EQ(detok_push(&d, ids[4], out, sizeof(out)), 4);
	ASSERT_TRUE(memcmp(out, "\xf0\x9f\xa6\x99", 4) == 0);
	ASSERT_EQ(detok_flush(&d, out, sizeof(out)), 0);

	/* a broken sequence goes out as soon as it cannot complete */
	a = vocab_find(l.v, "a");
	ASSERT_TRUE(a > 0);
	detok_init(&d, l.v, false);
	ASSERT_EQ(detok_push(&d, 3 + 0xe2, out, sizeof(out)), 0);
	ASSERT_EQ(detok_push(&d, a, out, sizeof(out)), 2);
	ASSERT_TRUE(memcmp(out, "\xe2" "a", 2) == 0);
	/* ED A0 would be a surrogate: invalid at once */
	ASSERT_EQ(detok_push(&d, 3 + 0xed, out, sizeof(out)), 0);
	ASSERT_EQ(detok_push(&d, 3 + 0xa0, out, sizeof(out)), 2);
	/* a lone continuation byte is not held */
	ASSERT_EQ(detok_push(&d, 3 + 0x80, out, sizeof(out)), 1);
	/* an incomplete tail comes out at the flush */
	ASSERT_EQ(detok_push(&d, 3 + 0xe2, out, sizeof(out)), 0);
	ASSERT_EQ(detok_push(&d, 3 + 0x82, out, sizeof(out)), 0);
	ASSERT_EQ(detok_flush(&d, out, 1), -ENOBUFS);
	ASSERT_EQ(detok_flush(&d, out, sizeof(out)), 2);
	ASSERT_TRUE(memcmp(out, "\xe2\x82", 2) == 0);
	ASSERT_EQ(detok_flush(&d, out, sizeof(out)), 0);

	/* the first piece loses the space prefix unless BOS came first */
	space_x = vocab_find(l.v, "\xe2\x96\x81x");
	x = vocab_find(l.v, "x");
	ASSERT_TRUE(space_x > 0 && x > 0);
	detok_init(&d, l.v, false);
	ASSERT_EQ(detok_push(&d, space_x, out, sizeof(out)), 1);
	ASSERT_EQ(out[0], 'x');
	ASSERT_EQ(detok_push(&d, space_x, out, sizeof(out)), 2);
	ASSERT_TRUE(memcmp(out, " x", 2) == 0);
	detok_init(&d, l.v, false);
	ASSERT_EQ(detok_push(&d, 1, out, sizeof(out)), 0);
	ASSERT_EQ(detok_push(&d, space_x, out, sizeof(out)), 2);
	detok_init(&d, l.v, false);
	d.first = false;
	ASSERT_EQ(detok_push(&d, space_x, out, sizeof(out)), 2);

	/* no room: nothing changes, the same push then succeeds */
	detok_init(&d, l.v, false);
	d.first = false;
	ASSERT_EQ(detok_push(&d, space_x, out, 1), -ENOBUFS);
	ASSERT_EQ(detok_push(&d, space_x, out, 2), 2);
	ASSERT_TRUE(memcmp(out, " x", 2) == 0);
	ASSERT_EQ(detok_push(&d, -1, out, sizeof(out)), -EINVAL);

	/* control tokens only when asked for */
	detok_init(&d, l.v, true);
	ASSERT_EQ(detok_push(&d, 2, out, sizeof(out)), 4);
	ASSERT_TRUE(memcmp(out, "</s>", 4) == 0);
	detok_init(&d, l.v, false);
	ASSERT_EQ(detok_push(&d, 2, out, sizeof(out)), 0);
	loaded_done(&l);
	return 0;
}

/* ---- random inputs ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t) (rng_state >> 16);
}

/* Random text: valid UTF-8 from a mix of scripts, spaces and controls, or (valid == false)
 * random bytes biased towards UTF-8 lead and continuation bytes. */
static size_t random_text(char *buf, size_t max, bool valid)
{
	static const uint32_t ranges[][2] = {
		{ 0x20, 0x7e }, { 0x09, 0x0d }, { 0x20, 0x20 }, { 0xa0, 0x24f }, { 0x400, 0x4ff },
		{ 0x3040, 0x30ff }, { 0x4e00, 0x4fff }, { 0xac00, 0xacff }, { 0x1f300, 0x1f6ff },
		{ 0x2000, 0x206f }, { 0x00, 0x1f },
	};
	size_t n = 0, len = rng() % max;

	while (n + 4 < len) {
		if (valid) {
			const uint32_t *r = ranges[rng() % ELEMENTSOF(ranges)];
			uint32_t cp = r[0] + rng() % (r[1] - r[0] + 1);

			if (cp == 0x2581) /* would print as a space */
				cp = 'x';
			n += vocab_utf8_encode(cp, buf + n);
		} else {
			static const uint8_t pick[] = { 'a',  ' ',  '\n', 0xc3, 0xe2,
							 0xf0, 0x80, 0x9f, 0xbf, 0xff,
							 0xed, 0xa0, '<',  '|',  '>' };
			buf[n++] = (char) (rng() % 3 ? pick[rng() % sizeof(pick)] : rng() % 256);
		}
	}
	return n;
}

/* What llama.cpp's BPE path makes of any input: each invalid byte becomes U+FFFD. */
static size_t fffd_normalize(const char *s, size_t len, char *out)
{
	size_t n = 0;

	for (size_t i = 0; i < len;) {
		uint32_t cp = 0xfffd;
		size_t k = vocab_utf8_decode(s + i, len - i, &cp);

		if (k == 0 || cp > 0x10ffff) {
			cp = 0xfffd;
			k = k ? k : 1;
		}
		n += vocab_utf8_encode(cp, out + n);
		i += k;
	}
	return n;
}

TEST(random_inputs)
{
	static const char *const models[] = {
		"reference/tokenizers/ggml-vocab-llama-spm.gguf",
		"reference/tokenizers/ggml-vocab-gpt-2.gguf",
		"reference/tokenizers/ggml-vocab-deepseek-coder.gguf",
	};
	char text[512], norm[2048];

	for (size_t m = 0; m < ELEMENTSOF(models); m++) {
		struct loaded l;
		int r = load_shared(models[m], &l);

		if (r)
			return r;
		for (int iter = 0; iter < 300; iter++) {
			bool valid = iter % 2 == 0, special = iter % 3 == 0;
			size_t len = random_text(text, sizeof(text), valid), nlen;
			_cleanup_free_ int32_t *ids = NULL;
			_cleanup_free_ char *back = NULL;
			int64_t n, k;

			n = tok(l.v, text, len, iter % 5 == 0, special, &ids);
			ASSERT_TRUE(n >= 0);
			for (int64_t i = 0; i < n; i++)
				ASSERT_TRUE(ids[i] >= 0 && (uint32_t) ids[i] < vocab_n_tokens(l.v));
			k = detok_all(l.v, ids, (size_t) n, false, true, &back);
			ASSERT_TRUE(k >= 0);
			if (special || iter % 5 == 0)
				continue;
			/* lossless: SPM for valid UTF-8 (SentencePiece escapes spaces before it
			 * cuts symbols, so broken sequences can eat an escaped space), BPE up
			 * to U+FFFD for broken sequences */
			if (vocab_kind(l.v) == VOCAB_KIND_SPM && !valid)
				continue;
			if (vocab_kind(l.v) == VOCAB_KIND_SPM) {
				memcpy(norm, text, len);
				nlen = len;
			} else {
				nlen = fffd_normalize(text, len, norm);
			}
			if ((size_t) k != nlen || memcmp(back, norm, nlen) != 0) {
				loaded_done(&l);
				TEST_FAIL_("%s: iteration %d does not round-trip", models[m], iter);
			}
		}
		loaded_done(&l);
	}
	return 0;
}

/* ---- pre-tokenizers ---- */

static int check_split(const char *pre, const char *s, size_t len, const char *const *want)
{
	_cleanup_(vocab_pre_freep) struct vocab_pre *p = NULL;
	struct vocab_pre_words w = {};
	struct errmsg e = {};
	size_t n_want = 0;
	bool ok;

	while (want[n_want])
		n_want++;
	ASSERT_OK(vocab_pre_new(pre, &p, &e));
	ASSERT_OK(vocab_pre_split(p, s, len, &w));
	ok = w.n == n_want;
	for (size_t i = 0; ok && i < n_want; i++)
		ok = w.offs[i + 1] - w.offs[i] == strlen(want[i]) &&
		     memcmp(w.text + w.offs[i], want[i], strlen(want[i])) == 0;
	if (!ok) {
		fprintf(stderr, "  %s: '%.*s' split as", pre, (int) len, s);
		for (size_t i = 0; i < w.n; i++)
			fprintf(stderr, " [%.*s]", (int) (w.offs[i + 1] - w.offs[i]),
				w.text + w.offs[i]);
		fprintf(stderr, "\n  expected");
		for (size_t i = 0; i < n_want; i++)
			fprintf(stderr, " [%s]", want[i]);
		fputc('\n', stderr);
	}
	vocab_pre_words_done(&w);
	return ok ? 0 : 1;
}

#define SPLIT(pre, s, ...)                                                                         \
	do {                                                                                       \
		const char *const want_[] = { __VA_ARGS__, NULL };                                 \
		if (check_split(pre, s, sizeof(s) - 1, want_))                                     \
			return 1;                                                                  \
	} while (0)

/* Expected pieces worked out from the patterns' semantics (leftmost alternative first,
 * greedy, backtracking; unmatched text between matches is a piece of its own). */
TEST(pretok_llama3)
{
	SPLIT("llama-bpe", "Hello world", "Hello", " world");
	SPLIT("llama-bpe", "12345", "123", "45"); /* digits in groups of up to 3 */
	SPLIT("llama-bpe", "1234567", "123", "456", "7");
	SPLIT("llama-bpe", "I'M", "I", "'M"); /* contractions in any case */
	SPLIT("llama-bpe", "WE'VE we've don't", "WE", "'VE", " we", "'ve", " don", "'t");
	SPLIT("llama-bpe", "a\n\nb", "a", "\n\n", "b");
	SPLIT("llama-bpe", "x   y", "x", "  ", " y"); /* \s+(?!\S) leaves the last space */
	SPLIT("llama-bpe", "  \n  hi", "  \n", " ", " hi");
	SPLIT("llama-bpe", "hi!!\n\nyo", "hi", "!!\n\n", "yo");
	SPLIT("llama-bpe", "$100", "$", "100");
	SPLIT("llama-bpe", "\tword", "\tword"); /* any non-letter/digit/newline leads a word */
	SPLIT("llama-bpe", ",foo", ",foo");
	SPLIT("llama-bpe", " ,foo", " ,", "foo");
	SPLIT("llama-bpe", "\xf0\x9f\xa6\x99x", "\xf0\x9f\xa6\x99x");
	SPLIT("llama-bpe", "end   ", "end", "   ");
	SPLIT("llama-bpe", "\xc3\x9cn\xc3\xaf 42", "\xc3\x9cn\xc3\xaf", " ", "42");
	return 0;
}

TEST(pretok_qwen2)
{
	SPLIT("qwen2", "12345", "1", "2", "3", "4", "5"); /* single digits */
	SPLIT("qwen2", "I'M don't", "I", "'M", " don", "'t");
	SPLIT("qwen2", "$100", "$", "1", "0", "0");
	SPLIT("qwen2", "a\n\nb", "a", "\n\n", "b");
	SPLIT("qwen2", "\tword  x", "\tword", " ", " x");
	SPLIT("qwen2", "hi!!\r\nyo", "hi", "!!\r\n", "yo");
	return 0;
}

TEST(pretok_gpt2)
{
	SPLIT("gpt-2", "12345", "12345");
	SPLIT("gpt-2", "I'M", "I", "'", "M"); /* lowercase contractions only */
	SPLIT("gpt-2", "a\n\nb", "a", "\n", "\n", "b");
	SPLIT("gpt-2", "x   y", "x", "  ", " y");
	SPLIT("gpt-2", "hi!!\n\nyo", "hi", "!!", "\n", "\n", "yo");
	SPLIT("gpt-2", "\tword", "\t", "word");
	SPLIT("gpt-2", ",foo", ",", "foo");
	SPLIT("gpt-2", "\xf0\x9f\xa6\x99x", "\xf0\x9f\xa6\x99", "x");
	SPLIT("gpt-2", " 123abc", " 123", "abc");
	SPLIT("gpt-2", "  \n  hi", "  \n ", " hi");
	/* invalid bytes are U+FFFD by now */
	SPLIT("gpt-2", "a\xff" "b", "a", "\xef\xbf\xbd", "b");
	/* U+3000 is a space, U+180E is not (PCRE2's \s would say it is) */
	SPLIT("gpt-2", "a\xe3\x80\x80\xe3\x80\x80" "b", "a", "\xe3\x80\x80", "\xe3\x80\x80", "b");
	SPLIT("gpt-2", "a \xe1\xa0\x8e", "a", " \xe1\xa0\x8e");
	return 0;
}

TEST(pretok_multi_pattern)
{
	/* deepseek-coder: newlines, letters, punctuation, CJK runs, then single digits */
	SPLIT("deepseek-coder",
	      "foo 123 \xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8"
	      "apple\xe5\xb7\xa5\xe4\xbd\x9c\n\nbar!!",
	      "foo", " ", "1", "2", "3", " ", "\xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8", "apple",
	      "\xe5\xb7\xa5\xe4\xbd\x9c", "\n", "\n", "bar", "!!");
	/* llama.cpp's "default": punctuation runs, GPT-2, numbers, then 3-digit groups */
	SPLIT("default", "Hello, world! 1234", "Hello", ",", " world", "!", " ", "123", "4");
	SPLIT("starcoder", "abc 123", "abc", " ", "1", "2", "3");
	/* llama.cpp's \p{S} does not take '~' (its collapsed-category regexes miss it) */
	SPLIT("deepseek-v3", "x ~~y 12345", "x", " ", "~", "~y", " ", "123", "45");
	SPLIT("deepseek-v3", "a +-b", "a", " +-", "b");
	return 0;
}

TEST(pretok_names)
{
	_cleanup_(vocab_pre_freep) struct vocab_pre *p = NULL;
	struct vocab_pre_words w = {};
	struct errmsg e = {};

	ASSERT_ERR(vocab_pre_new("no-such-pre", &p, &e), -EOPNOTSUPP);
	ASSERT_TRUE(strstr(e.text, "'no-such-pre'") != NULL);
	ASSERT_OK(vocab_pre_new(NULL, &p, &e));
	ASSERT_STREQ(vocab_pre_name(p), "default");
	p = vocab_pre_free(p);
	ASSERT_OK(vocab_pre_new("llama3", &p, &e));
	ASSERT_STREQ(vocab_pre_name(p), "llama-bpe");
	ASSERT_TRUE(vocab_pre_traits(p).ignore_merges);
	ASSERT_TRUE(vocab_pre_traits(p).add_bos);
	ASSERT_OK(vocab_pre_split(p, "", 0, &w));
	ASSERT_EQ(w.n, 0);
	vocab_pre_words_done(&w);
	p = vocab_pre_free(p);
	ASSERT_OK(vocab_pre_new("qwen2", &p, &e));
	ASSERT_TRUE(!vocab_pre_traits(p).ignore_merges && !vocab_pre_traits(p).add_bos);
	return 0;
}

/* ---- vocabularies built in memory ---- */

/* A GGUF image with keys only. */
struct gb {
	uint8_t *kv;
	size_t len, cap;
	uint64_t n_kv;
	uint8_t *file;
};

static void gb_raw(struct gb *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 256;
		b->kv = realloc(b->kv, b->cap);
		if (!b->kv)
			abort();
	}
	memcpy(b->kv + b->len, p, n);
	b->len += n;
}

static void gb_u32raw(struct gb *b, uint32_t x)
{
	gb_raw(b, &x, 4);
}

static void gb_strraw(struct gb *b, const char *s)
{
	uint64_t n = strlen(s);

	gb_raw(b, &n, 8);
	gb_raw(b, s, (size_t) n);
}

static void gb_key(struct gb *b, const char *key, uint32_t type)
{
	gb_strraw(b, key);
	gb_u32raw(b, type);
	b->n_kv++;
}

static void gb_str(struct gb *b, const char *key, const char *v)
{
	gb_key(b, key, GGUF_TYPE_STRING);
	gb_strraw(b, v);
}

static void gb_u32(struct gb *b, const char *key, uint32_t v)
{
	gb_key(b, key, GGUF_TYPE_UINT32);
	gb_u32raw(b, v);
}

static void gb_i32(struct gb *b, const char *key, int32_t v)
{
	gb_key(b, key, GGUF_TYPE_INT32);
	gb_raw(b, &v, 4);
}

static void gb_bool(struct gb *b, const char *key, bool v)
{
	uint8_t x = v;

	gb_key(b, key, GGUF_TYPE_BOOL);
	gb_raw(b, &x, 1);
}

static void gb_arr_str(struct gb *b, const char *key, const char *const *v, size_t n)
{
	uint64_t n64 = n;

	gb_key(b, key, GGUF_TYPE_ARRAY);
	gb_u32raw(b, GGUF_TYPE_STRING);
	gb_raw(b, &n64, 8);
	for (size_t i = 0; i < n; i++)
		gb_strraw(b, v[i]);
}

static void gb_arr_num(struct gb *b, const char *key, uint32_t type, const void *v, size_t n)
{
	uint64_t n64 = n;

	gb_key(b, key, GGUF_TYPE_ARRAY);
	gb_u32raw(b, type);
	gb_raw(b, &n64, 8);
	gb_raw(b, v, n * 4);
}

/* Parses the image and loads its vocabulary; the gguf stays in *g (for the buffer). */
static int gb_load(struct gb *b, struct gguf **g, struct vocab **v, struct errmsg *e)
{
	size_t size = 24 + b->len, padded = (size + 31) / 32 * 32;
	uint32_t version = 3;
	uint64_t zero = 0;
	int r;

	free(b->file);
	b->file = calloc(1, padded);
	if (!b->file)
		abort();
	memcpy(b->file, "GGUF", 4);
	memcpy(b->file + 4, &version, 4);
	memcpy(b->file + 8, &zero, 8);
	memcpy(b->file + 16, &b->n_kv, 8);
	memcpy(b->file + 24, b->kv, b->len);
	*g = NULL;
	*v = NULL;
	r = gguf_parse_buffer(b->file, padded, g, e);
	if (r < 0)
		return r;
	return vocab_load(*g, v, e);
}

static void gb_done(struct gb *b)
{
	free(b->kv);
	free(b->file);
	*b = (struct gb){};
}

/* SPM vocabularies: tokens with their scores (types: <unk>, controls, then normal). */
static int spm_case(const char *const *toks, const float *scores, size_t n, const char *text,
		    const int32_t *want, size_t n_want)
{
	struct gb b = {};
	struct gguf *g;
	struct vocab *v;
	struct errmsg e = {};
	int32_t types[64], got[64];
	int64_t k;
	int r;

	for (size_t i = 0; i < n; i++)
		types[i] = i == 0 ? 2 : i < 3 ? 3 : strncmp(toks[i], "<0x", 3) == 0 ? 6 : 1;
	gb_str(&b, "tokenizer.ggml.model", "llama");
	gb_arr_str(&b, "tokenizer.ggml.tokens", toks, n);
	gb_arr_num(&b, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, n);
	gb_arr_num(&b, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
	r = gb_load(&b, &g, &v, &e);
	if (r < 0) {
		fprintf(stderr, "  load: %s\n", e.text);
		gb_done(&b);
		return 1;
	}
	k = vocab_tokenize(v, text, strlen(text), false, false, got, ELEMENTSOF(got));
	vocab_free(v);
	gguf_free(g);
	gb_done(&b);
	if (k != (int64_t) n_want || memcmp(got, want, n_want * sizeof(*want)) != 0) {
		fprintf(stderr, "  '%s':\n", text);
		print_ids("want", want, n_want);
		print_ids("got ", got, k > 0 ? (size_t) k : 0);
		return 1;
	}
	return 0;
}

TEST(spm_merge_order)
{
	static const char *const toks[] = { "<unk>", "<s>", "</s>", SPIECE_STR, "a", "b",
					    SPIECE_STR "a", "ab", "<0x63>" };
	/* "ab" → "▁ab": the pair with the higher score merges first */
	ASSERT_OK(spm_case(toks, (const float[]){ 0, 0, 0, -1, -1, -1, -1.0f, -0.5f, 0 }, 8, "ab",
			   (const int32_t[]){ 3, 7 }, 2));
	ASSERT_OK(spm_case(toks, (const float[]){ 0, 0, 0, -1, -1, -1, -0.5f, -1.0f, 0 }, 8, "ab",
			   (const int32_t[]){ 6, 5 }, 2));
	/* a tie goes to the leftmost pair */
	ASSERT_OK(spm_case(toks, (const float[]){ 0, 0, 0, -1, -1, -1, -1.0f, -1.0f, 0 }, 8, "ab",
			   (const int32_t[]){ 6, 5 }, 2));
	/* "c" is no token: its byte token, or <unk> when there are no byte tokens */
	ASSERT_OK(spm_case(toks, (const float[]){ 0, 0, 0, -1, -1, -1, -1, -1, 0 }, 9, "c",
			   (const int32_t[]){ 3, 8 }, 2));
	ASSERT_OK(spm_case(toks, (const float[]){ 0, 0, 0, -1, -1, -1, -1, -1, 0 }, 8, "c",
			   (const int32_t[]){ 3, 0 }, 2));
	return 0;
}

static const char *const spm_toks[] = { "<unk>", "<s>", "</s>", SPIECE_STR, "a", "<|im_end|>" };

static void gb_spm_base(struct gb *b)
{
	gb_str(b, "tokenizer.ggml.model", "llama");
	gb_arr_str(b, "tokenizer.ggml.tokens", spm_toks, ELEMENTSOF(spm_toks));
}

TEST(spm_special_ids)
{
	struct gb b = {};
	struct gguf *g;
	struct vocab *v;
	struct errmsg e = {};
	int32_t ids[8];

	/* defaults: BOS 1, EOS 2, add BOS; a named EOT-like text is control and EOG */
	gb_spm_base(&b);
	ASSERT_OK(gb_load(&b, &g, &v, &e));
	ASSERT_EQ(vocab_bos(v), 1);
	ASSERT_EQ(vocab_eos(v), 2);
	ASSERT_TRUE(vocab_add_bos(v));
	ASSERT_TRUE(vocab_is_eog(v, 5));
	ASSERT_TRUE(vocab_is_control(v, 5));
	ASSERT_EQ(vocab_tokenize(v, "<|im_end|>", 10, false, true, ids, 8), 1);
	ASSERT_EQ(ids[0], 5);
	vocab_free(v);
	gguf_free(g);
	gb_done(&b);

	/* "none" (4294967295) and out-of-range ids are no token, not an error */
	gb_spm_base(&b);
	gb_u32(&b, "tokenizer.ggml.bos_token_id", 4294967295u);
	gb_u32(&b, "tokenizer.ggml.eos_token_id", 100000);
	gb_i32(&b, "tokenizer.ggml.padding_token_id", -1);
	ASSERT_OK(gb_load(&b, &g, &v, &e));
	ASSERT_EQ(vocab_bos(v), -1);
	ASSERT_EQ(vocab_eos(v), -1);
	ASSERT_TRUE(!vocab_add_bos(v));
	ASSERT_EQ(vocab_tokenize(v, "a", 1, true, false, ids, 8), 2); /* no BOS to add */
	ASSERT_EQ(ids[0], 3); /* "▁" */
	ASSERT_EQ(ids[1], 4);
	vocab_free(v);
	gguf_free(g);
	gb_done(&b);

	/* explicit ids and flags */
	gb_spm_base(&b);
	gb_u32(&b, "tokenizer.ggml.bos_token_id", 2);
	gb_u32(&b, "tokenizer.ggml.eos_token_id", 1);
	gb_bool(&b, "tokenizer.ggml.add_bos_token", false);
	gb_bool(&b, "tokenizer.ggml.add_space_prefix", false);
	ASSERT_OK(gb_load(&b, &g, &v, &e));
	ASSERT_EQ(vocab_bos(v), 2);
	ASSERT_EQ(vocab_eos(v), 1);
	ASSERT_TRUE(vocab_is_eog(v, 1));
	ASSERT_TRUE(!vocab_add_bos(v));
	ASSERT_EQ(vocab_tokenize(v, "a", 1, false, false, ids, 8), 1); /* no "▁" prefix */
	ASSERT_EQ(ids[0], 4);
	vocab_free(v);
	gguf_free(g);
	gb_done(&b);
	return 0;
}

static const char *const bpe_toks[] = { "a", "b", "c", "ab", "bc", "abc", "<|bos|>" };
static const int32_t bpe_types[] = { 1, 1, 1, 1, 1, 1, 3 };

static void gb_bpe_base(struct gb *b, const char *pre, const char *m0, const char *m1)
{
	gb_str(b, "tokenizer.ggml.model", "gpt2");
	if (pre)
		gb_str(b, "tokenizer.ggml.pre", pre);
	gb_arr_str(b, "tokenizer.ggml.tokens", bpe_toks, ELEMENTSOF(bpe_toks));
	gb_arr_num(b, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, bpe_types,
		   ELEMENTSOF(bpe_types));
	gb_arr_str(b, "tokenizer.ggml.merges", (const char *const[]){ m0, m1 }, 2);
}

static int bpe_case(const char *pre, const char *m0, const char *m1, const char *text,
		    const int32_t *want, size_t n_want)
{
	struct gb b = {};
	struct gguf *g;
	struct vocab *v;
	struct errmsg e = {};
	int32_t got[16];
	int64_t k;

	gb_bpe_base(&b, pre, m0, m1);
	if (gb_load(&b, &g, &v, &e) < 0)
		TEST_FAIL_("load: %s", e.text);
	k = vocab_tokenize(v, text, strlen(text), false, false, got, ELEMENTSOF(got));
	vocab_free(v);
	gguf_free(g);
	gb_done(&b);
	if (k != (int64_t) n_want || memcmp(got, want, n_want * sizeof(*want)) != 0) {
		fprintf(stderr, "  %s '%s':\n", pre ? pre : "(none)", text);
		print_ids("want", want, n_want);
		print_ids("got ", got, k > 0 ? (size_t) k : 0);
		return 1;
	}
	return 0;
}

TEST(bpe_merge_order)
{
	/* the lower rank merges first */
	ASSERT_OK(bpe_case("qwen2", "b c", "a b", "abc", (const int32_t[]){ 0, 4 }, 2));
	ASSERT_OK(bpe_case("qwen2", "a b", "b c", "abc", (const int32_t[]){ 3, 2 }, 2));
	ASSERT_OK(bpe_case(NULL, "a b", "b c", "abc", (const int32_t[]){ 3, 2 }, 2));
	/* Llama 3 takes a piece that is a whole token as it is */
	ASSERT_OK(bpe_case("llama-bpe", "a b", "b c", "abc", (const int32_t[]){ 5 }, 1));
	/* a byte with no token of its own is dropped, as in llama.cpp */
	ASSERT_OK(bpe_case("qwen2", "a b", "b c", "abz", (const int32_t[]){ 3 }, 1));
	return 0;
}

TEST(bpe_bos_rules)
{
	struct gb b = {};
	struct gguf *g;
	struct vocab *v;
	struct errmsg e = {};
	int32_t ids[8];

	/* llama-bpe adds BOS by default */
	gb_bpe_base(&b, "llama-bpe", "a b", "b c");
	gb_u32(&b, "tokenizer.ggml.bos_token_id", 6);
	ASSERT_OK(gb_load(&b, &g, &v, &e));
	ASSERT_TRUE(vocab_add_bos(v));
	ASSERT_EQ(vocab_tokenize(v, "abc", 3, vocab_add_bos(v), false, ids, 8), 2);
	ASSERT_EQ(ids[0], 6);
	ASSERT_EQ(ids[1], 5);
	vocab_free(v);
	gguf_free(g);
	gb_done(&b);

	/* ... unless the file says otherwise */
	gb_bpe_base(&b, "llama-bpe", "a b", "b c");
	gb_u32(&b, "tokenizer.ggml.bos_token_id", 6);
	gb_bool(&b, "tokenizer.ggml.add_bos_token", false);
	ASSERT_OK(gb_load(&b, &g, &v, &e));
	ASSERT_TRUE(!vocab_add_bos(v));
	vocab_free(v);
	gguf_free(g);
	gb_done(&b);

	/* qwen2 does not; and llama.cpp's default BPE BOS id (11) is out of range here */
	gb_bpe_base(&b, "qwen2", "a b", "b c");
	ASSERT_OK(gb_load(&b, &g, &v, &e));
	ASSERT_TRUE(!vocab_add_bos(v));
	ASSERT_EQ(vocab_bos(v), -1);
	ASSERT_EQ(vocab_eos(v), -1);
	vocab_free(v);
	gguf_free(g);
	gb_done(&b);
	return 0;
}

/* Each broken file fails with an error that names the key (or value) at fault. */
static int expect_load_error(struct gb *b, int err, const char *needle)
{
	struct gguf *g;
	struct vocab *v;
	struct errmsg e = {};
	int r = gb_load(b, &g, &v, &e);

	vocab_free(v);
	gguf_free(g);
	gb_done(b);
	if (r != err)
		TEST_FAIL_("expected %d (%s), got %d: %s", err, needle, r, e.text);
	if (!strstr(e.text, needle))
		TEST_FAIL_("error '%s' does not mention '%s'", e.text, needle);
	return 0;
}

TEST(load_errors)
{
	struct gb b = {};

	gb_arr_str(&b, "tokenizer.ggml.tokens", spm_toks, 3);
	ASSERT_OK(expect_load_error(&b, -EBADMSG, "tokenizer.ggml.model"));

	gb_str(&b, "tokenizer.ggml.model", "bert");
	gb_arr_str(&b, "tokenizer.ggml.tokens", spm_toks, 3);
	ASSERT_OK(expect_load_error(&b, -EOPNOTSUPP, "'bert'"));

	gb_u32(&b, "tokenizer.ggml.model", 1);
	ASSERT_OK(expect_load_error(&b, -EINVAL, "tokenizer.ggml.model"));

	gb_str(&b, "tokenizer.ggml.model", "llama");
	ASSERT_OK(expect_load_error(&b, -EBADMSG, "tokenizer.ggml.tokens"));

	gb_str(&b, "tokenizer.ggml.model", "llama");
	gb_arr_str(&b, "tokenizer.ggml.tokens", spm_toks, 0);
	ASSERT_OK(expect_load_error(&b, -EBADMSG, "empty"));

	gb_str(&b, "tokenizer.ggml.model", "llama");
	gb_arr_num(&b, "tokenizer.ggml.tokens", GGUF_TYPE_FLOAT32, (const float[]){ 1, 2 }, 2);
	ASSERT_OK(expect_load_error(&b, -EBADMSG, "tokenizer.ggml.tokens"));

	gb_spm_base(&b);
	gb_arr_num(&b, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, (const float[]){ 1, 2 }, 2);
	ASSERT_OK(expect_load_error(&b, -EBADMSG, "tokenizer.ggml.scores"));

	gb_spm_base(&b);
	gb_arr_num(&b, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, (const int32_t[]){ 1 }, 1);
	ASSERT_OK(expect_load_error(&b, -EBADMSG, "tokenizer.ggml.token_type"));

	gb_spm_base(&b);
	gb_u32(&b, "tokenizer.ggml.add_bos_token", 1);
	ASSERT_OK(expect_load_error(&b, -EINVAL, "tokenizer.ggml.add_bos_token"));

	gb_spm_base(&b);
	gb_str(&b, "tokenizer.ggml.bos_token_id", "1");
	ASSERT_OK(expect_load_error(&b, -EINVAL, "tokenizer.ggml.bos_token_id"));

	gb_str(&b, "tokenizer.ggml.model", "llama");
	gb_arr_str(&b, "tokenizer.ggml.tokens", (const char *const[]){ "a", "b", "a" }, 3);
	ASSERT_OK(expect_load_error(&b, -EBADMSG, "duplicate token 'a'"));

	gb_str(&b, "tokenizer.ggml.model", "gpt2");
	gb_arr_str(&b, "tokenizer.ggml.tokens", bpe_toks, ELEMENTSOF(bpe_toks));
	ASSERT_OK(expect_load_error(&b, -EBADMSG, "tokenizer.ggml.merges"));

	gb_bpe_base(&b, "foo-bar", "a b", "b c");
	ASSERT_OK(expect_load_error(&b, -EOPNOTSUPP, "'foo-bar'"));
	return 0;
}

/* Model output made valid UTF-8 for JSON and D-Bus: bad bytes become U+FFFD, good text stays. */
TEST(utf8_make_valid)
{
	static const struct {
		const char *in, *want;
	} cases[] = {
		{ "plain ascii", "plain ascii" },
		{ "caf\xc3\xa9 \xe6\x88\x91 \xf0\x9f\xa6\x99", "caf\xc3\xa9 \xe6\x88\x91 \xf0\x9f\xa6\x99" },
		{ "a\xb2" "b", "a\xef\xbf\xbd" "b" },                 /* lone continuation byte */
		{ "\xc3", "\xef\xbf\xbd" },                         /* cut short */
		{ "\xe6\x88", "\xef\xbf\xbd\xef\xbf\xbd" },        /* cut short: each byte */
		{ "\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd" },        /* overlong */
		{ "\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* surrogate */
		{ "\xf5x\xff", "\xef\xbf\xbdx\xef\xbf\xbd" },
	};
	char buf[64];

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		size_t n = strlen(cases[i].in), m;

		memcpy(buf, cases[i].in, n);
		m = utf8_make_valid(buf, n, sizeof(buf));
		if (m != strlen(cases[i].want) || memcmp(buf, cases[i].want, m) != 0)
			TEST_FAIL_("case %zu: got %zu bytes '%.*s'", i, m, (int) m, buf);
	}
	/* no room for the replacement: whole characters only, never a partial one */
	memcpy(buf, "ab\xb2", 3);
	ASSERT_EQ(utf8_make_valid(buf, 3, 4), 2u);
	return 0;
}

/* ---- speed and threads ---- */

static char *make_text(size_t size)
{
	static const char para[] =
		"The quick brown fox jumps over the lazy dog; it's 3.14159 o'clock.\n"
		"    def f(x): return x ** 2  # comment\t\ttabs\n"
		"\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xe6\x88\x91\xe6\x83\xb3 "
		"\xf0\x9f\xa6\x99 caf\xc3\xa9  1234567890!!\n\n";
	char *s = malloc(size + 1);

	if (!s)
		abort();
	for (size_t i = 0; i < size; i++)
		s[i] = para[i % (sizeof(para) - 1)];
	s[size] = 0;
	return s;
}

static double tokenize_cost(const struct vocab *v, const char *s, size_t len, bool special,
			    int64_t *ret_n)
{
	double best = 1e30;

	for (int rep = 0; rep < 3; rep++) {
		double t0 = cpu_s();

		*ret_n = vocab_tokenize(v, s, len, false, special, NULL, 0);
		best = MIN(best, cpu_s() - t0);
	}
	return best;
}

/* Tokenizes s[0, len) and its first quarter (cut back to a character boundary, or to a whole
 * unit of unit bytes); prints both times. */
static int tokenize_growth(const char *model, const char *what, const char *s, size_t len,
			   size_t unit, bool special)
{
	struct loaded l;
	size_t quarter = len / 4 / unit * unit;
	int64_t n_full, n_quarter;
	double full, q;
	char label[160];
	int r;

	while (quarter > 0 && ((unsigned char) s[quarter] & 0xc0) == 0x80)
		quarter--;
	r = load_shared(model, &l);
	if (r)
		return r;
	q = tokenize_cost(l.v, s, quarter, special, &n_quarter);
	full = tokenize_cost(l.v, s, len, special, &n_full);
	loaded_done(&l);
	snprintf(label, sizeof(label), "%s, %s, %zu bytes -> %" PRId64 " ids",
		 strrchr(model, '/') + 1, what, len, n_full);
	ASSERT_TRUE(n_quarter > 0 && n_full >= n_quarter);
	print_growth(label, q, full);
	return 0;
}

TEST(speed)
{
	static const char *const models[] = {
		"reference/tokenizers/ggml-vocab-llama-spm.gguf",
		"reference/tokenizers/ggml-vocab-gpt-2.gguf",
		"reference/tokenizers/ggml-vocab-deepseek-coder.gguf",
	};
	_cleanup_free_ char *text = make_text(10 * 1024), *same = NULL, *specials = NULL;
	const size_t big = 64 * 1024;
	int r;

	same = malloc(big + 1);
	specials = malloc(2000 * 13 + 1);
	if (!same || !specials)
		return 1;
	memset(same, 'a', big);
	for (size_t i = 0; i < 2000; i++)
		memcpy(specials + 13 * i, "<|endoftext|>", 13);
	for (size_t i = 0; i < ELEMENTSOF(models); i++) {
		if ((r = tokenize_growth(models[i], "mixed text", text, strlen(text), 1, false)))
			return r;
		if ((r = tokenize_growth(models[i], "one 64 KiB word", same, big, 1, false)))
			return r;
	}
	memset(same, ' ', big);
	if ((r = tokenize_growth(models[1], "64 KiB of spaces", same, big, 1, false)))
		return r;
	return tokenize_growth(models[1], "2000 specials", specials, 2000 * 13, 13, true);
}

/* Parses and loads a synthetic BPE vocabulary of n tokens and n merges; its CPU time, or < 0. */
static double load_cost(size_t n)
{
	struct gb b = {};
	struct gguf *g = NULL;
	struct vocab *v = NULL;
	struct errmsg e = {};
	char **toks = calloc(n, sizeof(*toks)), **merges = calloc(n, sizeof(*merges));
	char probe[32];
	double t0, t1 = -1;
	int r = -ENOMEM;

	if (!toks || !merges)
		goto out;
	for (size_t i = 0; i < n; i++) {
		if (asprintf(&toks[i], "t%zu", i) < 0 ||
		    asprintf(&merges[i], "t%zu t%zu", (i * 7919) % n, (i * 104729 + 1) % n) < 0)
			goto out;
	}
	gb_str(&b, "tokenizer.ggml.model", "gpt2");
	gb_str(&b, "tokenizer.ggml.pre", "qwen2");
	gb_arr_str(&b, "tokenizer.ggml.tokens", (const char *const *) toks, n);
	gb_arr_str(&b, "tokenizer.ggml.merges", (const char *const *) merges, n);
	t0 = cpu_s();
	r = gb_load(&b, &g, &v, &e);
	t1 = cpu_s() - t0;
	snprintf(probe, sizeof(probe), "t%zu", n - 7);
	if (r >= 0 && (vocab_n_tokens(v) != n || vocab_find(v, probe) != (int32_t) (n - 7))) {
		fprintf(stderr, "  %zu tokens: wrong vocabulary after load\n", n);
		r = -EBADMSG;
	}
	vocab_free(v);
	gguf_free(g);
	gb_done(&b);
out:
	for (size_t i = 0; toks && merges && i < n; i++) {
		free(toks[i]);
		free(merges[i]);
	}
	free(toks);
	free(merges);
	return r < 0 ? -1 : t1;
}

/* A vocabulary the size of the big ones (150k tokens and merges) loads and finds its tokens. */
TEST(speed_load_150k)
{
	double q = 1e30, full = 1e30;

	for (int rep = 0; rep < 3; rep++) {
		double a = load_cost(150000 / 4), b = load_cost(150000);

		ASSERT_TRUE(a >= 0 && b >= 0);
		q = MIN(q, a);
		full = MIN(full, b);
	}
	print_growth("150k tokens + 150k merges: parse + load", q, full);
	return 0;
}

struct thread_arg {
	const struct vocab *v;
	const char *text;
	const int32_t *want;
	int64_t n_want;
	bool ok;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = p;

	a->ok = true;
	for (int k = 0; k < 5 && a->ok; k++) {
		int32_t *ids = NULL;
		int64_t n = tok(a->v, a->text, strlen(a->text), true, true, &ids);

		a->ok = n == a->n_want && memcmp(ids, a->want, (size_t) n * sizeof(*ids)) == 0;
		free(ids);
	}
	return NULL;
}

TEST(threads)
{
	_cleanup_free_ char *text = make_text(4096);
	_cleanup_free_ int32_t *want = NULL;
	struct thread_arg args[4];
	pthread_t th[4];
	struct loaded l;
	int64_t n;
	int r;

	r = load_shared("reference/tokenizers/ggml-vocab-gpt-2.gguf", &l);
	if (r)
		return r;
	n = tok(l.v, text, strlen(text), true, true, &want);
	ASSERT_TRUE(n > 0);
	for (int i = 0; i < 4; i++) {
		args[i] = (struct thread_arg){ .v = l.v, .text = text, .want = want, .n_want = n };
		ASSERT_EQ(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	loaded_done(&l);
	for (int i = 0; i < 4; i++)
		ASSERT_TRUE(args[i].ok);
	return 0;
}
