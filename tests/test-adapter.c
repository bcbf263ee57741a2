/* SPDX-License-Identifier: MIT */
/*
 * test-adapter: LoRA adapters: SHA-256 against FIPS 180 vectors, the safetensors reader and
 * writer, adapter_config.json semantics (target_modules, rank/alpha patterns, rsLoRA), the
 * shared llama.cpp GGUF LoRA files, PEFT and GGUF round trips through molly-mkadapter's
 * generator, Molly adapter files (round trip, corruption, O_DIRECT, atomic writes), base
 * fingerprints and mismatches, and the malformed corpus in tests/data/adapter-malformed/.
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "basic/sha256.h"
#include "engine/gguf-writer.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "lora/adapter.h"
#include "lora/lora-file.h"
#include "lora/lora-gen.h"
#include "lora/peft.h"
#include "lora/safetensors.h"
#include "test.h"

/* ---- helpers ---- */

static bool file_exists(const char *path)
{
	return access(path, R_OK) == 0;
}

/* The shared models, loaded once (they are read-only). NULL when missing. */
static struct model *shared_model(const char *rel)
{
	static struct {
		const char *rel;
		struct model *m;
	} cache[4];
	const char *path = test_shared_path(rel);
	struct errmsg e = {};

	for (size_t i = 0; i < ELEMENTSOF(cache); i++)
		if (cache[i].rel && strcmp(cache[i].rel, rel) == 0)
			return cache[i].m;
	for (size_t i = 0; i < ELEMENTSOF(cache); i++)
		if (!cache[i].rel) {
			cache[i].rel = rel;
			if (file_exists(path) && model_load(path, &cache[i].m, &e) < 0)
				fprintf(stderr, "  %s: %s\n", path, e.text);
			return cache[i].m;
		}
	return NULL;
}

#define STORIES    "models/stories260K.gguf"
#define STORIES_Q8 "models/stories260K-Q8_0.gguf"
#define TINY       "models/tiny/tiny-llama-f32.gguf"

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void) st, (void) flag, (void) ftw;
	return remove(path);
}

struct tmpdir {
	char path[64];
};

