/* SPDX-License-Identifier: MIT */
/*
 * test-gguf: the GGUF reader on the shared real files, the writer round trip, the malformed
 * corpus in tests/data/gguf-malformed/ and truncations of a valid file.
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "engine/gguf-writer.h"
#include "engine/gguf.h"
#include "engine/quant.h"
#include "test.h"

static bool file_exists(const char *path)
{
	return access(path, R_OK) == 0;
}

/* Checks the invariants every parsed file must satisfy, whatever it holds. */
static int check_invariants(const struct gguf *g)
{
	const uint8_t *base = gguf_file_data(g);
	uint32_t align = gguf_alignment(g);

	ASSERT_TRUE(gguf_version(g) == 2 || gguf_version(g) == 3);
	ASSERT_TRUE(align > 0 && (align & (align - 1)) == 0);
	for (size_t i = 0; i < gguf_n_kv(g); i++) {
		const struct gguf_kv *kv = gguf_kv_at(g, i);
		char key[256];

		ASSERT_TRUE(kv != NULL);
		ASSERT_TRUE(kv->key.len > 0 && kv->key.len < sizeof(key));
		memcpy(key, kv->key.data, kv->key.len);
		key[kv->key.len] = 0;
		ASSERT_TRUE(gguf_get(g, key) == &kv->value);
		ASSERT_TRUE(kv->file_offset < gguf_file_size(g));
	}
	ASSERT_TRUE(gguf_kv_at(g, gguf_n_kv(g)) == NULL);
	for (size_t i = 0; i < gguf_n_tensors(g); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		const uint8_t *p = t->data;

		ASSERT_TRUE(gguf_find_tensor(g, t->name) == t);
		ASSERT_TRUE(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
		ASSERT_EQ(t->offset % align, 0);
		ASSERT_TRUE(p >= base && p + t->n_bytes <= base + gguf_file_size(g));
		ASSERT_EQ((uint64_t) (p - base - t->offset) % align, 0);
		for (uint32_t d = t->n_dims; d < GGUF_MAX_DIMS; d++)
			ASSERT_EQ(t->ne[d], 1);
		if (quant_block_bytes(t->type)) {
			int64_t row = quant_row_bytes(t->type, (int64_t) t->ne[0]);
			ASSERT_TRUE(row > 0);
			ASSERT_EQ(t->n_bytes, (uint64_t) row * t->ne[1] * t->ne[2] * t->ne[3]);
		}
	}
	ASSERT_TRUE(gguf_tensor_at(g, gguf_n_tensors(g)) == NULL);
	ASSERT_TRUE(gguf_find_tensor(g, "no.such.tensor") == NULL);
	ASSERT_TRUE(gguf_get(g, "no.such.key") == NULL);
	return 0;
}

static int open_shared(const char *rel, struct gguf **ret)
{
	const char *path = test_shared_path(rel);
	struct errmsg e = {};
	int r;

	if (!file_exists(path)) {
		printf("  %s missing, skipping\n", path);
		return TEST_SKIP;
	}
	r = gguf_open(path, ret, &e);
	if (r < 0) {
		fprintf(stderr, "  %s: %s\n", path, e.text);
		return 1;
	}
	return 0;
}

/* Every GGUF file shared with the project parses and satisfies the invariants. */
TEST(shared_files_parse)
{
	static const char *const dirs[] = { "models", "models/tiny", "reference/tokenizers" };
	int n = 0;

	for (size_t d = 0; d < ELEMENTSOF(dirs); d++) {
		DIR *dir = opendir(test_shared_path(dirs[d]));
		struct dirent *de;

		if (!dir)
			continue;
		while ((de = readdir(dir))) {
			size_t len = strlen(de->d_name);
			char rel[512];
			struct gguf *g = NULL;
			int r;

			if (len < 5 || strcmp(de->d_name + len - 5, ".gguf") != 0)
				continue;
			snprintf(rel, sizeof(rel), "%s/%s", dirs[d], de->d_name);
			r = open_shared(rel, &g);
			if (r == 0)
				r = check_invariants(g);
			gguf_free(g);
			if (r != 0) {
				closedir(dir);
				TEST_FAIL_("%s failed", rel);
			}
			n++;
		}
		closedir(dir);
	}
	if (n == 0)
		return TEST_SKIP;
	printf("  %d files\n", n);
	return 0;
}

TEST(stories260k_facts)
{
	_cleanup_(gguf_freep) struct gguf *g = NULL;
	_cleanup_free_ char *arch = NULL;
	const struct gguf_tensor *t;
	const struct gguf_value *tokens;
	uint32_t u;
	float f;
	int64_t i;
	int r;

	r = open_shared("models/stories260K.gguf", &g);
	if (r)
		return r;
	ASSERT_EQ(gguf_version(g), 3);
	ASSERT_EQ(gguf_alignment(g), 32);
	ASSERT_EQ(gguf_n_tensors(g), 48); /* 5 layers × 9 + embd, output_norm, output */
	ASSERT_OK(gguf_get_string(g, "general.architecture", &arch));
	ASSERT_STREQ(arch, "llama");
	ASSERT_OK(gguf_get_u32(g, "llama.embedding_length", &u));
	ASSERT_EQ(u, 64);
	ASSERT_OK(gguf_get_u32(g, "llama.block_count", &u));
	ASSERT_EQ(u, 5);
	ASSERT_OK(gguf_get_u32(g, "llama.attention.head_count_kv", &u));
	ASSERT_EQ(u, 4);
	ASSERT_OK(gguf_get_u32(g, "llama.feed_forward_length", &u));
	ASSERT_EQ(u, 172);
	ASSERT_OK(gguf_get_i64(g, "llama.context_length", &i));
	ASSERT_EQ(i, 512);
	ASSERT_OK(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f));
	ASSERT_NEAR(f, 1e-5, 1e-12);
	/* typed getter errors */
	ASSERT_ERR(gguf_get_u32(g, "general.architecture", &u), -EINVAL);
	ASSERT_ERR(gguf_get_u32(g, "no.such.key", &u), -ENOENT);
	ASSERT_ERR(gguf_get_u32(g, "llama.attention.layer_norm_rms_epsilon", &u), -EINVAL);
	ASSERT_OK(gguf_get_f32(g, "llama.block_count", &f)); /* integers convert to float */
	ASSERT_NEAR(f, 5, 0);

	tokens = gguf_get_array(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
	ASSERT_TRUE(tokens != NULL);
	ASSERT_TRUE(gguf_get_array(g, "tokenizer.ggml.tokens", GGUF_TYPE_INT32) == NULL);
	ASSERT_TRUE(gguf_get_array(g, "tokenizer.ggml.tokens", -1) == tokens);
	ASSERT_EQ(tokens->arr.n, 512);
	ASSERT_EQ(tokens->arr.strs[1].len, 3);
	ASSERT_TRUE(memcmp(tokens->arr.strs[1].data, "<s>", 3) == 0);
	ASSERT_TRUE(memcmp(tokens->arr.strs[3].data, "<0x00>", 6) == 0);
	const struct gguf_value *types = gguf_get_array(g, "tokenizer.ggml.token_type", -1);
	ASSERT_TRUE(types != NULL);
	ASSERT_EQ(types->arr.n, 512);
	ASSERT_EQ(gguf_arr_i64(types, 0), 2);   /* unknown */
	ASSERT_EQ(gguf_arr_i64(types, 1), 3);   /* control */
	ASSERT_EQ(gguf_arr_i64(types, 258), 6); /* byte <0xFF> */
	ASSERT_NEAR(gguf_arr_f64(types, 3), 6.0, 0);

	t = gguf_find_tensor(g, "token_embd.weight");
	ASSERT_TRUE(t != NULL);
	ASSERT_EQ(t->type, GGML_TYPE_F32);
	ASSERT_EQ(t->n_dims, 2);
	ASSERT_EQ(t->ne[0], 64);
	ASSERT_EQ(t->ne[1], 512);
	ASSERT_EQ(t->n_bytes, 64 * 512 * 4);
	t = gguf_find_tensor(g, "blk.4.ffn_down.weight");
	ASSERT_TRUE(t != NULL);
	ASSERT_EQ(t->ne[0], 172);
	ASSERT_EQ(t->ne[1], 64);
	return 0;
}

TEST(stories260k_q8_0_mixed_types)
{
	_cleanup_(gguf_freep) struct gguf *g = NULL;
	const struct gguf_tensor *t;
	int r;

	r = open_shared("models/stories260K-Q8_0.gguf", &g);
	if (r)
		return r;
	t = gguf_find_tensor(g, "blk.0.ffn_down.weight"); /* 172 columns: not a 32-multiple */
	ASSERT_TRUE(t != NULL);
	ASSERT_EQ(t->type, GGML_TYPE_F32);
	t = gguf_find_tensor(g, "blk.0.attn_q.weight");
	ASSERT_TRUE(t != NULL);
	ASSERT_EQ(t->type, GGML_TYPE_Q8_0);
	ASSERT_EQ(t->n_bytes, 64 / 32 * 34 * 64);
	return 0;
}

/* The tiny models: shapes from models/tiny/README.md, norms exactly 1.0. */
TEST(tiny_models_facts)
{
	static const struct {
		const char *file;
		uint32_t type, file_type;
		bool qwen2;
	} files[] = {
		{ "tiny-llama-f32.gguf", GGML_TYPE_F32, 0, false },
		{ "tiny-llama-f16.gguf", GGML_TYPE_F16, 1, false },
		{ "tiny-llama-bf16.gguf", GGML_TYPE_BF16, 32, false },
		{ "tiny-llama-q8_0.gguf", GGML_TYPE_Q8_0, 7, false },
		{ "tiny-llama-q4_0.gguf", GGML_TYPE_Q4_0, 2, false },
		{ "tiny-llama-q4_k.gguf", GGML_TYPE_Q4_K, 15, false },
		{ "tiny-llama-q6_k.gguf", GGML_TYPE_Q6_K, 18, false },
		{ "tiny-qwen2-f32.gguf", GGML_TYPE_F32, 0, true },
		{ "tiny-qwen2-q8_0.gguf", GGML_TYPE_Q8_0, 7, true },
	};
	static const struct {
		const char *name;
		uint64_t ne0, ne1;
	} shapes[] = {
		{ "token_embd.weight", 256, 512 },     { "output.weight", 256, 512 },
		{ "blk.1.attn_q.weight", 256, 256 },   { "blk.1.attn_output.weight", 256, 256 },
		{ "blk.0.attn_k.weight", 256, 128 },   { "blk.1.attn_v.weight", 256, 128 },
		{ "blk.0.ffn_gate.weight", 256, 512 }, { "blk.1.ffn_up.weight", 256, 512 },
		{ "blk.1.ffn_down.weight", 512, 256 },
	};
	int skipped = 0;

	for (size_t f = 0; f < ELEMENTSOF(files); f++) {
		_cleanup_(gguf_freep) struct gguf *g = NULL;
		_cleanup_free_ char *arch = NULL;
		char rel[256], key[128];
		const struct gguf_tensor *t;
		const struct gguf_value *tokens;
		uint32_t u;
		int r;

		snprintf(rel, sizeof(rel), "models/tiny/%s", files[f].file);
		r = open_shared(rel, &g);
		if (r == TEST_SKIP) {
			skipped++;
			continue;
		}
		if (r)
			return r;
		ASSERT_EQ(gguf_n_tensors(g), files[f].qwen2 ? 27 : 21);
		ASSERT_OK(gguf_get_string(g, "general.architecture", &arch));
		ASSERT_STREQ(arch, files[f].qwen2 ? "qwen2" : "llama");
		ASSERT_OK(gguf_get_u32(g, "general.file_type", &u));
		ASSERT_EQ(u, files[f].file_type);
		snprintf(key, sizeof(key), "%s.embedding_length", arch);
		ASSERT_OK(gguf_get_u32(g, key, &u));
		ASSERT_EQ(u, 256);
		snprintf(key, sizeof(key), "%s.attention.head_count", arch);
		ASSERT_OK(gguf_get_u32(g, key, &u));
		ASSERT_EQ(u, 4);
		snprintf(key, sizeof(key), "%s.vocab_size", arch);
		ASSERT_OK(gguf_get_u32(g, key, &u));
		ASSERT_EQ(u, 512);
		tokens = gguf_get_array(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
		ASSERT_TRUE(tokens != NULL);
		ASSERT_EQ(tokens->arr.n, 512);
		ASSERT_OK(gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &u));
		ASSERT_EQ(u, UINT32_MAX);

		for (size_t s = 0; s < ELEMENTSOF(shapes); s++) {
			t = gguf_find_tensor(g, shapes[s].name);
			ASSERT_TRUE(t != NULL);
			ASSERT_EQ(t->n_dims, 2);
			ASSERT_EQ(t->ne[0], shapes[s].ne0);
			ASSERT_EQ(t->ne[1], shapes[s].ne1);
			ASSERT_EQ(t->type, files[f].type);
		}
		t = gguf_find_tensor(g, "output_norm.weight");
		ASSERT_TRUE(t != NULL);
		ASSERT_EQ(t->type, GGML_TYPE_F32);
		ASSERT_EQ(t->n_dims, 1);
		ASSERT_EQ(t->ne[0], 256);
		for (size_t k = 0; k < 256; k++) {
			float x;

			memcpy(&x, (const char *) t->data + 4 * k, 4);
			ASSERT_TRUE(x == 1.0f);
		}
		t = gguf_find_tensor(g, "blk.0.attn_k.bias");
		if (files[f].qwen2) {
			ASSERT_TRUE(t != NULL);
			ASSERT_EQ(t->ne[0], 128);
			ASSERT_EQ(t->type, GGML_TYPE_F32);
		} else {
			ASSERT_TRUE(t == NULL);
		}
		ASSERT_OK(check_invariants(g));
	}
	return skipped == (int) ELEMENTSOF(files) ? TEST_SKIP : 0;
}

/* Vocabulary-only files have no tensors and still load. */
TEST(vocab_only_files)
{
	static const struct {
		const char *file, *model;
		uint64_t n_tokens;
	} files[] = {
		{ "ggml-vocab-llama-spm.gguf", "llama", 32000 },
		{ "ggml-vocab-gpt-2.gguf", "gpt2", 50257 },
		{ "ggml-vocab-deepseek-coder.gguf", "gpt2", 0 },
	};

	for (size_t f = 0; f < ELEMENTSOF(files); f++) {
		_cleanup_(gguf_freep) struct gguf *g = NULL;
		_cleanup_free_ char *model = NULL;
		const struct gguf_value *tokens;
		char rel[256];
		int r;

		snprintf(rel, sizeof(rel), "reference/tokenizers/%s", files[f].file);
		r = open_shared(rel, &g);
		if (r)
			return r;
		ASSERT_EQ(gguf_n_tensors(g), 0);
		ASSERT_OK(gguf_get_string(g, "tokenizer.ggml.model", &model));
		ASSERT_STREQ(model, files[f].model);
		tokens = gguf_get_array(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
		ASSERT_TRUE(tokens != NULL);
		if (files[f].n_tokens)
			ASSERT_EQ(tokens->arr.n, files[f].n_tokens);
		ASSERT_OK(check_invariants(g));
	}
	return 0;
}

TEST(open_errors)
{
	struct gguf *g = NULL;
	struct errmsg e = {};

	ASSERT_ERR(gguf_open("/nonexistent/x.gguf", &g, &e), -ENOENT);
	ASSERT_TRUE(e.text[0] != 0);
	ASSERT_TRUE(g == NULL);
	e.text[0] = 0;
	ASSERT_ERR(gguf_open("/", &g, &e), -EISDIR);
	ASSERT_TRUE(e.text[0] != 0);
	ASSERT_ERR(gguf_parse_buffer("", 0, &g, &e), -EBADMSG);
	ASSERT_TRUE(strstr(e.text, "empty") != NULL);
	ASSERT_ERR(gguf_parse_buffer("GGUF\3\0\0", 7, &g, &e), -EBADMSG);
	ASSERT_TRUE(strstr(e.text, "truncated") != NULL);
	ASSERT_TRUE(g == NULL);
	return 0;
}

/* ---- the writer ---- */

static char *make_tmpdir(void)
{
	const char *base = getenv("TMPDIR");
	char *dir;

	if (asprintf(&dir, "%s/test-gguf.XXXXXX", base && *base ? base : "/tmp") < 0)
		return NULL;
	if (!mkdtemp(dir)) {
		free(dir);
		return NULL;
	}
	return dir;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void) remove(path);
	return 0;
}

static void rm_tmpdir(char *dir)
{
	if (!dir)
		return;
	(void) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(dir);
}

static void rm_tmpdirp(char **dir)
{
	rm_tmpdir(*dir);
}

/* Deep equality of two values (scalars compare as stored, floats bit for bit via f64). */
static bool value_eq(const struct gguf_value *a, const struct gguf_value *b)
{
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case GGUF_TYPE_STRING:
		return a->str.len == b->str.len &&
		       (a->str.len == 0 || memcmp(a->str.data, b->str.data, a->str.len) == 0);
	case GGUF_TYPE_FLOAT32:
	case GGUF_TYPE_FLOAT64:
		return memcmp(&a->f64, &b->f64, sizeof(double)) == 0;
	case GGUF_TYPE_ARRAY:
		break;
	default:
		return a->u64 == b->u64;
	}
	if (a->arr.elem_type != b->arr.elem_type || a->arr.n != b->arr.n)
		return false;
	for (uint64_t i = 0; i < a->arr.n; i++) {
		switch (a->arr.elem_type) {
		case GGUF_TYPE_STRING: {
			const struct gguf_str *x = &a->arr.strs[i], *y = &b->arr.strs[i];

			if (x->len != y->len || (x->len && memcmp(x->data, y->data, x->len) != 0))
				return false;
			break;
		}
		case GGUF_TYPE_ARRAY:
			if (!value_eq(&a->arr.values[i], &b->arr.values[i]))
				return false;
			break;
		default:
			if (gguf_arr_u64(a, i) != gguf_arr_u64(b, i) ||
			    memcmp((const char *) a->arr.raw + i * gguf_type_size(a->arr.elem_type),
				   (const char *) b->arr.raw + i * gguf_type_size(a->arr.elem_type),
				   gguf_type_size(a->arr.elem_type)) != 0)
				return false;
		}
	}
	return true;
}