static void tmpdir_done(struct tmpdir *t)
{
	if (t->path[0])
		(void) nftw(t->path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int tmpdir_new(struct tmpdir *t, const char *where)
{
	snprintf(t->path, sizeof(t->path), "%s/test-adapter-XXXXXX", where);
	if (!mkdtemp(t->path)) {
		t->path[0] = 0;
		return -errno;
	}
	return 0;
}

static const char *tmp_join(const struct tmpdir *t, const char *name)
{
	static char buf[8][256];
	static int slot;
	char *out = buf[slot++ % 8];

	snprintf(out, sizeof(buf[0]), "%s/%s", t->path, name);
	return out;
}

static int read_all(const char *path, uint8_t **ret, size_t *ret_size)
{
	struct stat st;
	uint8_t *p;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !(p = malloc((size_t) st.st_size + 1))) {
		close(fd);
		return -EIO;
	}
	if (read(fd, p, (size_t) st.st_size) != st.st_size) {
		close(fd);
		free(p);
		return -EIO;
	}
	close(fd);
	*ret = p;
	*ret_size = (size_t) st.st_size;
	return 0;
}

static int write_all(const char *path, const void *data, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	bool ok;

	if (fd < 0)
		return -errno;
	ok = write(fd, data, n) == (ssize_t) n;
	close(fd);
	return ok ? 0 : -EIO;
}

static int write_str(const char *path, const char *s)
{
	return write_all(path, s, strlen(s));
}

/* Two adapters hold the same matrices: descriptors and bytes. */
static int same_weights(const struct lora_adapter *x, const struct lora_adapter *y)
{
	ASSERT_EQ(x->n_mats, y->n_mats);
	ASSERT_EQ(x->max_rank, y->max_rank);
	for (size_t i = 0; i < x->n_mats; i++) {
		const struct lora_mat *a = &x->mats[i], *b = &y->mats[i];

		ASSERT_EQ(a->layer, b->layer);
		ASSERT_EQ(a->target, b->target);
		ASSERT_EQ(a->rank, b->rank);
		ASSERT_EQ(a->n_in, b->n_in);
		ASSERT_EQ(a->n_out, b->n_out);
		ASSERT_EQ(a->dtype, b->dtype);
		ASSERT_TRUE(a->scale == b->scale);
		for (int m = 0; m < 2; m++) {
			size_t n = lora_mat_bytes(a, m);
			_cleanup_free_ uint8_t *p = malloc(n), *q = malloc(n);

			ASSERT_TRUE(p && q);
			ASSERT_OK(lora_adapter_read(x, i, m, p, n));
			ASSERT_OK(lora_adapter_read(y, i, m, q, n));
			ASSERT_TRUE(memcmp(p, q, n) == 0);
		}
	}
	ASSERT_TRUE(memcmp(x->content_hash, y->content_hash, 32) == 0);
	return 0;
}

/* ---- SHA-256 (FIPS 180-2 appendix B, and the NIST example vectors) ---- */

static int check_sha(const void *msg, size_t n, const char *want)
{
	uint8_t d[32];
	char hex[SHA256_HEX_SIZE];
	struct sha256_ctx c;

	sha256(msg, n, d);
	ASSERT_STREQ(sha256_hex(d, hex), want);
	/* The same bytes fed in uneven pieces. */
	sha256_init(&c);
	for (size_t i = 0, k = 1; i < n; i += k, k = k * 3 % 67 + 1)
		sha256_update(&c, (const uint8_t *) msg + i, MIN(k, n - i));
	sha256_final(&c, d);
	ASSERT_STREQ(sha256_hex(d, hex), want);
	return 0;
}

TEST(sha256_fips180)
{
	static const char two_blocks[] = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
					 "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
	_cleanup_free_ char *million = malloc(1000000);
	uint8_t d[32], back[32];
	char hex[SHA256_HEX_SIZE];

	ASSERT_OK(check_sha("abc", 3,
			    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
	ASSERT_OK(check_sha("", 0,
			    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
	ASSERT_OK(check_sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
			    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
	ASSERT_OK(check_sha(two_blocks, 112,
			    "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"));
	ASSERT_TRUE(million != NULL);
	memset(million, 'a', 1000000);
	ASSERT_OK(check_sha(million, 1000000,
			    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
	/* Lengths around the padding boundary (55, 56, 63, 64 bytes) against each other. */
	for (size_t n = 54; n <= 65; n++) {
		struct sha256_ctx c;
		uint8_t one[32];

		sha256(million, n, d);
		sha256_init(&c);
		sha256_update(&c, million, n / 2);
		sha256_update(&c, million + n / 2, n - n / 2);
		sha256_final(&c, one);
		ASSERT_TRUE(memcmp(d, one, 32) == 0);
	}
	sha256("abc", 3, d);
	ASSERT_OK(sha256_from_hex(sha256_hex(d, hex), back));
	ASSERT_TRUE(memcmp(d, back, 32) == 0);
	ASSERT_ERR(sha256_from_hex("abc", back), -EINVAL);
	return 0;
}

/* ---- safetensors ---- */

static int parse_copy(const uint8_t *data, size_t size, struct errmsg *e)
{
	_cleanup_free_ uint8_t *copy = malloc(size ? size : 1);
	struct safetensors *s = NULL;
	int r;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, data, size);
	r = safetensors_parse_buffer(copy, size, &s, e);
	if (r >= 0) {
		for (size_t i = 0; i < safetensors_n_tensors(s); i++) {
			const struct safetensors_tensor *t = safetensors_tensor_at(s, i);
			volatile uint8_t sink = 0;

			if (t->n_bytes)
				sink ^= ((const uint8_t *) t->data)[0] ^
					((const uint8_t *) t->data)[t->n_bytes - 1];
			(void) sink;
		}
		safetensors_free(s);
	}
	return r;
}

TEST(safetensors_roundtrip)
{
	struct tmpdir t __attribute__((cleanup(tmpdir_done))) = {};
	_cleanup_(safetensors_freep) struct safetensors *s = NULL;
	_cleanup_free_ uint8_t *file = NULL;
	float a[6] = { 1, 2, 3, 4, 5, 6 };
	uint16_t b[3] = { 0x3c00, 0x4000, 0xc000 };
	uint8_t c = 7;
	struct safetensors_tensor in[] = {
		{ .name = "z.first",
		  .dtype = SAFETENSORS_F32,
		  .n_dims = 2,
		  .shape = { 2, 3 },
		  .data = a },
		{ .name = "a/second",
		  .dtype = SAFETENSORS_F16,
		  .n_dims = 1,
		  .shape = { 3 },
		  .data = b },
		{ .name = "scalar", .dtype = SAFETENSORS_U8, .n_dims = 0, .data = &c },
		{ .name = "empty",
		  .dtype = SAFETENSORS_BF16,
		  .n_dims = 2,
		  .shape = { 0, 5 },
		  .data = b },
	};
	const char *meta[] = { "format", "pt", "note", "x\"y" };
	const struct safetensors_tensor *x;
	const char *k, *v;
	struct errmsg e = {};
	size_t size;

	ASSERT_OK(tmpdir_new(&t, "/tmp"));
	ASSERT_OK(safetensors_write(tmp_join(&t, "a.safetensors"), in, 4, meta, 2, &e));
	ASSERT_TRUE(!file_exists(tmp_join(&t, "a.safetensors.tmp")));
	ASSERT_OK(read_all(tmp_join(&t, "a.safetensors"), &file, &size));
	ASSERT_EQ((file[0] | file[1] << 8) % 8, 0); /* header padded to 8 */
	ASSERT_OK(safetensors_open(tmp_join(&t, "a.safetensors"), &s, &e));
	ASSERT_EQ(safetensors_n_tensors(s), 4);
	/* sorted by name */
	ASSERT_STREQ(safetensors_tensor_at(s, 0)->name, "a/second");
	ASSERT_STREQ(safetensors_tensor_at(s, 3)->name, "z.first");
	x = safetensors_find(s, "z.first");
	ASSERT_TRUE(x && x->dtype == SAFETENSORS_F32 && x->n_dims == 2 && x->shape[1] == 3);
	ASSERT_EQ(x->n_bytes, 24);
	ASSERT_TRUE(memcmp(x->data, a, 24) == 0);
	x = safetensors_find(s, "a/second");
	ASSERT_TRUE(x && x->n_elems == 3 && memcmp(x->data, b, 6) == 0);
	x = safetensors_find(s, "scalar");
	ASSERT_TRUE(x && x->n_dims == 0 && x->n_elems == 1 && *(const uint8_t *) x->data == 7);
	x = safetensors_find(s, "empty");
	ASSERT_TRUE(x && x->n_elems == 0 && x->n_bytes == 0);
	ASSERT_TRUE(safetensors_find(s, "nope") == NULL);
	ASSERT_EQ(safetensors_n_metadata(s), 2);
	ASSERT_OK(safetensors_metadata_at(s, 1, &k, &v));
	ASSERT_STREQ(k, "note");
	ASSERT_STREQ(v, "x\"y");
	ASSERT_STREQ(safetensors_metadata_get(s, "format"), "pt");

	/* Every truncation and every single-byte header corruption fails cleanly (ASan checks
	 * the reads; the result may be an error or, for harmless bytes, a parse). */
	for (size_t n = 0; n < size; n++) {
		struct errmsg e2 = {};

		ASSERT_TRUE(parse_copy(file, n, &e2) < 0);
		ASSERT_TRUE(e2.text[0] != 0);
	}
	for (size_t i = 0; i < size - 40; i++) {
		uint8_t saved = file[i];

		file[i] ^= 0x5a;
		(void) parse_copy(file, size, NULL);
		file[i] = saved;
	}
	ASSERT_OK(parse_copy(file, size, NULL));
	return 0;
}

/* ---- adapter_config.json ---- */

static int cfg(const char *json, struct peft_config **c, struct errmsg *e)
{
	return peft_config_parse(json, strlen(json), c, e);
}

TEST(peft_config_semantics)
{
	_cleanup_(peft_config_freep) struct peft_config *c = NULL;
	struct errmsg e = {};
	const char *pat;
	uint32_t r;
	double alpha;

	ASSERT_OK(cfg("{\"r\": 8, \"lora_alpha\": 16, \"target_modules\": [\"q_proj\", "
		      "\"model.layers.2.mlp.down_proj\"], \"rank_pattern\": {\"layers.1.self_attn."
		      "q_proj\": 4, \"q_proj\": 2, \"proj\": 99}, \"alpha_pattern\": {\"^model\\\\."
		      "layers\\\\.3\\\\..*\": 7.5}}",
		      &c, &e));
	/* list: exact key or "."-suffix, never a bare substring */
	ASSERT_EQ(peft_config_targets(c, "model.layers.0.self_attn.q_proj", 0), 1);
	ASSERT_EQ(peft_config_targets(c, "model.layers.0.self_attn.xq_proj", 0), 0);
	ASSERT_EQ(peft_config_targets(c, "model.layers.2.mlp.down_proj", 2), 1);
	ASSERT_EQ(peft_config_targets(c, "model.layers.3.mlp.down_proj", 3), 0);
	/* rank_pattern: first match in file order, (.*\.)?(KEY)$ */
	ASSERT_OK(peft_config_rank(c, "model.layers.1.self_attn.q_proj", &r, &pat));
	ASSERT_EQ(r, 4);
	ASSERT_STREQ(pat, "layers.1.self_attn.q_proj");
	ASSERT_OK(peft_config_rank(c, "model.layers.11.self_attn.q_proj", &r, &pat));
	ASSERT_EQ(r, 2); /* "layers.1." must start at a '.' boundary */
	ASSERT_OK(peft_config_rank(c, "model.layers.0.self_attn.q_proj", &r, &pat));
	ASSERT_EQ(r, 2);
	ASSERT_OK(peft_config_rank(c, "model.layers.0.self_attn.k_proj", &r, &pat));
	ASSERT_EQ(r, 8); /* "proj" does not match "k_proj": whole components only */
	ASSERT_TRUE(pat == NULL);
	/* a '^'-anchored pattern matches only from the start */
	ASSERT_OK(peft_config_alpha(c, "model.layers.3.mlp.up_proj", &alpha, &pat));
	ASSERT_NEAR(alpha, 7.5, 0);
	ASSERT_OK(peft_config_alpha(c, "x.model.layers.3.mlp.up_proj", &alpha, &pat));
	ASSERT_NEAR(alpha, 16, 0);
	c = peft_config_free(c);

	/* string: full regex match; exclude_modules; layers_to_transform is for lists only */
	ASSERT_OK(cfg("{\"target_modules\": \".*layers\\\\.[01]\\\\..*(q|v)_proj\", "
		      "\"exclude_modules\": [\"model.layers.1.self_attn.v_proj\"], "
		      "\"layers_to_transform\": [5]}",
		      &c, &e));
	ASSERT_EQ(c->r, 8); /* PEFT's defaults */
	ASSERT_NEAR(c->lora_alpha, 8, 0);
	ASSERT_EQ(peft_config_targets(c, "model.layers.0.self_attn.q_proj", 0), 1);
	ASSERT_EQ(peft_config_targets(c, "model.layers.1.self_attn.v_proj", 1), 0);
	ASSERT_EQ(peft_config_targets(c, "model.layers.2.self_attn.q_proj", 2), 0);
	ASSERT_EQ(peft_config_targets(c, "model.layers.0.self_attn.q_proj.x", 0), 0);
	c = peft_config_free(c);

	ASSERT_OK(cfg("{\"target_modules\": [\"q_proj\"], \"layers_to_transform\": 1}", &c, &e));
	ASSERT_EQ(peft_config_targets(c, "model.layers.1.self_attn.q_proj", 1), 1);
	ASSERT_EQ(peft_config_targets(c, "model.layers.0.self_attn.q_proj", 0), 0);
	c = peft_config_free(c);
	/* no target_modules: whatever the file has weights for */
	ASSERT_OK(cfg("{\"r\": 4, \"target_modules\": null}", &c, &e));
	ASSERT_EQ(peft_config_targets(c, "model.layers.4.mlp.up_proj", 4), 1);
	c = peft_config_free(c);
	ASSERT_OK(cfg("{\"target_modules\": []}", &c, &e));
	ASSERT_EQ(peft_config_targets(c, "model.layers.4.mlp.up_proj", 4), 0);
	c = peft_config_free(c);
	ASSERT_OK(cfg("{\"target_modules\": \"ALL-LINEAR\", \"fan_in_fan_out\": true}", &c, &e));
	ASSERT_EQ(peft_config_targets(c, "model.layers.4.mlp.up_proj", 4), 1);
	ASSERT_TRUE(c->fan_in_fan_out);
	c = peft_config_free(c);

	/* errors name the key */
	ASSERT_ERR(cfg("{\"r\": -1}", &c, &e), -EBADMSG);
	ASSERT_TRUE(strstr(e.text, "'r' is -1"));
	ASSERT_ERR(cfg("{\"rank_pattern\": {\"(\": 2}}", &c, &e), -EBADMSG);
	ASSERT_TRUE(strstr(e.text, "rank_pattern '(': '(' is not a valid regular expression"));
	ASSERT_ERR(cfg("{\"use_dora\": 1}", &c, &e), -EBADMSG);
	ASSERT_TRUE(strstr(e.text, "'use_dora' is not true or false"));
	ASSERT_ERR(cfg("", &c, &e), -EBADMSG);
	ASSERT_ERR(cfg("{} {}", &c, &e), -EBADMSG);
	/* a catastrophic pattern hits the match limit instead of hanging */
	ASSERT_OK(cfg("{\"target_modules\": \"(a|aa)*(a|aa)*(a|aa)*(a|aa)*(a|aa)*b\"}", &c, &e));
	ASSERT_TRUE(peft_config_targets(
			    c,
			    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
			    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
			    0) <= 0);
	return 0;
}

/* ---- the shared llama.cpp GGUF LoRA files ---- */

TEST(gguf_shared_files)
{
	static const struct {
		const char *file;
		size_t n_mats;
		float scale;
		uint32_t targets;
	} files[] = {
		{ "models/stories260K-lora-attn-r8.gguf", 20, 16.0f / 8, 0x0f },
		{ "models/stories260K-lora-all-r8.gguf", 35, 8.0f / 8, 0x7f },
	};
	struct model *base = shared_model(STORIES);

	if (!base)
		return TEST_SKIP;
	for (size_t f = 0; f < ELEMENTSOF(files); f++) {
		_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
		_cleanup_(gguf_freep) struct gguf *g = NULL;
		const char *path = test_shared_path(files[f].file);
		struct errmsg e = {}, w = {};

		if (!file_exists(path))
			return TEST_SKIP;
		ASSERT_OK(lora_adapter_open(path, &(struct lora_open_opts){ .base = base }, &a, &w,
					    &e));
		ASSERT_STREQ(w.text, "");
		ASSERT_EQ(lora_adapter_format(a), LORA_FORMAT_GGUF);
		ASSERT_EQ(a->n_mats, files[f].n_mats);
		ASSERT_EQ(a->max_rank, 8);
		ASSERT_EQ(lora_adapter_targets(a), files[f].targets);
		ASSERT_OK(lora_adapter_check_base(a, base, &e));
		ASSERT_OK(gguf_open(path, &g, &e));
		for (size_t i = 0; i < a->n_mats; i++) {
			const struct lora_mat *m = &a->mats[i];
			uint32_t n_in, n_out;
			char name[128];

			/* sorted by (layer, target) */
			if (i > 0)
				ASSERT_TRUE(m->layer > m[-1].layer ||
					    (m->layer == m[-1].layer && m->target > m[-1].target));
			ASSERT_EQ(m->rank, 8);
			ASSERT_EQ(m->dtype, GGML_TYPE_F16);
			ASSERT_NEAR(m->scale, files[f].scale, 0);
			ASSERT_OK(lora_base_dims(base, m->layer, m->target, &n_in, &n_out, NULL));
			ASSERT_EQ(m->n_in, n_in);
			ASSERT_EQ(m->n_out, n_out);
			/* the weights: F32 in the file, F16 (round to nearest even) here */
			for (int b = 0; b < 2; b++) {
				size_t n = lora_mat_bytes(m, b);
				_cleanup_free_ uint16_t *got = malloc(n);
				const struct gguf_tensor *t;

				ASSERT_TRUE(got != NULL);
				lora_gen_gguf_name(m->layer, m->target, name, sizeof(name));
				strcat(name, b ? ".lora_b" : ".lora_a");
				t = gguf_find_tensor(g, name);
				ASSERT_TRUE(t && t->type == GGML_TYPE_F32 && t->n_bytes == 2 * n);
				ASSERT_OK(lora_adapter_read(a, i, b, got, n));
				for (size_t k = 0; k < n / 2; k++)
					ASSERT_EQ(got[k],
						  f32_to_fp16(((const float *) t->data)[k]));
			}
		}
		/* F32 kept on request, bit for bit; a Molly file of it holds F16 */
		{
			_cleanup_(lora_adapter_freep) struct lora_adapter *k = NULL, *m = NULL;
			struct tmpdir t __attribute__((cleanup(tmpdir_done))) = {};
			char name[128];

			ASSERT_OK(lora_adapter_open(
				path, &(struct lora_open_opts){ .base = base, .keep_f32 = true },
				&k, NULL, &e));
			ASSERT_EQ(k->mats[0].dtype, GGML_TYPE_F32);
			ASSERT_EQ(lora_mat_bytes(&k->mats[0], false), 4 * 8 * 64);
			for (size_t i = 0; i < k->n_mats; i++)
				for (int b = 0; b < 2; b++) {
					size_t n = lora_mat_bytes(&k->mats[i], b);
					_cleanup_free_ uint8_t *got = malloc(n);
					const struct gguf_tensor *gt;

					lora_gen_gguf_name(k->mats[i].layer, k->mats[i].target,
							   name, sizeof(name));
					strcat(name, b ? ".lora_b" : ".lora_a");
					gt = gguf_find_tensor(g, name);
					ASSERT_TRUE(got && gt && gt->n_bytes == n);
					ASSERT_OK(lora_adapter_read(k, i, b, got, n));
					ASSERT_TRUE(memcmp(got, gt->data, n) == 0);
				}
			ASSERT_TRUE(memcmp(k->content_hash, a->content_hash, 32) != 0);
			ASSERT_OK(tmpdir_new(&t, "/tmp"));
			ASSERT_OK(lora_file_write(k, tmp_join(&t, "k.molly"), NULL, &e));
			ASSERT_OK(lora_adapter_open(tmp_join(&t, "k.molly"), NULL, &m, NULL, &e));
			ASSERT_OK(same_weights(a, m));
		}
		/* BF16 on request */
		a = lora_adapter_free(a);
		ASSERT_OK(lora_adapter_open(
			path, &(struct lora_open_opts){ .base = base, .dtype = GGML_TYPE_BF16 }, &a,
			NULL, &e));
		ASSERT_EQ(a->mats[0].dtype, GGML_TYPE_BF16);
		/* the dtype option is checked */
		a = lora_adapter_free(a);
		ASSERT_ERR(lora_adapter_open(path,
					     &(struct lora_open_opts){ .base = base,
								       .dtype = GGML_TYPE_Q8_0 },
					     &a, NULL, &e),
			   -EINVAL);
		/* public formats need the base */
		ASSERT_ERR(lora_adapter_open(path, NULL, &a, NULL, &e), -EINVAL);
		ASSERT_TRUE(strstr(e.text, "needs its base model"));
	}
	return 0;
}

/* A GGUF LoRA with quantized tensors (convert_lora_to_gguf.py --outtype q8_0 makes these):
 * dequantized, then stored as F16. */
TEST(gguf_quantized_lora)
{
	struct tmpdir t __attribute__((cleanup(tmpdir_done))) = {};
	struct model *base = shared_model(STORIES);
	_cleanup_(gguf_writer_freep) struct gguf_writer *w = NULL;
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
	uint64_t ne_a[2] = { 64, 32 }, ne_b[2] = { 32, 64 };
	float va[32 * 64], vb[64 * 32], back[64];
	uint8_t qa[sizeof(va)], qb[sizeof(vb)];
	int64_t rb_a = quant_row_bytes(GGML_TYPE_Q8_0, 64),
		rb_b = quant_row_bytes(GGML_TYPE_Q8_0, 32);
	uint16_t got[64 * 32];
	struct errmsg e = {};

	if (!base)
		return TEST_SKIP;
	ASSERT_OK(tmpdir_new(&t, "/tmp"));
	lora_gen_values(3, 0, LORA_TARGET_Q, false, 0.1f, va, ELEMENTSOF(va));
	lora_gen_values(3, 0, LORA_TARGET_Q, true, 0.02f, vb, ELEMENTSOF(vb));
	for (int r = 0; r < 32; r++)
		quant_quantize_row(GGML_TYPE_Q8_0, va + 64 * r, qa + rb_a * r, 64);
	for (int r = 0; r < 64; r++)
		quant_quantize_row(GGML_TYPE_Q8_0, vb + 32 * r, qb + rb_b * r, 32);
	ASSERT_OK(gguf_writer_new(tmp_join(&t, "q8.gguf"), &w, &e));
	ASSERT_OK(gguf_writer_add_str(w, "general.architecture", "llama", &e));
	ASSERT_OK(gguf_writer_add_str(w, "general.type", "adapter", &e));
	ASSERT_OK(gguf_writer_add_str(w, "adapter.type", "lora", &e));
	ASSERT_OK(gguf_writer_add_tensor(w, "blk.0.attn_q.weight.lora_a", GGML_TYPE_Q8_0, 2, ne_a,
					 &e));
	ASSERT_OK(gguf_writer_add_tensor(w, "blk.0.attn_q.weight.lora_b", GGML_TYPE_Q8_0, 2, ne_b,
					 &e));
	ASSERT_OK(gguf_writer_write(w, qa, (size_t) rb_a * 32, &e));
	ASSERT_OK(gguf_writer_write(w, qb, (size_t) rb_b * 64, &e));
	ASSERT_OK(gguf_writer_finish(w, &e));
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "q8.gguf"),
				    &(struct lora_open_opts){ .base = base }, &a, NULL, &e));
	ASSERT_EQ(a->n_mats, 1);
	ASSERT_EQ(a->mats[0].rank, 32);
	ASSERT_NEAR(a->mats[0].scale, 1.0, 0); /* no adapter.lora.alpha: scale 1, as llama.cpp */
	ASSERT_OK(lora_adapter_read(a, 0, false, got, 2 * 32 * 64));
	for (int r = 0; r < 32; r++) {
		quant_dequantize_row(GGML_TYPE_Q8_0, qa + rb_a * r, back, 64);
		for (int c = 0; c < 64; c++)
			ASSERT_EQ(got[64 * r + c], f32_to_fp16(back[c]));
	}
	return 0;
}

/* ---- base fingerprints ---- */

TEST(base_fingerprint)
{
	struct model *f32 = shared_model(STORIES), *q8 = shared_model(STORIES_Q8),
		     *tiny = shared_model(TINY);
	uint8_t a[32], b[32], c[32], w1[32], w2[32];
	_cleanup_free_ char *desc = NULL;

	if (!f32 || !q8 || !tiny)
		return TEST_SKIP;
	lora_base_fingerprint(f32, a);
	lora_base_fingerprint(q8, b);
	lora_base_fingerprint(tiny, c);
	/* same names, shapes and tokenizer; other types and context length */
	ASSERT_TRUE(memcmp(a, b, 32) == 0);
	ASSERT_TRUE(memcmp(a, c, 32) != 0);
	lora_base_fingerprint(f32, c);
	ASSERT_TRUE(memcmp(a, c, 32) == 0); /* deterministic */
	/* the weights hash tells the exact files apart */
	lora_base_weights_hash(f32, w1);
	lora_base_weights_hash(q8, w2);
	ASSERT_TRUE(memcmp(w1, w2, 32) != 0);
	desc = lora_base_describe(f32);
	ASSERT_TRUE(desc && strncmp(desc, "llama 5x64 vocab 512 (", 22) == 0);
	return 0;
}

TEST(base_mismatch)
{
	struct tmpdir t __attribute__((cleanup(tmpdir_done))) = {};
	struct model *base = shared_model(STORIES), *tiny = shared_model(TINY),
		     *q8 = shared_model(STORIES_Q8);
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL, *m = NULL;
	_cleanup_free_ char *d1 = NULL, *d2 = NULL;
	const char *path = test_shared_path("models/stories260K-lora-attn-r8.gguf");
	struct errmsg e = {};

	if (!base || !tiny || !q8 || !file_exists(path))
		return TEST_SKIP;
	/* public format on the wrong base: the shapes do not fit, the message says so */
	ASSERT_ERR(lora_adapter_open(path, &(struct lora_open_opts){ .base = tiny }, &a, NULL, &e),
		   -EXDEV);
	ASSERT_TRUE(strstr(e.text, "stories260K-lora-attn-r8.gguf"));
	ASSERT_TRUE(strstr(e.text, "'blk.0.attn_q.weight': lora_a [64, 8]"));
	ASSERT_TRUE(strstr(e.text, "tiny-llama"));

	ASSERT_OK(lora_adapter_open(path, &(struct lora_open_opts){ .base = base }, &a, NULL, &e));
	ASSERT_OK(tmpdir_new(&t, "/tmp"));
	ASSERT_OK(lora_file_write(a, tmp_join(&t, "a.molly"), NULL, &e));
	/* Molly file: the fingerprint decides; both bases are named */
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "a.molly"), NULL, &m, NULL, &e));
	ASSERT_ERR(lora_adapter_check_base(m, tiny, &e), -EXDEV);
	d1 = lora_base_describe(base);
	d2 = lora_base_describe(tiny);
	ASSERT_TRUE(strstr(e.text, d1) && strstr(e.text, d2));
	ASSERT_TRUE(strstr(e.text, "adapter 'stories260K-lora-attn-r8'"));
	ASSERT_OK(lora_adapter_check_base(m, q8, &e));
	m = lora_adapter_free(m);
	ASSERT_ERR(lora_adapter_open(tmp_join(&t, "a.molly"),
				     &(struct lora_open_opts){ .base = tiny }, &m, NULL, &e),
		   -EXDEV);
	ASSERT_TRUE(strstr(e.text, d1) && strstr(e.text, d2));
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "a.molly"), &(struct lora_open_opts){ .base = q8 },
				    &m, NULL, &e));
	return 0;
}