struct rt_tensor {
	const char *name;
	uint32_t type, n_dims;
	uint64_t ne[4];
	uint64_t n_bytes;
};

static const struct rt_tensor rt_tensors[] = {
	{ "f32.vector", GGML_TYPE_F32, 1, { 5 }, 20 },
	{ "f16.matrix", GGML_TYPE_F16, 2, { 64, 3 }, 64 * 3 * 2 },
	{ "q8_0.matrix", GGML_TYPE_Q8_0, 2, { 64, 3 }, 2 * 34 * 3 },
	{ "q4_k.4d", GGML_TYPE_Q4_K, 4, { 256, 2, 1, 3 }, 144 * 6 },
	{ "bf16.3d", GGML_TYPE_BF16, 3, { 7, 1, 2 }, 28 },
	{ "q5_k.only_in_the_table", GGML_TYPE_Q5_K, 1, { 512 }, 2 * 176 },
	{ "q6_k.matrix", GGML_TYPE_Q6_K, 2, { 256, 1 }, 210 },
};

static uint8_t rt_byte(size_t tensor, uint64_t i)
{
	return (uint8_t) (tensor * 31 + i * 7 + (i >> 8));
}

/* Writes a file with every value type, nested arrays and tensors of several types. */
static int write_round_trip_file(const char *path, uint32_t alignment)
{
	_cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;
	struct errmsg e = {};
	static const uint32_t u32s[] = { 1, 2, 0xffffffff };
	static const int16_t i16s[] = { -1, 2, -32768 };
	static const float f32s[] = { 0.5f, -1e-5f, 3.25f };
	static const double f64s[] = { 1e300, -0.0 };
	static const uint64_t u64s[] = { UINT64_MAX, 0 };
	static const int8_t i8s[] = { -128, 127 };
	static const bool bools[] = { true, false, true };
	static const char *const strs[] = { "a", "", "\xe2\x96\x81hello", "<0x00>" };
	uint8_t le_u16[4] = { 1, 0, 0xff, 0xff }; /* 1, 65535 */
	struct gguf_value inner[3], middle[2], top, strarr;
	struct gguf_str inner_strs[2] = { { 3, "abc" }, { 0, NULL } };

	ASSERT_OK(gguf_writer_new(path, &w, &e));
	ASSERT_OK(gguf_writer_add_str(w, "general.architecture", "llama", &e));
	ASSERT_OK(gguf_writer_set_alignment(w, alignment, &e));
	ASSERT_OK(gguf_writer_add_u8(w, "t.u8", 200, &e));
	ASSERT_OK(gguf_writer_add_i8(w, "t.i8", -100, &e));
	ASSERT_OK(gguf_writer_add_u16(w, "t.u16", 65000, &e));
	ASSERT_OK(gguf_writer_add_i16(w, "t.i16", -30000, &e));
	ASSERT_OK(gguf_writer_add_u32(w, "t.u32", 4000000000u, &e));
	ASSERT_OK(gguf_writer_add_i32(w, "t.i32", -2000000000, &e));
	ASSERT_OK(gguf_writer_add_u64(w, "t.u64", UINT64_MAX, &e));
	ASSERT_OK(gguf_writer_add_i64(w, "t.i64", INT64_MIN, &e));
	ASSERT_OK(gguf_writer_add_f32(w, "t.f32", 1e-5f, &e));
	ASSERT_OK(gguf_writer_add_f64(w, "t.f64", 0.1, &e));
	ASSERT_OK(gguf_writer_add_bool(w, "t.bool", true, &e));
	ASSERT_OK(gguf_writer_add_str_n(w, "t.str_nul", "a\0b", 3, &e));
	ASSERT_OK(gguf_writer_add_str(w, "t.str_empty", "", &e));
	ASSERT_OK(gguf_writer_add_array(w, "t.arr_u32", GGUF_TYPE_UINT32, u32s, 3, &e));
	ASSERT_OK(gguf_writer_add_array(w, "t.arr_i16", GGUF_TYPE_INT16, i16s, 3, &e));
	ASSERT_OK(gguf_writer_add_array(w, "t.arr_f32", GGUF_TYPE_FLOAT32, f32s, 3, &e));
	ASSERT_OK(gguf_writer_add_array(w, "t.arr_f64", GGUF_TYPE_FLOAT64, f64s, 2, &e));
	ASSERT_OK(gguf_writer_add_array(w, "t.arr_u64", GGUF_TYPE_UINT64, u64s, 2, &e));
	ASSERT_OK(gguf_writer_add_array(w, "t.arr_i8", GGUF_TYPE_INT8, i8s, 2, &e));
	ASSERT_OK(gguf_writer_add_array(w, "t.arr_bool", GGUF_TYPE_BOOL, bools, 3, &e));
	ASSERT_OK(gguf_writer_add_array(w, "t.arr_empty", GGUF_TYPE_INT32, NULL, 0, &e));
	ASSERT_OK(gguf_writer_add_str_array(w, "t.arr_str", strs, 4, &e));

	/* [[[1, 65535], ["abc", ""]], [[]]]: arrays of arrays built in memory */
	inner[0] =
	    (struct gguf_value){ .type = GGUF_TYPE_ARRAY,
				 .arr = { .elem_type = GGUF_TYPE_UINT16, .n = 2, .raw = le_u16 } };
	inner[1] = (struct gguf_value){
		.type = GGUF_TYPE_ARRAY,
		.arr = { .elem_type = GGUF_TYPE_STRING, .n = 2, .strs = inner_strs }
	};
	inner[2] = (struct gguf_value){ .type = GGUF_TYPE_ARRAY,
					.arr = { .elem_type = GGUF_TYPE_FLOAT32, .n = 0 } };
	middle[0] =
	    (struct gguf_value){ .type = GGUF_TYPE_ARRAY,
				 .arr = { .elem_type = GGUF_TYPE_ARRAY, .n = 2, .values = inner } };
	middle[1] = (struct gguf_value){
		.type = GGUF_TYPE_ARRAY,
		.arr = { .elem_type = GGUF_TYPE_ARRAY, .n = 1, .values = inner + 2 }
	};
	top = (struct gguf_value){ .type = GGUF_TYPE_ARRAY,
				   .arr = {
				       .elem_type = GGUF_TYPE_ARRAY, .n = 2, .values = middle } };
	ASSERT_OK(gguf_writer_add_value(w, "t.nested", &top, &e));
	strarr = inner[1];
	ASSERT_OK(gguf_writer_add_value(w, "t.value_strs", &strarr, &e));
	ASSERT_OK(gguf_writer_add_value(
	    w, "t.value_f32", &(struct gguf_value){ .type = GGUF_TYPE_FLOAT32, .f64 = 2.5 }, &e));

	for (size_t i = 0; i < ELEMENTSOF(rt_tensors); i++) {
		const struct rt_tensor *t = &rt_tensors[i];

		ASSERT_OK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, &e));
		ASSERT_EQ(gguf_writer_tensor_bytes(w, i), t->n_bytes);
	}
	/* Data: tensor 0 and 1 in one chunk spanning both, then the rest in odd pieces. */
	{
		uint8_t buf[4096];
		size_t n = 0;

		for (uint64_t k = 0; k < rt_tensors[0].n_bytes; k++)
			buf[n++] = rt_byte(0, k);
		for (uint64_t k = 0; k < rt_tensors[1].n_bytes; k++)
			buf[n++] = rt_byte(1, k);
		ASSERT_OK(gguf_writer_write(w, buf, n, &e));
		for (size_t i = 2; i < ELEMENTSOF(rt_tensors); i++) {
			for (uint64_t k = 0; k < rt_tensors[i].n_bytes; k++)
				buf[k] = rt_byte(i, k);
			for (uint64_t k = 0; k < rt_tensors[i].n_bytes; k += 13)
				ASSERT_OK(gguf_writer_write(
				    w, buf + k, MIN(13, rt_tensors[i].n_bytes - k), &e));
		}
	}
	uint64_t expect_size = gguf_writer_size(w);
	ASSERT_OK(gguf_writer_finish(w, &e));
	struct stat st;
	ASSERT_OK(stat(path, &st));
	ASSERT_EQ((uint64_t) st.st_size, expect_size);
	return 0;
}

static int check_round_trip_file(const struct gguf *g, uint32_t alignment)
{
	const struct gguf_value *v;
	_cleanup_free_ char *s = NULL;
	uint32_t u32;
	uint64_t u64;
	int64_t i64;
	float f;
	bool b;

	ASSERT_OK(check_invariants(g));
	ASSERT_EQ(gguf_version(g), 3);
	ASSERT_EQ(gguf_alignment(g), alignment);
	ASSERT_EQ(gguf_n_kv(g), 27);
	ASSERT_EQ(gguf_file_size(g) % alignment, 0);

	ASSERT_OK(gguf_get_u32(g, "t.u8", &u32));
	ASSERT_EQ(u32, 200);
	ASSERT_OK(gguf_get_i64(g, "t.i8", &i64));
	ASSERT_EQ(i64, -100);
	ASSERT_ERR(gguf_get_u32(g, "t.i8", &u32), -EINVAL); /* negative does not fit */
	ASSERT_OK(gguf_get_u32(g, "t.u16", &u32));
	ASSERT_EQ(u32, 65000);
	ASSERT_OK(gguf_get_i64(g, "t.i16", &i64));
	ASSERT_EQ(i64, -30000);
	ASSERT_OK(gguf_get_u32(g, "t.u32", &u32));
	ASSERT_EQ(u32, 4000000000u);
	ASSERT_OK(gguf_get_i64(g, "t.i32", &i64));
	ASSERT_EQ(i64, -2000000000);
	ASSERT_OK(gguf_get_u64(g, "t.u64", &u64));
	ASSERT_TRUE(u64 == UINT64_MAX);
	ASSERT_ERR(gguf_get_i64(g, "t.u64", &i64), -EINVAL);
	ASSERT_ERR(gguf_get_u32(g, "t.u64", &u32), -EINVAL);
	ASSERT_OK(gguf_get_i64(g, "t.i64", &i64));
	ASSERT_TRUE(i64 == INT64_MIN);
	ASSERT_ERR(gguf_get_u64(g, "t.i64", &u64), -EINVAL);
	ASSERT_OK(gguf_get_f32(g, "t.f32", &f));
	ASSERT_TRUE(f == 1e-5f);
	ASSERT_OK(gguf_get_f32(g, "t.f64", &f));
	ASSERT_TRUE(f == 0.1f);
	ASSERT_TRUE(gguf_get(g, "t.f64")->f64 == 0.1);
	ASSERT_OK(gguf_get_bool(g, "t.bool", &b));
	ASSERT_TRUE(b);
	ASSERT_ERR(gguf_get_bool(g, "t.u8", &b), -EINVAL);
	ASSERT_ERR(gguf_get_u32(g, "t.bool", &u32), -EINVAL);
	v = gguf_get(g, "t.str_nul");
	ASSERT_TRUE(v && v->type == GGUF_TYPE_STRING && v->str.len == 3);
	ASSERT_TRUE(memcmp(v->str.data, "a\0b", 3) == 0);
	ASSERT_OK(gguf_get_string(g, "t.str_empty", &s));
	ASSERT_STREQ(s, "");

	v = gguf_get_array(g, "t.arr_u32", GGUF_TYPE_UINT32);
	ASSERT_TRUE(v && v->arr.n == 3);
	ASSERT_EQ(gguf_arr_u64(v, 2), 0xffffffff);
	v = gguf_get_array(g, "t.arr_i16", GGUF_TYPE_INT16);
	ASSERT_TRUE(v && v->arr.n == 3);
	ASSERT_EQ(gguf_arr_i64(v, 0), -1);
	ASSERT_EQ(gguf_arr_i64(v, 2), -32768);
	ASSERT_NEAR(gguf_arr_f64(v, 2), -32768, 0);
	v = gguf_get_array(g, "t.arr_f32", GGUF_TYPE_FLOAT32);
	ASSERT_TRUE(v && v->arr.n == 3);
	ASSERT_TRUE(gguf_arr_f64(v, 1) == (double) -1e-5f);
	ASSERT_EQ(gguf_arr_i64(v, 2), 3);
	v = gguf_get_array(g, "t.arr_f64", GGUF_TYPE_FLOAT64);
	ASSERT_TRUE(v && v->arr.n == 2);
	ASSERT_TRUE(gguf_arr_f64(v, 0) == 1e300);
	ASSERT_TRUE(gguf_arr_i64(v, 0) == INT64_MAX); /* saturates */
	v = gguf_get_array(g, "t.arr_u64", GGUF_TYPE_UINT64);
	ASSERT_TRUE(v && gguf_arr_u64(v, 0) == UINT64_MAX);
	v = gguf_get_array(g, "t.arr_i8", GGUF_TYPE_INT8);
	ASSERT_TRUE(v && gguf_arr_i64(v, 0) == -128 && gguf_arr_i64(v, 1) == 127);
	v = gguf_get_array(g, "t.arr_bool", GGUF_TYPE_BOOL);
	ASSERT_TRUE(v && v->arr.n == 3 && gguf_arr_u64(v, 0) == 1 && gguf_arr_u64(v, 1) == 0);
	v = gguf_get_array(g, "t.arr_empty", GGUF_TYPE_INT32);
	ASSERT_TRUE(v && v->arr.n == 0);
	v = gguf_get_array(g, "t.arr_str", GGUF_TYPE_STRING);
	ASSERT_TRUE(v && v->arr.n == 4);
	ASSERT_EQ(v->arr.strs[1].len, 0);
	ASSERT_EQ(v->arr.strs[2].len, 8);
	ASSERT_TRUE(memcmp(v->arr.strs[2].data, "\xe2\x96\x81hello", 8) == 0);

	v = gguf_get_array(g, "t.nested", GGUF_TYPE_ARRAY);
	ASSERT_TRUE(v && v->arr.n == 2);
	const struct gguf_value *m0 = &v->arr.values[0], *m1 = &v->arr.values[1];
	ASSERT_TRUE(m0->type == GGUF_TYPE_ARRAY && m0->arr.elem_type == GGUF_TYPE_ARRAY);
	ASSERT_EQ(m0->arr.n, 2);
	ASSERT_EQ(m0->arr.values[0].arr.elem_type, GGUF_TYPE_UINT16);
	ASSERT_EQ(gguf_arr_u64(&m0->arr.values[0], 0), 1);
	ASSERT_EQ(gguf_arr_u64(&m0->arr.values[0], 1), 65535);
	ASSERT_EQ(m0->arr.values[1].arr.elem_type, GGUF_TYPE_STRING);
	ASSERT_EQ(m0->arr.values[1].arr.strs[0].len, 3);
	ASSERT_TRUE(memcmp(m0->arr.values[1].arr.strs[0].data, "abc", 3) == 0);
	ASSERT_EQ(m0->arr.values[1].arr.strs[1].len, 0);
	ASSERT_EQ(m1->arr.n, 1);
	ASSERT_EQ(m1->arr.values[0].arr.elem_type, GGUF_TYPE_FLOAT32);
	ASSERT_EQ(m1->arr.values[0].arr.n, 0);
	ASSERT_TRUE(gguf_get_array(g, "t.value_strs", GGUF_TYPE_STRING) != NULL);
	ASSERT_OK(gguf_get_f32(g, "t.value_f32", &f));
	ASSERT_TRUE(f == 2.5f);

	ASSERT_EQ(gguf_n_tensors(g), ELEMENTSOF(rt_tensors));
	for (size_t i = 0; i < ELEMENTSOF(rt_tensors); i++) {
		const struct rt_tensor *rt = &rt_tensors[i];
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		const uint8_t *p;

		ASSERT_STREQ(t->name, rt->name);
		ASSERT_EQ(t->type, rt->type);
		ASSERT_EQ(t->n_dims, rt->n_dims);
		for (uint32_t d = 0; d < rt->n_dims; d++)
			ASSERT_EQ(t->ne[d], rt->ne[d]);
		ASSERT_EQ(t->n_bytes, rt->n_bytes);
		ASSERT_EQ(t->offset % alignment, 0);
		ASSERT_EQ(((const uint8_t *) t->data - (const uint8_t *) gguf_file_data(g)) %
			      alignment,
			  0);
		p = t->data;
		for (uint64_t k = 0; k < t->n_bytes; k++)
			if (p[k] != rt_byte(i, k))
				TEST_FAIL_("tensor %zu byte %" PRIu64 " differs", i, k);
	}
	return 0;
}