/* ---- PEFT and GGUF round trips ---- */

static int check_generated(const struct lora_adapter *a, uint64_t seed, uint32_t src_dtype,
			   uint32_t rank, float alpha)
{
	for (size_t i = 0; i < a->n_mats; i++) {
		const struct lora_mat *m = &a->mats[i];

		ASSERT_EQ(m->rank, rank);
		ASSERT_NEAR(m->scale, alpha / (float) rank, 0);
		ASSERT_EQ(m->dtype, src_dtype == GGML_TYPE_BF16 ? GGML_TYPE_BF16 : GGML_TYPE_F16);
		for (int b = 0; b < 2; b++) {
			size_t n = lora_mat_bytes(m, b) / 2;
			_cleanup_free_ float *want = malloc(n * sizeof(float));
			_cleanup_free_ uint16_t *got = malloc(n * 2);

			ASSERT_TRUE(want && got);
			lora_gen_values(seed, m->layer, m->target, b,
					b ? 0.02f : 1.0f / sqrtf((float) m->n_in), want, n);
			ASSERT_OK(lora_adapter_read(a, i, b, got, n * 2));
			for (size_t k = 0; k < n; k++) {
				/* F32 → F16 rounds once; F16/BF16 sources are kept bit for bit */
				uint16_t w = src_dtype == GGML_TYPE_BF16 ? f32_to_bf16(want[k])
									 : f32_to_fp16(want[k]);

				ASSERT_EQ(got[k], w);
			}
		}
	}
	return 0;
}

TEST(peft_gguf_molly_roundtrip)
{
	struct tmpdir t __attribute__((cleanup(tmpdir_done))) = {};
	struct model *base = shared_model(STORIES);
	_cleanup_(lora_adapter_freep) struct lora_adapter *p = NULL, *g = NULL, *m = NULL,
							  *p16 = NULL, *pb = NULL, *m2 = NULL;
	char *domains[] = { "stories", "kids" }, *exemplars[] = { "Once upon a time", "The cat" };
	struct lora_adapter_meta meta = { .name = "tales",
					  .domains = domains,
					  .n_domains = 2,
					  .exemplars = exemplars,
					  .n_exemplars = 2 };
	struct lora_gen_opts o = { .base = base,
				   .rank = 4,
				   .alpha = 8,
				   .seed = 42,
				   .targets = 0x7f,
				   .format = LORA_FORMAT_PEFT };
	uint8_t wh[32] = { 1, 2, 3 };
	struct errmsg e = {}, w = {};

	if (!base)
		return TEST_SKIP;
	ASSERT_OK(tmpdir_new(&t, "/tmp"));
	ASSERT_OK(lora_gen_write(tmp_join(&t, "peft"), &o, &e));
	ASSERT_TRUE(file_exists(tmp_join(&t, "peft/adapter_config.json")));
	ASSERT_TRUE(!file_exists(tmp_join(&t, "peft/adapter_model.safetensors.tmp")));
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "peft"), &(struct lora_open_opts){ .base = base },
				    &p, &w, &e));
	ASSERT_STREQ(w.text, "");
	ASSERT_EQ(lora_adapter_format(p), LORA_FORMAT_PEFT);
	ASSERT_STREQ(p->meta.name, "peft");
	ASSERT_EQ(p->n_mats, 35);
	ASSERT_OK(check_generated(p, 42, GGML_TYPE_F32, 4, 8));
	/* a file inside the directory stands for it */
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "peft/adapter_config.json"),
				    &(struct lora_open_opts){ .base = base, .name = "x" }, &m, NULL,
				    &e));
	ASSERT_STREQ(m->meta.name, "x");
	m = lora_adapter_free(m);

	/* the same weights as GGUF LoRA: the same content hash */
	o.format = LORA_FORMAT_GGUF;
	ASSERT_OK(lora_gen_write(tmp_join(&t, "a.gguf"), &o, &e));
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "a.gguf"),
				    &(struct lora_open_opts){ .base = base }, &g, NULL, &e));
	ASSERT_OK(same_weights(p, g));

	/* F16 and BF16 sources are kept as stored */
	o.format = LORA_FORMAT_PEFT;
	o.dtype = GGML_TYPE_F16;
	ASSERT_OK(lora_gen_write(tmp_join(&t, "p16"), &o, &e));
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "p16"), &(struct lora_open_opts){ .base = base },
				    &p16, NULL, &e));
	ASSERT_OK(check_generated(p16, 42, GGML_TYPE_F16, 4, 8));
	ASSERT_TRUE(memcmp(p16->content_hash, p->content_hash, 32) == 0);
	o.dtype = GGML_TYPE_BF16;
	ASSERT_OK(lora_gen_write(tmp_join(&t, "pbf16"), &o, &e));
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "pbf16"), &(struct lora_open_opts){ .base = base },
				    &pb, NULL, &e));
	ASSERT_OK(check_generated(pb, 42, GGML_TYPE_BF16, 4, 8));
	ASSERT_TRUE(memcmp(pb->content_hash, p->content_hash, 32) != 0);

	/* import into a Molly file and back: the same matrices, hashes, metadata */
	ASSERT_OK(lora_file_write(
		p, tmp_join(&t, "a.molly"),
		&(struct lora_write_opts){ .meta = &meta, .base_weights_hash = wh }, &e));
	ASSERT_TRUE(!file_exists(tmp_join(&t, "a.molly.tmp")));
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "a.molly"),
				    &(struct lora_open_opts){ .base = base }, &m, NULL, &e));
	ASSERT_EQ(lora_adapter_format(m), LORA_FORMAT_MOLLY);
	ASSERT_OK(same_weights(p, m));
	ASSERT_TRUE(memcmp(m->base_fingerprint, p->base_fingerprint, 32) == 0);
	ASSERT_TRUE(m->has_base_weights_hash && memcmp(m->base_weights_hash, wh, 32) == 0);
	ASSERT_STREQ(m->base_description, p->base_description);
	ASSERT_STREQ(m->meta.name, "tales");
	ASSERT_EQ(m->meta.n_domains, 2);
	ASSERT_STREQ(m->meta.domains[1], "kids");
	ASSERT_EQ(m->meta.n_exemplars, 2);
	ASSERT_STREQ(m->meta.exemplars[0], "Once upon a time");
	for (size_t i = 0; i < m->n_mats; i++) {
		uint64_t off_a, off_b;

		ASSERT_OK(lora_file_tensor_info(m, i, false, &off_a, NULL));
		ASSERT_OK(lora_file_tensor_info(m, i, true, &off_b, NULL));
		ASSERT_EQ(off_a % 4096, 0);
		ASSERT_EQ(off_b % 4096, 0);
	}
	ASSERT_ERR(lora_file_tensor_info(p, 0, false, NULL, NULL), -ENOENT);
	/* a Molly file converted to BF16: new weights, new content hash, same shapes */
	ASSERT_OK(lora_file_write(m, tmp_join(&t, "b.molly"),
				  &(struct lora_write_opts){ .dtype = GGML_TYPE_BF16 }, &e));
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "b.molly"), NULL, &m2, NULL, &e));
	ASSERT_EQ(m2->mats[0].dtype, GGML_TYPE_BF16);
	ASSERT_TRUE(memcmp(m2->content_hash, m->content_hash, 32) != 0);
	ASSERT_STREQ(m2->meta.name, "tales");
	ASSERT_TRUE(m2->has_base_weights_hash);

	/* the generator is deterministic in the seed */
	{
		_cleanup_free_ uint8_t *x = NULL, *y = NULL, *z = NULL;
		size_t nx, ny, nz;

		o.dtype = GGML_TYPE_F32;
		o.format = LORA_FORMAT_GGUF;
		ASSERT_OK(lora_gen_write(tmp_join(&t, "b.gguf"), &o, &e));
		o.seed = 43;
		ASSERT_OK(lora_gen_write(tmp_join(&t, "c.gguf"), &o, &e));
		ASSERT_OK(read_all(tmp_join(&t, "a.gguf"), &x, &nx));
		ASSERT_OK(read_all(tmp_join(&t, "b.gguf"), &y, &ny));
		ASSERT_OK(read_all(tmp_join(&t, "c.gguf"), &z, &nz));
		ASSERT_TRUE(nx == ny && memcmp(x, y, nx) == 0);
		ASSERT_TRUE(nx == nz && memcmp(x, z, nx) != 0);
	}
	return 0;
}