TEST(writer_round_trip)
{
	_cleanup_(rm_tmpdirp) char *dir = make_tmpdir();
	static const uint32_t alignments[] = { 32, 1, 64, 4096 };

	ASSERT_TRUE(dir != NULL);
	for (size_t a = 0; a < ELEMENTSOF(alignments); a++) {
		_cleanup_(gguf_freep) struct gguf *g = NULL;
		struct errmsg e = {};
		char path[4200], tmp[4300];

		snprintf(path, sizeof(path), "%s/rt-%u.gguf", dir, alignments[a]);
		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		if (write_round_trip_file(path, alignments[a]))
			TEST_FAIL_("writing with alignment %u", alignments[a]);
		ASSERT_TRUE(!file_exists(tmp));
		if (gguf_open(path, &g, &e) < 0)
			TEST_FAIL_("%s: %s", path, e.text);
		if (check_round_trip_file(g, alignments[a]))
			TEST_FAIL_("checking alignment %u", alignments[a]);
	}
	return 0;
}

/* Every key of a parsed file copies through gguf_writer_add_value() unchanged, and
 * tensors copied as bytes come out identical. */
TEST(writer_copies_values)
{
	_cleanup_(rm_tmpdirp) char *dir = make_tmpdir();
	const char *sources[] = { NULL, test_shared_path("models/tiny/tiny-qwen2-q8_0.gguf") };
	char path[4200];

	ASSERT_TRUE(dir != NULL);
	snprintf(path, sizeof(path), "%s/src.gguf", dir);
	if (write_round_trip_file(path, 64))
		return 1;
	sources[0] = path;

	for (size_t s = 0; s < ELEMENTSOF(sources); s++) {
		_cleanup_(gguf_freep) struct gguf *src = NULL, *dst = NULL;
		_cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;
		struct errmsg e = {};
		char out[4200];

		if (!file_exists(sources[s]))
			continue;
		if (gguf_open(sources[s], &src, &e) < 0)
			TEST_FAIL_("%s: %s", sources[s], e.text);
		snprintf(out, sizeof(out), "%s/copy-%zu.gguf", dir, s);
		ASSERT_OK(gguf_writer_new(out, &w, &e));
		for (size_t i = 0; i < gguf_n_kv(src); i++) {
			const struct gguf_kv *kv = gguf_kv_at(src, i);
			char key[256];

			memcpy(key, kv->key.data, kv->key.len);
			key[kv->key.len] = 0;
			if (gguf_writer_add_value(w, key, &kv->value, &e) < 0)
				TEST_FAIL_("copying '%s': %s", key, e.text);
		}
		for (size_t i = 0; i < gguf_n_tensors(src); i++) {
			const struct gguf_tensor *t = gguf_tensor_at(src, i);

			ASSERT_OK(
			    gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, &e));
		}
		for (size_t i = 0; i < gguf_n_tensors(src); i++) {
			const struct gguf_tensor *t = gguf_tensor_at(src, i);

			ASSERT_OK(gguf_writer_write(w, t->data, t->n_bytes, &e));
		}
		if (gguf_writer_finish(w, &e) < 0)
			TEST_FAIL_("%s", e.text);
		if (gguf_open(out, &dst, &e) < 0)
			TEST_FAIL_("%s: %s", out, e.text);
		ASSERT_EQ(gguf_n_kv(dst), gguf_n_kv(src));
		ASSERT_EQ(gguf_alignment(dst), gguf_alignment(src));
		for (size_t i = 0; i < gguf_n_kv(src); i++) {
			const struct gguf_kv *a = gguf_kv_at(src, i), *b = gguf_kv_at(dst, i);

			ASSERT_EQ(a->key.len, b->key.len);
			ASSERT_TRUE(memcmp(a->key.data, b->key.data, a->key.len) == 0);
			if (!value_eq(&a->value, &b->value))
				TEST_FAIL_("value %zu differs after the copy", i);
		}
		ASSERT_EQ(gguf_n_tensors(dst), gguf_n_tensors(src));
		for (size_t i = 0; i < gguf_n_tensors(src); i++) {
			const struct gguf_tensor *a = gguf_tensor_at(src, i),
						 *b = gguf_tensor_at(dst, i);

			ASSERT_STREQ(a->name, b->name);
			ASSERT_EQ(a->offset, b->offset);
			ASSERT_EQ(a->n_bytes, b->n_bytes);
			ASSERT_TRUE(memcmp(a->data, b->data, a->n_bytes) == 0);
		}
		/* llama.cpp's layout and ours agree byte for byte on a real file */
		if (s == 1) {
			ASSERT_EQ(gguf_file_size(dst), gguf_file_size(src));
			ASSERT_TRUE(memcmp(gguf_file_data(dst), gguf_file_data(src),
					   gguf_file_size(src)) == 0);
		}
	}
	return 0;
}