/* A PEFT directory with per-module ranks, written by hand. */
static int write_peft_dir(const struct tmpdir *t, const char *dir, const char *config,
			  const uint32_t *ranks, uint32_t targets)
{
	struct model *base = shared_model(STORIES);
	struct safetensors_tensor st[2 * 5 * LORA_TARGET_COUNT_] = {};
	char path[256];
	size_t n = 0;
	struct errmsg e = {};
	int r;

	snprintf(path, sizeof(path), "%s/%s", t->path, dir);
	if (mkdir(path, 0755) < 0)
		return -errno;
	snprintf(path, sizeof(path), "%s/%s/adapter_config.json", t->path, dir);
	r = write_str(path, config);
	if (r < 0)
		return r;
	for (uint32_t l = 0; l < 5; l++)
		for (int tg = 0; tg < LORA_TARGET_COUNT_; tg++) {
			uint32_t n_in, n_out, rank = ranks[l * LORA_TARGET_COUNT_ + tg];
			char key[128];

			if (!(targets & (1u << tg)))
				continue;
			lora_base_dims(base, l, tg, &n_in, &n_out, NULL);
			lora_gen_peft_key(l, tg, key, sizeof(key));
			for (int b = 0; b < 2; b++) {
				size_t k = (size_t) rank * (b ? n_out : n_in);
				float *v = malloc(k * sizeof(float));

				if (!v)
					return -ENOMEM;
				lora_gen_values(7, l, tg, b, 0.05f, v, k);
				if (asprintf(&st[n].name, "base_model.model.%s.lora_%c.weight", key,
					     b ? 'B' : 'A') < 0)
					return -ENOMEM;
				st[n].dtype = SAFETENSORS_F32;
				st[n].n_dims = 2;
				st[n].shape[0] = b ? n_out : rank;
				st[n].shape[1] = b ? rank : n_in;
				st[n].data = v;
				n++;
			}
		}
	snprintf(path, sizeof(path), "%s/%s/adapter_model.safetensors", t->path, dir);
	r = safetensors_write(path, st, n, NULL, 0, &e);
	for (size_t i = 0; i < n; i++) {
		free(st[i].name);
		free((void *) st[i].data);
	}
	return r;
}

static const struct lora_mat *find_mat(const struct lora_adapter *a, uint32_t l, enum lora_target t)
{
	for (size_t i = 0; i < a->n_mats; i++)
		if (a->mats[i].layer == l && a->mats[i].target == t)
			return &a->mats[i];
	return NULL;
}

TEST(peft_patterns_and_scales)
{
	struct tmpdir t __attribute__((cleanup(tmpdir_done))) = {};
	struct model *base = shared_model(STORIES);
	_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL, *b = NULL, *c = NULL;
	uint32_t ranks[5 * LORA_TARGET_COUNT_];
	struct errmsg e = {}, w = {};

	if (!base)
		return TEST_SKIP;
	ASSERT_OK(tmpdir_new(&t, "/tmp"));
	for (size_t i = 0; i < ELEMENTSOF(ranks); i++)
		ranks[i] = 8;
	ranks[1 * LORA_TARGET_COUNT_ + LORA_TARGET_Q] = 4; /* layer 1 q */
	for (uint32_t l = 0; l < 5; l++)
		ranks[l * LORA_TARGET_COUNT_ + LORA_TARGET_V] = 2; /* every v */
	ASSERT_OK(write_peft_dir(
		&t, "pat",
		"{\"peft_type\": \"LORA\", \"r\": 8, \"lora_alpha\": 16, "
		"\"target_modules\": [\"q_proj\", \"v_proj\", \"down_proj\"], "
		"\"rank_pattern\": {\"model.layers.1.self_attn.q_proj\": 4, "
		"\"v_proj\": 2}, \"alpha_pattern\": {\"layers\\\\.[34]\\\\.mlp"
		"\\\\.down_proj\": 4, \"down_proj\": 32}, \"fan_in_fan_out\": true}",
		ranks, 1u << LORA_TARGET_Q | 1u << LORA_TARGET_V | 1u << LORA_TARGET_DOWN));
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "pat"), &(struct lora_open_opts){ .base = base },
				    &a, &w, &e));
	ASSERT_TRUE(strstr(w.text, "fan_in_fan_out is ignored"));
	ASSERT_EQ(a->n_mats, 15);
	ASSERT_EQ(a->max_rank, 8);
	ASSERT_NEAR(find_mat(a, 0, LORA_TARGET_Q)->scale, 16.0 / 8, 0);
	ASSERT_EQ(find_mat(a, 1, LORA_TARGET_Q)->rank, 4);
	ASSERT_NEAR(find_mat(a, 1, LORA_TARGET_Q)->scale, 16.0 / 4, 0);
	ASSERT_EQ(find_mat(a, 3, LORA_TARGET_V)->rank, 2);
	ASSERT_NEAR(find_mat(a, 3, LORA_TARGET_V)->scale, 16.0 / 2, 0);
	ASSERT_NEAR(find_mat(a, 3, LORA_TARGET_DOWN)->scale, 4.0 / 8, 0);
	ASSERT_NEAR(find_mat(a, 0, LORA_TARGET_DOWN)->scale, 32.0 / 8, 0);

	/* rsLoRA: alpha / sqrt(r) */
	ASSERT_OK(write_peft_dir(
		&t, "rs",
		"{\"r\": 8, \"lora_alpha\": 16, \"use_rslora\": true, "
		"\"target_modules\": \"model\\\\.layers\\\\.\\\\d+\\\\.self_attn\\\\."
		"(q|v)_proj\", \"rank_pattern\": {\"v_proj\": 2, "
		"\"model.layers.1.self_attn.q_proj\": 4}}",
		ranks, 1u << LORA_TARGET_Q | 1u << LORA_TARGET_V));
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "rs"), &(struct lora_open_opts){ .base = base },
				    &b, &w, &e));
	ASSERT_NEAR(find_mat(b, 0, LORA_TARGET_Q)->scale, (float) (16 / sqrt(8.0)), 0);
	ASSERT_NEAR(find_mat(b, 1, LORA_TARGET_Q)->scale, (float) (16 / sqrt(4.0)), 0);
	ASSERT_NEAR(find_mat(b, 2, LORA_TARGET_V)->scale, (float) (16 / sqrt(2.0)), 0);
	/* the effective scales are part of the content hash */
	ASSERT_TRUE(memcmp(a->content_hash, b->content_hash, 32) != 0);

	/* unsupported tensors: an error naming them, or warnings when skipped */
	for (size_t i = 0; i < ELEMENTSOF(ranks); i++)
		ranks[i] = 8;
	ASSERT_OK(write_peft_dir(&t, "skip",
				 "{\"r\": 8, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\", "
				 "\"v_proj\"], \"modules_to_save\": [\"lm_head\"]}",
				 ranks,
				 1u << LORA_TARGET_Q | 1u << LORA_TARGET_V | 1u << LORA_TARGET_O));
	ASSERT_ERR(lora_adapter_open(tmp_join(&t, "skip"), &(struct lora_open_opts){ .base = base },
				     &c, &w, &e),
		   -EOPNOTSUPP);
	ASSERT_TRUE(strstr(e.text, "modules_to_save ('lm_head')"));
	ASSERT_OK(lora_adapter_open(
		tmp_join(&t, "skip"),
		&(struct lora_open_opts){ .base = base, .skip_unsupported = true }, &c, &w, &e));
	ASSERT_TRUE(strstr(w.text, "ignored modules_to_save"));
	ASSERT_TRUE(strstr(w.text, "o_proj.lora_A.weight': module not in target_modules"));
	ASSERT_EQ(c->n_mats, 10);
	ASSERT_EQ(lora_adapter_targets(c), 1u << LORA_TARGET_Q | 1u << LORA_TARGET_V);
	return 0;
}