TEST(writer_errors)
{
	_cleanup_(rm_tmpdirp) char *dir = make_tmpdir();
	_cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;
	struct errmsg e = {};
	char path[4200], tmp[4300];
	const uint64_t ne[4] = { 33, 2, 1, 1 }, ne_ok[2] = { 32, 2 };
	uint8_t data[200] = {};

	ASSERT_TRUE(dir != NULL);
	snprintf(path, sizeof(path), "%s/bad.gguf", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	ASSERT_OK(gguf_writer_new(path, &w, &e));
	ASSERT_TRUE(file_exists(tmp));
	ASSERT_OK(gguf_writer_add_u32(w, "a", 1, &e));
	ASSERT_ERR(gguf_writer_add_str(w, "a", "again", &e), -EEXIST);
	ASSERT_TRUE(strstr(e.text, "'a'") != NULL);
	ASSERT_ERR(gguf_writer_add_u32(w, "", 1, &e), -EINVAL);
	ASSERT_ERR(gguf_writer_set_alignment(w, 0, &e), -EINVAL);
	ASSERT_ERR(gguf_writer_set_alignment(w, 48, &e), -EINVAL);
	ASSERT_ERR(gguf_writer_add_str(w, "general.alignment", "32", &e), -EINVAL);
	ASSERT_ERR(gguf_writer_add_u64(w, "general.alignment", 32, &e), -EINVAL);
	ASSERT_ERR(gguf_writer_add_array(w, "x", GGUF_TYPE_STRING, data, 1, &e), -EINVAL);
	ASSERT_ERR(gguf_writer_add_value(
		       w, "x",
		       &(struct gguf_value){ .type = GGUF_TYPE_ARRAY,
					     .arr = { .elem_type = GGUF_TYPE_STRING, .n = 1 } },
		       &e),
		   -EINVAL);
	ASSERT_ERR(gguf_writer_add_value(w, "x", &(struct gguf_value){ .type = 13 }, &e), -EINVAL);
	ASSERT_ERR(gguf_writer_add_tensor(w, "t", GGML_TYPE_Q8_0, 2, ne, &e), -EINVAL);
	ASSERT_TRUE(strstr(e.text, "33") != NULL);
	ASSERT_ERR(gguf_writer_add_tensor(w, "t", 4, 2, ne_ok, &e), -EINVAL);
	ASSERT_ERR(gguf_writer_add_tensor(w, "t", GGML_TYPE_F32, 0, ne_ok, &e), -EINVAL);
	ASSERT_ERR(gguf_writer_add_tensor(w, "t", GGML_TYPE_F32, 5, ne, &e), -EINVAL);
	ASSERT_ERR(gguf_writer_add_tensor(w, "", GGML_TYPE_F32, 2, ne_ok, &e), -EINVAL);
	ASSERT_OK(gguf_writer_add_tensor(w, "t", GGML_TYPE_Q8_0, 2, ne_ok, &e)); /* 68 bytes */
	ASSERT_ERR(gguf_writer_add_tensor(w, "t", GGML_TYPE_F32, 2, ne_ok, &e), -EEXIST);
	ASSERT_OK(gguf_writer_add_tensor(w, "u", GGML_TYPE_F32, 1, ne_ok, &e)); /* 128 bytes */
	ASSERT_EQ(gguf_writer_tensor_bytes(w, 0), 68);
	ASSERT_EQ(gguf_writer_tensor_bytes(w, 1), 128);
	ASSERT_EQ(gguf_writer_tensor_bytes(w, 2), 0);
	ASSERT_OK(gguf_writer_write(w, data, 100, &e));
	ASSERT_ERR(gguf_writer_add_u32(w, "late", 1, &e), -EBUSY);
	ASSERT_ERR(gguf_writer_add_tensor(w, "late", GGML_TYPE_F32, 1, ne_ok, &e), -EBUSY);
	ASSERT_ERR(gguf_writer_finish(w, &e), -EINVAL); /* 'u' is incomplete */
	ASSERT_TRUE(strstr(e.text, "'u'") != NULL);
	ASSERT_ERR(gguf_writer_write(w, data, 200, &e), -EINVAL); /* 96 left */
	w = gguf_writer_free(w);
	/* nothing left behind under either name */
	ASSERT_TRUE(!file_exists(path));
	ASSERT_TRUE(!file_exists(tmp));

	ASSERT_ERR(gguf_writer_new("/nonexistent-dir/x.gguf", &w, &e), -ENOENT);
	ASSERT_TRUE(strstr(e.text, "x.gguf.tmp") != NULL);
	return 0;
}

/* A write that fails midway (here: the file size limit, standing in for a full disk) is
 * reported, and neither the final file nor the temporary one is left. */
TEST(writer_write_failure_leaves_no_file)
{
	_cleanup_(rm_tmpdirp) char *dir = make_tmpdir();
	_cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;
	struct errmsg e = {};
	char path[4200], tmp[4300];
	const uint64_t ne[2] = { 1024, 1024 }; /* 4 MiB of F32 */
	static float row[1024];
	struct rlimit old, lim;
	void (*old_handler)(int);
	int r = 0;

	ASSERT_TRUE(dir != NULL);
	snprintf(path, sizeof(path), "%s/big.gguf", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	ASSERT_OK(gguf_writer_new(path, &w, &e));
	ASSERT_OK(gguf_writer_add_str(w, "general.architecture", "llama", &e));
	ASSERT_OK(gguf_writer_add_tensor(w, "big", GGML_TYPE_F32, 2, ne, &e));

	ASSERT_OK(getrlimit(RLIMIT_FSIZE, &old));
	lim = old;
	lim.rlim_cur = 1 << 20;
	old_handler = signal(SIGXFSZ, SIG_IGN);
	ASSERT_OK(setrlimit(RLIMIT_FSIZE, &lim));
	for (int i = 0; i < 1024 && r >= 0; i++)
		r = gguf_writer_write(w, row, sizeof(row), &e);
	(void) setrlimit(RLIMIT_FSIZE, &old);
	signal(SIGXFSZ, old_handler);

	ASSERT_ERR(r, -EFBIG);
	ASSERT_TRUE(strstr(e.text, "big.gguf.tmp") != NULL);
	ASSERT_ERR(gguf_writer_write(w, row, 4, &e), -EFBIG); /* sticky */
	ASSERT_ERR(gguf_writer_finish(w, &e), -EFBIG);
	ASSERT_TRUE(!file_exists(path));
	w = gguf_writer_free(w);
	ASSERT_TRUE(!file_exists(tmp));
	return 0;
}

/* ---- malformed files ---- */

static int read_file(const char *path, uint8_t **ret, size_t *ret_size)
{
	FILE *f = fopen(path, "rb");
	uint8_t *p = NULL;
	size_t n = 0, cap = 0;

	if (!f)
		return -errno;
	for (;;) {
		if (n == cap) {
			uint8_t *q = realloc(p, cap ? 2 * cap : 65536);
			if (!q) {
				free(p);
				fclose(f);
				return -ENOMEM;
			}
			p = q;
			cap = cap ? 2 * cap : 65536;
		}
		size_t k = fread(p + n, 1, cap - n, f);
		if (k == 0)
			break;
		n += k;
	}
	fclose(f);
	*ret = p;
	*ret_size = n;
	return 0;
}

/* Parses an exact-size heap copy, so ASan sees any read past the end. */
static int parse_copy(const uint8_t *data, size_t size, struct errmsg *e)
{
	_cleanup_free_ uint8_t *copy = malloc(size ? size : 1);
	struct gguf *g = NULL;
	int r;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, data, size);
	r = gguf_parse_buffer(copy, size, &g, e);
	if (r >= 0) {
		/* touch everything, as a user would */
		for (size_t i = 0; i < gguf_n_tensors(g); i++) {
			const struct gguf_tensor *t = gguf_tensor_at(g, i);
			volatile uint8_t sink = 0;

			if (t->n_bytes)
				sink ^= ((const uint8_t *) t->data)[0] ^
					((const uint8_t *) t->data)[t->n_bytes - 1];
			(void) sink;
		}
		gguf_free(g);
	}
	return r;
}

TEST(malformed_corpus)
{
	const char *dir = test_source_path("tests/data/gguf-malformed");
	char path[4200], line[1024];
	FILE *f;
	int n = 0, listed = 0;
	DIR *d;
	struct dirent *de;

	snprintf(path, sizeof(path), "%s/EXPECTED", dir);
	f = fopen(path, "r");
	ASSERT_TRUE(f != NULL);
	while (fgets(line, sizeof(line), f)) {
		char *tab, *nl, file[4400];
		_cleanup_free_ uint8_t *data = NULL;
		_cleanup_(gguf_freep) struct gguf *g = NULL;
		size_t size;
		struct errmsg e = {};
		int r;

		if (line[0] == '#' || line[0] == '\n')
			continue;
		nl = strchr(line, '\n');
		if (nl)
			*nl = 0;
		tab = strchr(line, '\t');
		if (!tab || !tab[1]) {
			fclose(f);
			TEST_FAIL_("EXPECTED: bad line '%s'", line);
		}
		*tab = 0;
		snprintf(file, sizeof(file), "%s/%s", dir, line);

		/* through the file API (mmap) ... */
		r = gguf_open(file, &g, &e);
		if (r >= 0 || e.text[0] == 0 || !strstr(e.text, tab + 1)) {
			fclose(f);
			TEST_FAIL_("%s: got %d '%s', expected an error containing '%s'", line, r,
				   e.text, tab + 1);
		}
		/* ... and the buffer API, on an exact-size copy */
		if (read_file(file, &data, &size) < 0) {
			fclose(f);
			TEST_FAIL_("%s: cannot read", file);
		}
		struct errmsg e2 = {};
		r = parse_copy(data, size, &e2);
		if (r >= 0 || strcmp(e.text, e2.text) != 0) {
			fclose(f);
			TEST_FAIL_("%s: buffer parse gave %d '%s'", line, r, e2.text);
		}
		listed++;
	}
	fclose(f);

	/* every .gguf in the directory is listed */
	d = opendir(dir);
	ASSERT_TRUE(d != NULL);
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);

		if (len > 5 && strcmp(de->d_name + len - 5, ".gguf") == 0)
			n++;
	}
	closedir(d);
	ASSERT_EQ(n, listed);
	ASSERT_TRUE(n >= 25);
	printf("  %d files\n", n);
	return 0;
}