/* ---- Molly files: corruption, O_DIRECT, atomic writes ---- */

static int molly_fixture(const struct tmpdir *t, const char *name, struct lora_adapter **ret)
{
	struct model *base = shared_model(STORIES);
	struct lora_gen_opts o = {
		.base = base, .rank = 3, .seed = 5, .targets = 0x45, .format = LORA_FORMAT_GGUF
	};
	_cleanup_(lora_adapter_freep) struct lora_adapter *g = NULL;
	struct errmsg e = {};
	int r;

	if ((r = lora_gen_write(tmp_join(t, "fixture.gguf"), &o, &e)) < 0 ||
	    (r = lora_adapter_open(tmp_join(t, "fixture.gguf"),
				   &(struct lora_open_opts){ .base = base }, &g, NULL, &e)) < 0 ||
	    (r = lora_file_write(g, tmp_join(t, name), NULL, &e)) < 0) {
		fprintf(stderr, "  fixture: %s\n", e.text);
		return r;
	}
	if (ret)
		*ret = TAKE_PTR(g);
	return 0;
}

TEST(molly_corruption)
{
	struct tmpdir t __attribute__((cleanup(tmpdir_done))) = {};
	_cleanup_(lora_adapter_freep) struct lora_adapter *src = NULL, *a = NULL;
	_cleanup_free_ uint8_t *file = NULL;
	struct errmsg e = {};
	uint64_t off;
	size_t size;

	if (!shared_model(STORIES))
		return TEST_SKIP;
	ASSERT_OK(tmpdir_new(&t, "/tmp"));
	ASSERT_OK(molly_fixture(&t, "a.molly", &src));
	ASSERT_OK(read_all(tmp_join(&t, "a.molly"), &file, &size));
	ASSERT_EQ(size % 4096, 0);
	ASSERT_TRUE(memcmp(file, LORA_FILE_MAGIC, 8) == 0);

	/* a flipped bit in the header: checksum */
	file[300] ^= 1;
	ASSERT_OK(write_all(tmp_join(&t, "b.molly"), file, size));
	ASSERT_ERR(lora_adapter_open(tmp_join(&t, "b.molly"), NULL, &a, NULL, &e), -EBADMSG);
	ASSERT_TRUE(strstr(e.text, "header checksum mismatch"));
	file[300] ^= 1;
	/* every truncation is refused at open */
	for (size_t n = 0; n < size; n += n < 512 ? 37 : 4096 - 1) {
		ASSERT_OK(write_all(tmp_join(&t, "b.molly"), file, n));
		ASSERT_TRUE(lora_adapter_open(tmp_join(&t, "b.molly"), NULL, &a, NULL, &e) < 0);
	}
	/* a flipped bit in a tensor: open works (the header is fine), that read fails */
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "a.molly"), NULL, &a, NULL, &e));
	ASSERT_OK(lora_file_tensor_info(a, 1, true, &off, NULL));
	a = lora_adapter_free(a);
	file[off + 3] ^= 0x10;
	ASSERT_OK(write_all(tmp_join(&t, "b.molly"), file, size));
	ASSERT_OK(lora_adapter_open(tmp_join(&t, "b.molly"), NULL, &a, NULL, &e));
	for (size_t i = 0; i < a->n_mats; i++)
		for (int b = 0; b < 2; b++) {
			size_t n = lora_mat_bytes(&a->mats[i], b);
			_cleanup_free_ uint8_t *buf = malloc(n);

			ASSERT_ERR(lora_adapter_read(a, i, b, buf, n), i == 1 && b ? -EBADMSG : 0);
		}
	/* the wrong size is refused */
	ASSERT_ERR(lora_adapter_read(a, 0, false, file, 3), -EINVAL);
	ASSERT_ERR(lora_adapter_read(a, a->n_mats, false, file, 3), -ERANGE);
	return 0;
}