/* Cutting a valid file anywhere before the end of its last tensor's data must fail cleanly;
 * cutting only trailing padding may succeed. */
static int check_truncations(const uint8_t *data, size_t size, size_t stride)
{
	_cleanup_(gguf_freep) struct gguf *g = NULL;
	struct errmsg e = {};
	uint64_t data_end = 0, header_end = size;

	ASSERT_OK(gguf_parse_buffer(data, size, &g, &e));
	for (size_t i = 0; i < gguf_n_tensors(g); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		uint64_t start = (uint64_t) ((const uint8_t *) t->data - data);

		data_end = MAX(data_end, start + t->n_bytes);
		header_end = MIN(header_end, start - t->offset);
	}
	ASSERT_TRUE(gguf_n_tensors(g) > 0);

	for (size_t cut = 0; cut < size; cut += cut < header_end + 64 ? 1 : stride) {
		int r;

		e.text[0] = 0;
		r = parse_copy(data, cut, &e);
		if (cut < data_end) {
			if (r >= 0)
				TEST_FAIL_("a cut at %zu of %zu parsed", cut, size);
			if (r != -EBADMSG && r != -EOVERFLOW)
				TEST_FAIL_("a cut at %zu: unexpected error %d", cut, r);
			if (!e.text[0])
				TEST_FAIL_("a cut at %zu: no message", cut);
		} else if (r < 0) {
			TEST_FAIL_("a cut at %zu after all data failed: %s", cut, e.text);
		}
	}
	return 0;
}

TEST(truncations)
{
	_cleanup_(rm_tmpdirp) char *dir = make_tmpdir();
	static const char *const shared[] = { "models/stories260K-lora-attn-r8.gguf",
					      "models/tiny/tiny-llama-q4_k.gguf" };
	char path[4200];
	_cleanup_free_ uint8_t *data = NULL;
	size_t size;

	ASSERT_TRUE(dir != NULL);
	snprintf(path, sizeof(path), "%s/rt.gguf", dir);
	if (write_round_trip_file(path, 32))
		return 1;
	ASSERT_OK(read_file(path, &data, &size));
	if (check_truncations(data, size, 1))
		return 1;

	for (size_t i = 0; i < ELEMENTSOF(shared); i++) {
		_cleanup_free_ uint8_t *d = NULL;

		if (!file_exists(test_shared_path(shared[i])))
			continue;
		ASSERT_OK(read_file(test_shared_path(shared[i]), &d, &size));
		if (check_truncations(d, size, 4099))
			TEST_FAIL_("%s", shared[i]);
	}
	return 0;
}

/* Single-byte corruptions of the header region never crash; most are caught. */
TEST(bit_flips)
{
	_cleanup_(rm_tmpdirp) char *dir = make_tmpdir();
	_cleanup_free_ uint8_t *data = NULL;
	char path[4200];
	size_t size, header_end;
	int failed = 0, total = 0;

	ASSERT_TRUE(dir != NULL);
	snprintf(path, sizeof(path), "%s/rt.gguf", dir);
	if (write_round_trip_file(path, 32))
		return 1;
	ASSERT_OK(read_file(path, &data, &size));
	{
		_cleanup_(gguf_freep) struct gguf *g = NULL;

		ASSERT_OK(gguf_parse_buffer(data, size, &g, NULL));
		header_end = (size_t) ((const uint8_t *) gguf_tensor_at(g, 0)->data - data);
	}
	for (size_t i = 0; i < header_end; i++) {
		static const uint8_t flips[] = { 0x01, 0x80, 0xff };

		for (size_t f = 0; f < ELEMENTSOF(flips); f++) {
			struct errmsg e = {};
			int r;

			data[i] ^= flips[f];
			r = parse_copy(data, size, &e);
			data[i] ^= flips[f];
			if (r < 0 && !e.text[0])
				TEST_FAIL_("flip at %zu: error %d without a message", i, r);
			failed += r < 0;
			total++;
		}
	}
	printf("  %d of %d corruptions rejected\n", failed, total);
	return 0;
}