TEST(molly_odirect)
{
	struct tmpdir t __attribute__((cleanup(tmpdir_done))) = {};
	static const char *const where[] = { "/dev/shm", "/tmp", "." };
	_cleanup_(lora_adapter_freep) struct lora_adapter *src = NULL;

	if (!shared_model(STORIES))
		return TEST_SKIP;
	for (size_t k = 0; k < ELEMENTSOF(where); k++) {
		struct tmpdir d __attribute__((cleanup(tmpdir_done))) = {};
		_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
		struct errmsg e = {};

		if (tmpdir_new(&d, where[k]) < 0)
			continue;
		if (!src)
			ASSERT_OK(molly_fixture(&d, "a.molly", &src));
		else
			ASSERT_OK(lora_file_write(src, tmp_join(&d, "a.molly"), NULL, &e));
		ASSERT_OK(lora_adapter_open(tmp_join(&d, "a.molly"),
					    &(struct lora_open_opts){ .direct_io = true }, &a, NULL,
					    &e));
		printf("  %s: %s\n", where[k],
		       lora_adapter_direct_io(a) ? "O_DIRECT"
						 : "filesystem refused O_DIRECT: read buffered");
		ASSERT_OK(same_weights(src, a));
		/* an aligned destination of a multiple of 4096 bytes is read into directly */
		for (size_t i = 0; i < a->n_mats; i++) {
			size_t n = lora_mat_bytes(&a->mats[i], true);
			void *buf = NULL;

			ASSERT_EQ(posix_memalign(&buf, 4096, ALIGN_UP(n, 4096)), 0);
			ASSERT_OK(lora_adapter_read(a, i, true, buf, n));
			free(buf);
		}
	}
	(void) t;
	return 0;
}

TEST(atomic_write_failures)
{
	struct tmpdir t __attribute__((cleanup(tmpdir_done))) = {};
	_cleanup_(lora_adapter_freep) struct lora_adapter *src = NULL;
	struct rlimit old, small = { 8192, 8192 };
	struct errmsg e = {};
	DIR *d;
	struct dirent *de;
	int r, n_files = 0;

	if (!shared_model(STORIES))
		return TEST_SKIP;
	ASSERT_OK(tmpdir_new(&t, "/tmp"));
	ASSERT_OK(molly_fixture(&t, "a.molly", &src));
	ASSERT_OK(remove(tmp_join(&t, "a.molly")));
	ASSERT_OK(remove(tmp_join(&t, "fixture.gguf")));
	/* no directory */
	ASSERT_TRUE(lora_file_write(src, tmp_join(&t, "nodir/a.molly"), NULL, &e) < 0);
	ASSERT_TRUE(strstr(e.text, "cannot create"));
	/* a file size limit stands in for a full disk: the write fails, nothing is left */
	ASSERT_OK(getrlimit(RLIMIT_FSIZE, &old));
	signal(SIGXFSZ, SIG_IGN);
	ASSERT_OK(setrlimit(RLIMIT_FSIZE, &small));
	r = lora_file_write(src, tmp_join(&t, "big.molly"), NULL, &e);
	(void) setrlimit(RLIMIT_FSIZE, &old);
	signal(SIGXFSZ, SIG_DFL);
	ASSERT_TRUE(r == -EFBIG || r == -ENOSPC);
	ASSERT_TRUE(strstr(e.text, "big.molly"));
	d = opendir(t.path);
	ASSERT_TRUE(d != NULL);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n_files++;
	closedir(d);
	ASSERT_EQ(n_files, 0);
	/* too much metadata */
	{
		char *big = malloc(LORA_FILE_MAX_HEADER + 1);
		struct lora_adapter_meta meta = { .name = big };

		ASSERT_TRUE(big != NULL);
		memset(big, 'x', LORA_FILE_MAX_HEADER);
		big[LORA_FILE_MAX_HEADER] = 0;
		r = lora_file_write(src, tmp_join(&t, "meta.molly"),
				    &(struct lora_write_opts){ .meta = &meta }, &e);
		free(big);
		ASSERT_ERR(r, -E2BIG);
		ASSERT_TRUE(strstr(e.text, "metadata too large"));
	}
	return 0;
}

/* ---- the malformed corpus ---- */

TEST(malformed_corpus)
{
	const char *dir = test_source_path("tests/data/adapter-malformed");
	struct model *base = shared_model(STORIES);
	char path[4200], line[1024];
	int n = 0;
	FILE *f;

	if (!base)
		return TEST_SKIP;
	snprintf(path, sizeof(path), "%s/EXPECTED", dir);
	f = fopen(path, "re");
	ASSERT_TRUE(f != NULL);
	while (fgets(line, sizeof(line), f)) {
		_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
		char *tab, *nl, entry[4400];
		struct errmsg e = {}, w = {};
		int r;

		if (line[0] == '#' || line[0] == '\n')
			continue;
		if ((nl = strchr(line, '\n')))
			*nl = 0;
		tab = strchr(line, '\t');
		if (!tab || !tab[1]) {
			fclose(f);
			TEST_FAIL_("EXPECTED: bad line '%s'", line);
		}
		*tab = 0;
		snprintf(entry, sizeof(entry), "%s/%s", dir, line);
		r = lora_adapter_open(entry, &(struct lora_open_opts){ .base = base }, &a, &w, &e);
		if (r >= 0 || !strstr(e.text, tab + 1) || !strstr(e.text, line)) {
			fclose(f);
			TEST_FAIL_("%s: got %d '%s', expected an error containing '%s'", line, r,
				   e.text, tab + 1);
		}
		/* the safetensors files also through the buffer parser, on exact-size copies */
		if (strncmp(line, "st-", 3) == 0) {
			_cleanup_free_ uint8_t *data = NULL;
			size_t size;

			snprintf(entry, sizeof(entry), "%s/%s/adapter_model.safetensors", dir,
				 line);
			ASSERT_OK(read_all(entry, &data, &size));
			ASSERT_TRUE(parse_copy(data, size, NULL) < 0);
		}
		n++;
	}
	fclose(f);
	ASSERT_TRUE(n >= 100);
	return 0;
}

TEST(targets_and_names)
{
	uint32_t mask;
	enum lora_target t;
	char buf[64];
	struct errmsg e = {};

	ASSERT_OK(lora_targets_parse("q,v,ffn_down,up_proj", &mask, &e));
	ASSERT_EQ(mask, 1u << LORA_TARGET_Q | 1u << LORA_TARGET_V | 1u << LORA_TARGET_DOWN |
				1u << LORA_TARGET_UP);
	ASSERT_STREQ(lora_targets_format(mask, buf, sizeof(buf)), "q,v,up,down");
	ASSERT_OK(lora_targets_parse("all", &mask, &e));
	ASSERT_EQ(mask, 0x7f);
	ASSERT_ERR(lora_targets_parse("q,lm_head", &mask, &e), -EINVAL);
	ASSERT_TRUE(strstr(e.text, "'lm_head'"));
	ASSERT_ERR(lora_targets_parse("", &mask, &e), -EINVAL);
	for (int i = 0; i < LORA_TARGET_COUNT_; i++) {
		ASSERT_OK(lora_target_from_name(lora_target_name(i), &t));
		ASSERT_EQ(t, i);
	}
	ASSERT_ERR(lora_target_from_name("qq", &t), -EINVAL);
	ASSERT_TRUE(lora_target_name(LORA_TARGET_COUNT_) == NULL);
	ASSERT_STREQ(lora_format_name(LORA_FORMAT_MOLLY), "molly");
	return 0;
}
