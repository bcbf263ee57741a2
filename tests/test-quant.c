/* SPDX-License-Identifier: MIT */
/*
 * test-quant: tensor types and kernels (daemon/engine/quant.c, kernels-*.c).
 *
 *   - fp16/bf16 conversions: all 65536 bit patterns both ways, every rounding midpoint, and
 *     the CPU's F16C instructions where it has them;
 *   - the type table and the SIMD level switch;
 *   - activation quantizers: ggml's known answers (ties to even, Q8_K's first largest
 *     value), and bit-identity of every SIMD level with the scalar code;
 *   - dequantization known answers for hand-built blocks of every type, read unaligned;
 *   - dot products at every SIMD level the CPU has (AVX-512 included when present) against a
 *     float64 dot of the dequantized rows and against the scalar kernels, within bounds
 *     derived below;
 *   - the weight quantizers: per-element error bounds and overall quality;
 *   - the shared tiny models: every 2-D tensor of each quantized file against the F32 file
 *     (per-element bounds per type, and bit-identity with our quantizers, which implement
 *     the same reference algorithms as llama-quantize).
 *
 * Random inputs come from a seed drawn from /dev/urandom (MOLLY_TEST_SEED=N reproduces a
 * run); every failure message starts with it.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "basic/macro.h"
#include "engine/gguf.h"
#include "engine/quant.h"
#include "test.h"

/* ---- seeded randomness ---- */

static uint64_t test_seed;
static uint64_t rng_state;

/* Every check that depends on random input names the seed. */
#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "  [MOLLY_TEST_SEED=%" PRIu64 "] ", test_seed);          \
			TEST_FAIL_(__VA_ARGS__);                                                   \
		}                                                                                  \
	} while (0)

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Restarts the stream for one test case, so MOLLY_TEST_SEED plus the case name replays it. */
static void rng_start(const char *name)
{
	if (!test_seed) {
		const char *env = getenv("MOLLY_TEST_SEED");
		int fd;

		if (env)
			test_seed = strtoull(env, NULL, 0);
		if (!test_seed && (fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC)) >= 0) {
			if (read(fd, &test_seed, sizeof(test_seed)) != sizeof(test_seed))
				test_seed = 0;
			close(fd);
		}
		if (!test_seed)
			test_seed = (uint64_t) time(NULL) ^ ((uint64_t) getpid() << 32);
	}
	rng_state = test_seed;
	for (const char *p = name; *p; p++)
		rng_state = (rng_state ^ (uint8_t) *p) * 0x100000001b3ull;
}

static uint64_t rng_u64(void)
{
	return splitmix64(&rng_state);
}

static uint32_t rng_below(uint32_t n)
{
	return (uint32_t) (rng_u64() % n);
}

static double rng_uniform(void) /* (0, 1) */
{
	return ((double) (rng_u64() >> 11) + 0.5) * 0x1p-53;
}

static float rng_normal(void)
{
	return (float) (sqrt(-2.0 * log(rng_uniform())) * cos(6.283185307179586 * rng_uniform()));
}

static float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

/* ---- SIMD levels ---- */

#define MAX_LEVELS 16

/* The levels that run here (quant.c: the CPU has them and they are proven), scalar first;
 * restores the CPU's own level before returning. */
static size_t available_levels(const char *out[static MAX_LEVELS])
{
	const char *all[MAX_LEVELS];
	size_t n_all = quant_simd_levels(all, MAX_LEVELS), n = 0;
	char cpu_level[32];

	snprintf(cpu_level, sizeof(cpu_level), "%s", quant_simd_level());
	for (size_t i = n_all; i-- > 0;)
		if (quant_force_simd_level(all[i]) == 0)
			out[n++] = all[i];
	(void) quant_force_simd_level(cpu_level);
	return n;
}

/* ---- type helpers ---- */

static size_t row_bytes(uint32_t type, int64_t n)
{
	int64_t r = quant_row_bytes(type, n);

	return r < 0 ? 0 : (size_t) r;
}

static bool is_float_type(uint32_t t)
{
	return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16;
}

static void put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t) v;
	p[1] = (uint8_t) (v >> 8);
}

static uint16_t get_u16(const uint8_t *p)
{
	return (uint16_t) (p[0] | p[1] << 8);
}

/* Block field offsets (ggml layouts, see quant.h) the tests poke at. */
#define Q4_K_D 0
#define Q4_K_DMIN 2
#define Q4_K_SCALES 4
#define Q4_K_QS 16
#define Q6_K_QL 0
#define Q6_K_QH 128
#define Q6_K_SCALES 192
#define Q6_K_D 208

/* ==== fp16 / bf16 ==== */

/* The value of half h computed independently of quant.c (ldexp on the fields). */
static double half_value(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);

	return (h & 0x8000) ? -v : v;
}

TEST(fp16_exhaustive)
{
	for (uint32_t h = 0; h < 0x10000; h++) {
		const float f = fp16_to_f32((uint16_t) h);
		const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;

		if (e == 0x1f && m == 0) {
			ASSERT_TRUE(isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0));
			ASSERT_EQ(f32_to_fp16(f), h);
		} else if (e == 0x1f) {
			/* NaN: the payload moves to the top of the f32 mantissa; converting back
			 * keeps it and sets the quiet bit (as F16C does) */
			ASSERT_TRUE(isnan(f));
			ASSERT_EQ((f32_bits(f) >> 13) & 0x3ff, m);
			ASSERT_EQ(f32_to_fp16(f), h | 0x200);
		} else {
			ASSERT_TRUE((double) f == half_value((uint16_t) h));
			ASSERT_TRUE((signbit(f) != 0) == ((h & 0x8000) != 0)); /* -0 too */
			ASSERT_EQ(f32_to_fp16(f), h);
		}
	}
	return 0;
}

TEST(fp16_rounding)
{
	/* For each pair of adjacent finite halves, the exact midpoint (representable in f32)
	 * goes to the even one, and one f32 ulp either side goes to the nearer one. */
	for (uint32_t h = 0; h < 0x7bff; h++)
		for (uint32_t sign = 0; sign <= 0x8000; sign += 0x8000) {
			const double lo = half_value((uint16_t) h), hi = half_value((uint16_t) (h + 1));
			const float mid = (float) ((lo + hi) / 2);
			const uint16_t even = (uint16_t) ((h & 1) ? h + 1 : h);
			const float s = sign ? -1.f : 1.f;

			ASSERT_TRUE((double) mid == (lo + hi) / 2);
			ASSERT_EQ(f32_to_fp16(s * mid), even | sign);
			ASSERT_EQ(f32_to_fp16(s * nextafterf(mid, 0.f)), h | sign);
			ASSERT_EQ(f32_to_fp16(s * nextafterf(mid, INFINITY)), (h + 1) | sign);
		}
	/* overflow: 65520 is the midpoint between 65504 (odd mantissa) and 2^16 -> inf */
	ASSERT_EQ(f32_to_fp16(65504.f), 0x7bff);
	ASSERT_EQ(f32_to_fp16(nextafterf(65520.f, 0.f)), 0x7bff);
	ASSERT_EQ(f32_to_fp16(65520.f), 0x7c00);
	ASSERT_EQ(f32_to_fp16(-1e9f), 0xfc00);
	ASSERT_EQ(f32_to_fp16(INFINITY), 0x7c00);
	ASSERT_EQ(f32_to_fp16(FLT_MAX), 0x7c00);
	/* underflow: 2^-25 is the midpoint between 0 and the smallest subnormal */
	ASSERT_EQ(f32_to_fp16(0x1p-25f), 0x0000);
	ASSERT_EQ(f32_to_fp16(nextafterf(0x1p-25f, 1.f)), 0x0001);
	ASSERT_EQ(f32_to_fp16(-0x1p-25f), 0x8000);
	ASSERT_EQ(f32_to_fp16(0x1.8p-24f), 0x0002); /* 1.5 units: tie to even 2 */
	ASSERT_EQ(f32_to_fp16(0x1p-140f), 0x0000);
	ASSERT_EQ(f32_to_fp16(bits_f32(1)), 0x0000); /* f32 subnormal */
	ASSERT_EQ(f32_to_fp16(-0.f), 0x8000);
	ASSERT_EQ(f32_to_fp16(1.f), 0x3c00);
	ASSERT_EQ(f32_to_fp16(-2.f), 0xc000);
	ASSERT_EQ(f32_to_fp16(0.1f), 0x2e66);
	return 0;
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_f32_to_fp16(float f)
{
	return (uint16_t) _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c"))) static float hw_fp16_to_f32(uint16_t h)
{
	return _cvtsh_ss(h);
}

static bool cpu_has_f16c(void)
{
	unsigned int eax, ebx, ecx = 0, edx;

	return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
}
#endif

/* The scalar conversions must agree with the instructions the SIMD kernels use. */
TEST(fp16_matches_f16c)
{
#if defined(__x86_64__)
	rng_start("fp16_matches_f16c");
	if (!cpu_has_f16c())
		return TEST_SKIP;
	for (uint32_t h = 0; h < 0x10000; h++) {
		const float a = fp16_to_f32((uint16_t) h), b = hw_fp16_to_f32((uint16_t) h);

		/* the instruction quiets signalling NaNs, the portable code keeps them */
		if (isnan(b))
			ASSERT_TRUE(isnan(a));
		else
			ASSERT_EQ(f32_bits(a), f32_bits(b));
	}
	for (int i = 0; i < 2000000; i++) {
		/* all bit patterns, weighted towards the half range and its edges */
		uint32_t u = (uint32_t) rng_u64();
		if (i & 1)
			u = (u & 0x807fffff) | ((uint32_t) (97 + rng_below(48)) << 23);
		const float f = bits_f32(u);
		CHECK(f32_to_fp16(f) == hw_f32_to_fp16(f), "f32 0x%08x: 0x%04x, F16C 0x%04x", u,
		      f32_to_fp16(f), hw_f32_to_fp16(f));
	}
	return 0;
#else
	return TEST_SKIP;
#endif
}

TEST(bf16_exhaustive)
{
	for (uint32_t h = 0; h < 0x10000; h++) {
		const float f = bf16_to_f32((uint16_t) h);
		const bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);

		ASSERT_EQ(f32_bits(f), h << 16);
		if (nan) {
			ASSERT_TRUE(isnan(f));
			ASSERT_EQ(f32_to_bf16(f), h | 0x40); /* stays NaN, quiet bit set */
			/* low mantissa bits must not round a NaN into inf or the other sign */
			const uint16_t r = f32_to_bf16(bits_f32(h << 16 | 0xffff));
			ASSERT_TRUE((r & 0x7f80) == 0x7f80 && (r & 0x7f) && (r & 0x8000) == (h & 0x8000));
			continue;
		}
		ASSERT_EQ(f32_to_bf16(f), h);
		if ((h & 0x7fff) >= 0x7f80)
			continue; /* inf: no next value */
		/* midpoint between h and h+1 (same sign, larger magnitude): ties to even */
		const uint16_t even = (uint16_t) ((h & 1) ? h + 1 : h);
		ASSERT_EQ(f32_to_bf16(bits_f32(h << 16 | 0x8000)), even);
		ASSERT_EQ(f32_to_bf16(bits_f32(h << 16 | 0x7fff)), h);
		ASSERT_EQ(f32_to_bf16(bits_f32(h << 16 | 0x8001)), h + 1);
	}
	ASSERT_EQ(f32_to_bf16(1.f), 0x3f80);
	ASSERT_EQ(f32_to_bf16(1.00390625f), 0x3f80); /* 1 + 2^-8: tie, to even */
	ASSERT_EQ(f32_to_bf16(1.01171875f), 0x3f82); /* 1 + 3 * 2^-8: tie, to even */
	ASSERT_EQ(f32_to_bf16(-123.5f), 0xc2f7);
	ASSERT_EQ(f32_to_bf16(bits_f32(0x00012345)), 0x0001); /* subnormals are kept */
	ASSERT_EQ(f32_to_bf16(FLT_MAX), 0x7f80);               /* rounds up to inf */
	return 0;
}

/* ==== type table and levels ==== */

TEST(type_table)
{
	static const struct {
		uint32_t type;
		const char *name;
		size_t values, bytes;
		uint32_t vec_dot;
	} types[] = {
		{ GGML_TYPE_F32, "f32", 1, 4, GGML_TYPE_F32 },
		{ GGML_TYPE_F16, "f16", 1, 2, GGML_TYPE_F16 },
		{ GGML_TYPE_BF16, "bf16", 1, 2, GGML_TYPE_BF16 },
		{ GGML_TYPE_Q8_0, "q8_0", 32, 34, GGML_TYPE_Q8_0 },
		{ GGML_TYPE_Q4_0, "q4_0", 32, 18, GGML_TYPE_Q8_0 },
		{ GGML_TYPE_Q4_K, "q4_k", 256, 144, GGML_TYPE_Q8_K },
		{ GGML_TYPE_Q6_K, "q6_k", 256, 210, GGML_TYPE_Q8_K },
	};
	uint32_t t;

	for (size_t i = 0; i < ELEMENTSOF(types); i++) {
		ASSERT_TRUE(quant_type_supported(types[i].type));
		ASSERT_STREQ(quant_type_name(types[i].type), types[i].name);
		ASSERT_EQ(quant_block_values(types[i].type), types[i].values);
		ASSERT_EQ(quant_block_bytes(types[i].type), types[i].bytes);
		ASSERT_EQ(quant_vec_dot_type(types[i].type), types[i].vec_dot);
		ASSERT_OK(quant_type_from_name(types[i].name, &t));
		ASSERT_EQ(t, types[i].type);
		ASSERT_EQ(quant_row_bytes(types[i].type, 0), 0);
		ASSERT_EQ(quant_row_bytes(types[i].type, (int64_t) types[i].values * 3),
			  (int64_t) types[i].bytes * 3);
		ASSERT_EQ(quant_row_bytes(types[i].type, -(int64_t) types[i].values), -EINVAL);
		if (types[i].values > 1)
			ASSERT_EQ(quant_row_bytes(types[i].type, (int64_t) types[i].values + 1), -EINVAL);
	}
	/* Q8_K: activations only */
	ASSERT_TRUE(quant_type_supported(GGML_TYPE_Q8_K));
	ASSERT_EQ(quant_block_bytes(GGML_TYPE_Q8_K), 292);
	ASSERT_STREQ(quant_type_name(GGML_TYPE_Q8_K), "q8_k");
	/* known to ggml, not supported here */
	ASSERT_STREQ(quant_type_name(GGML_TYPE_Q5_K), "q5_k");
	ASSERT_TRUE(!quant_type_supported(GGML_TYPE_Q5_K));
	ASSERT_EQ(quant_block_values(GGML_TYPE_Q5_K), 0);
	ASSERT_EQ(quant_block_bytes(GGML_TYPE_Q4_1), 0);
	ASSERT_EQ(quant_row_bytes(GGML_TYPE_Q4_1, 32), -EINVAL);
	/* not types at all */
	ASSERT_TRUE(quant_type_name(4) == NULL);
	ASSERT_TRUE(quant_type_name(GGML_TYPE_COUNT_) == NULL);
	ASSERT_TRUE(quant_type_name(UINT32_MAX) == NULL);
	ASSERT_TRUE(!quant_type_supported(UINT32_MAX));
	ASSERT_EQ(quant_row_bytes(UINT32_MAX, 0), -EINVAL);
	/* names parse case-insensitively; unknown ones fail */
	ASSERT_OK(quant_type_from_name("Q4_K", &t));
	ASSERT_EQ(t, GGML_TYPE_Q4_K);
	ASSERT_OK(quant_type_from_name("BF16", &t));
	ASSERT_EQ(t, GGML_TYPE_BF16);
	ASSERT_ERR(quant_type_from_name("q4", &t), -EINVAL);
	ASSERT_ERR(quant_type_from_name("", &t), -EINVAL);
	/* a row size that does not fit int64 */
	ASSERT_EQ(quant_row_bytes(GGML_TYPE_F32, INT64_MAX / 2), -EOVERFLOW);
	return 0;
}

TEST(simd_levels)
{
	static const char *const what[] = {
		[QUANT_LEVEL_RUNS] = "ran",
		[QUANT_LEVEL_NO_ISA] = "skipped (this CPU lacks an instruction set it needs)",
		[QUANT_LEVEL_UNPROVEN] = ("held back (never proven on such a CPU; MOLLY_CPU_UNPROVEN=1 "
					  "runs it)"),
	};
	const char *levels[MAX_LEVELS], *all[MAX_LEVELS];
	size_t n_all = quant_simd_levels(all, MAX_LEVELS);
	char cpu_level[32];
	size_t n;

	snprintf(cpu_level, sizeof(cpu_level), "%s", quant_simd_level());
	n = available_levels(levels);
	printf("  CPU level %s\n", cpu_level);
	for (int s = QUANT_LEVEL_RUNS; s <= QUANT_LEVEL_UNPROVEN; s++) {
		bool any = false;

		printf("  %s:", what[s]);
		for (size_t i = 0; i < n_all; i++)
			if ((int) quant_simd_level_state(all[i]) == s) {
				printf(" %s", all[i]);
				any = true;
			}
		printf("%s\n", any ? "" : " none");
	}
	ASSERT_TRUE(n >= 1);
	ASSERT_STREQ(levels[0], "scalar");
	ASSERT_STREQ(levels[n - 1], cpu_level);
	/* the default is the best level that runs */
	ASSERT_STREQ(all[n_all - 1], "scalar");
	for (size_t i = 0; i < n_all; i++)
		if (quant_simd_level_state(all[i]) == QUANT_LEVEL_RUNS) {
			ASSERT_STREQ(all[i], cpu_level);
			break;
		}
#if defined(__x86_64__)
	/* the levels follow the CPU's features */
	__builtin_cpu_init();
	unsigned int eax, ebx, ecx, edx;
	bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
	bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
		      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
		      __builtin_cpu_supports("avx512dq");
	bool avxvnni = avx2 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4));
	ASSERT_EQ(quant_simd_level_state("avx2") != QUANT_LEVEL_NO_ISA, avx2);
	ASSERT_EQ(quant_simd_level_state("avx512") != QUANT_LEVEL_NO_ISA, avx512);
	ASSERT_EQ(quant_simd_level_state("avx512vnni") != QUANT_LEVEL_NO_ISA,
		  avx512 && __builtin_cpu_supports("avx512vnni"));
	ASSERT_EQ(quant_simd_level_state("avxvnni") != QUANT_LEVEL_NO_ISA, avxvnni);
	ASSERT_EQ(quant_simd_level_state("avx512bf16") != QUANT_LEVEL_NO_ISA,
		  avx512 && __builtin_cpu_supports("avx512vnni") &&
			  __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 5)));
	/* amx: also needs the kernel to grant the tile state, so only one way round here: no
	 * AMX-TILE + AMX-INT8 in cpuid (leaf 7 EDX bits 24, 25), no amx level */
	if (!(__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 24)) &&
	      (edx & (1u << 25))))
		ASSERT_TRUE(quant_simd_level_state("amx") == QUANT_LEVEL_NO_ISA);
	ASSERT_TRUE(quant_simd_level_state("amx") != QUANT_LEVEL_UNKNOWN);
#endif
	/* force works exactly for the levels that run; a held-back one says so */
	for (size_t i = 0; i < n_all; i++) {
		enum quant_level_state st = quant_simd_level_state(all[i]);
		int r = quant_force_simd_level(all[i]);

		ASSERT_EQ(r, st == QUANT_LEVEL_RUNS ? 0 : st == QUANT_LEVEL_UNPROVEN ? -EPERM : -ENOTSUP);
		if (r == 0) {
			ASSERT_STREQ(quant_simd_level(), all[i]);
			ASSERT_TRUE(quant_simd_level_proven(all[i]) || getenv("MOLLY_CPU_UNPROVEN"));
		}
	}
	ASSERT_ERR(quant_force_simd_level("sse9"), -ENOTSUP);
	ASSERT_ERR(quant_force_simd_level(""), -ENOTSUP);
	ASSERT_TRUE(quant_simd_level_state("sse9") == QUANT_LEVEL_UNKNOWN);
	ASSERT_OK(quant_force_simd_level(cpu_level));
	ASSERT_STREQ(quant_simd_level(), cpu_level);
	return 0;
}

/* ==== activation quantizers ==== */

/* ggml's activation conversions, checked at every level on inputs whose answers are known:
 * exact ties must round to even (not away from zero, as ggml's scalar _ref would). */
TEST(activation_known_answers)
{
	const char *levels[MAX_LEVELS];
	size_t n = available_levels(levels);
	char cpu_level[32];

	snprintf(cpu_level, sizeof(cpu_level), "%s", quant_simd_level());
	for (size_t l = 0; l < n; l++) {
		ASSERT_OK(quant_force_simd_level(levels[l]));

		/* Q8_0: amax 127 makes the multiplier exactly 1, so x itself is rounded */
		float x[2 * QK8_0] = { 127.f, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, 1.5f, 63.5f, -0.f, 126.5f };
		uint8_t q[2 * 34 + 1];
		const int8_t want[10] = { 127, 2, 4, -2, -4, 0, 2, 64, 0, 126 };
		/* the second block is all zeros: d = 0, q = 0 */
		quant_quantize_row(GGML_TYPE_Q8_0, x, q + 1, 2 * QK8_0); /* unaligned on purpose */
		ASSERT_EQ(get_u16(q + 1), 0x3c00);
		for (int j = 0; j < 10; j++)
			ASSERT_EQ((int8_t) q[3 + j], want[j]);
		for (int j = 10; j < 32; j++)
			ASSERT_EQ(q[3 + j], 0);
		ASSERT_EQ(get_u16(q + 35), 0);
		for (int j = 0; j < 32; j++)
			ASSERT_EQ(q[37 + j], 0);

		/* Q8_K: the scale comes from the FIRST value of largest magnitude, with its sign:
		 * -127 first gives iscale = 1, d = 1; 127 first gives iscale = -1, d = -1. */
		float y[3 * QK_K] = { 0 };
		uint8_t k8[3 * 292];
		for (int b = 0; b < 2; b++) {
			float *v = y + b * QK_K;
			v[3] = 50.f;
			v[5] = b ? 127.f : -127.f;
			v[9] = b ? -127.f : 127.f;
			v[17] = 2.5f;
			v[18] = -3.5f;
			v[200] = 0.4f;
			v[255] = 126.5f;
		}
		quant_quantize_row(GGML_TYPE_Q8_K, y, k8, 3 * QK_K);
		for (int b = 0; b < 2; b++) {
			const uint8_t *blk = k8 + 292 * b;
			float d;
			int16_t bsums[16];
			const int s = b ? -1 : 1;

			memcpy(&d, blk, 4);
			memcpy(bsums, blk + 4 + 256, sizeof(bsums));
			ASSERT_TRUE(d == (float) s);
			ASSERT_EQ((int8_t) blk[4 + 5], -127);
			ASSERT_EQ((int8_t) blk[4 + 9], 127);
			ASSERT_EQ((int8_t) blk[4 + 3], s * 50);
			ASSERT_EQ((int8_t) blk[4 + 17], s * 2);  /* 2.5 -> 2, -2.5 -> -2 */
			ASSERT_EQ((int8_t) blk[4 + 18], s * -4); /* -3.5 -> -4, 3.5 -> 4 */
			ASSERT_EQ((int8_t) blk[4 + 200], 0);
			ASSERT_EQ((int8_t) blk[4 + 255], s * 126); /* 126.5 -> 126 */
			ASSERT_EQ(bsums[0], s * 50);
			ASSERT_EQ(bsums[1], s * -2);
			ASSERT_EQ(bsums[15], s * 126);
			for (int g = 2; g < 15; g++)
				ASSERT_EQ(bsums[g], 0);
		}
		/* an all-zero block is all zeros, d = 0 */
		for (int j = 0; j < 292; j++)
			ASSERT_EQ(k8[2 * 292 + j], 0);

		/* F16 / BF16 */
		const float f[6] = { 1.f, 65520.f, 1e-6f, -0.f, NAN, 1.00390625f };
		uint16_t h[6];
		quant_quantize_row(GGML_TYPE_F16, f, h, 6);
		ASSERT_EQ(h[0], 0x3c00);
		ASSERT_EQ(h[1], 0x7c00);
		ASSERT_EQ(h[2], 0x0011); /* 1e-6 / 2^-24 = 16.78 -> 17 subnormal units */
		ASSERT_EQ(h[3], 0x8000);
		ASSERT_TRUE((h[4] & 0x7c00) == 0x7c00 && (h[4] & 0x3ff));
		quant_quantize_row(GGML_TYPE_BF16, f, h, 6);
		ASSERT_EQ(h[0], 0x3f80);
		ASSERT_EQ(h[1], 0x4780);
		ASSERT_EQ(h[3], 0x8000);
		ASSERT_TRUE((h[4] & 0x7f80) == 0x7f80 && (h[4] & 0x7f));
		ASSERT_EQ(h[5], 0x3f80);
	}
	ASSERT_OK(quant_force_simd_level(cpu_level));
	return 0;
}

enum dist {
	DIST_NORMAL,    /* N(0, 1) times a random scale */
	DIST_BLOCKWISE, /* a different scale for every 32 values, 1e-4 .. 1e4 */
	DIST_TIES,      /* integers and halves up to 127: exact rounding ties */
	DIST_SPARSE,    /* mostly zeros, some whole zero blocks */
	DIST_SPECIAL,   /* NaN, inf, -0, subnormals and huge values sprinkled in */
	DIST_COUNT_,
};

static void fill(float *x, int64_t n, enum dist dist)
{
	const float scale = (float) exp(rng_uniform() * 8 - 4);
	/* NaNs with low payload bits too: rounding them like numbers would give inf or -0 */
	const float special[] = { NAN, -NAN, bits_f32(0x7fffffff), bits_f32(0x7f800001),
				  bits_f32(0xff80ffff), INFINITY, -INFINITY, -0.f, 1e-40f, -3e-39f,
				  3e38f, -65519.f, 65520.f, 1e-30f };

	for (int64_t i = 0; i < n; i++)
		x[i] = rng_normal() * scale;
	switch (dist) {
	case DIST_NORMAL:
		break;
	case DIST_BLOCKWISE:
		for (int64_t i = 0; i < n; i += 32) {
			const float s = (float) exp(rng_uniform() * 18.4 - 9.2);
			for (int64_t j = i; j < i + 32 && j < n; j++)
				x[j] *= s;
		}
		break;
	case DIST_TIES:
		for (int64_t i = 0; i < n; i++)
			x[i] = (float) ((int) rng_below(509) - 254) / 2;
		for (int64_t i = 0; i < n; i += 32)
			x[i] = rng_below(2) ? 127.f : -127.f; /* amax 127 in every Q8_0 block */
		break;
	case DIST_SPARSE:
		for (int64_t i = 0; i < n; i++)
			if (rng_below(8) || (i / 256) % 3 == 1)
				x[i] = 0.f;
		break;
	case DIST_SPECIAL:
		for (int64_t i = 0; i < n; i++)
			if (rng_below(16) == 0)
				x[i] = special[rng_below(ELEMENTSOF(special))];
		break;
	default:
		break;
	}
}

/* Every SIMD level's activation conversion gives the scalar one's bytes, whatever the input
 * (NaN and infinities included: degenerate, but it must not differ). */
TEST(activation_quantizers_match_scalar)
{
	static const uint32_t types[] = { GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
					  GGML_TYPE_Q8_K };
	static const int64_t blocks[] = { 1, 2, 3, 7, 16, 43 };
	const char *levels[MAX_LEVELS];
	size_t n_levels = available_levels(levels);
	char cpu_level[32];

	rng_start("activation_quantizers_match_scalar");
	snprintf(cpu_level, sizeof(cpu_level), "%s", quant_simd_level());
	for (size_t l = 1; l < n_levels; l++) {
		ASSERT_OK(quant_force_simd_level(levels[l]));
		for (size_t t = 0; t < ELEMENTSOF(types); t++)
			for (size_t b = 0; b < ELEMENTSOF(blocks); b++)
				for (int d = 0; d < DIST_COUNT_; d++) {
					const uint32_t type = types[t];
					/* float targets also get lengths that leave SIMD tails */
					const int64_t n = is_float_type(type)
								  ? blocks[b] * 32 + (int64_t) rng_below(32)
								  : blocks[b] * (int64_t) quant_block_values(type);
					const size_t bytes = row_bytes(type, n);
					_cleanup_free_ float *x = malloc((size_t) n * sizeof(float));
					_cleanup_free_ uint8_t *a = malloc(bytes + 1), *r = malloc(bytes + 1);

					ASSERT_TRUE(x && a && r);
					fill(x, n, (enum dist) d);
					memset(a, 0xa5, bytes + 1);
					memset(r, 0x5a, bytes + 1);
					quant_quantize_row(type, x, a, n);
					quant_quantize_row_ref(type, x, r, n);
					for (size_t i = 0; i < bytes; i++)
						CHECK(a[i] == r[i],
						      "%s %s n=%lld dist %d: byte %zu is 0x%02x, scalar 0x%02x",
						      levels[l], quant_type_name(type), (long long) n, d, i,
						      a[i], r[i]);
					CHECK(a[bytes] == 0xa5, "%s %s wrote past the row", levels[l],
					      quant_type_name(type));
				}
	}
	ASSERT_OK(quant_force_simd_level(cpu_level));
	return 0;
}

/* ==== dequantization known answers ==== */

/* Writes the 12 packed bytes of 8 six-bit scales and mins, per the layout in kernels.h. */
static void pack_q4_K_scales(uint8_t *s, const uint8_t sc[8], const uint8_t m[8])
{
	for (int j = 0; j < 4; j++) {
		s[j] = (uint8_t) ((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
		s[j + 4] = (uint8_t) ((m[j] & 63) | (m[j + 4] >> 4) << 6);
		s[j + 8] = (uint8_t) ((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
	}
}

TEST(dequantize_known_answers)
{
	/* every block sits at an odd address: GGUF only guarantees 1-byte alignment inside a
	 * tensor (UBSan would flag a misaligned fp16 or float access) */
	uint8_t buf[1 + 2 * 292];
	uint8_t *blk = buf + 1;
	float out[2 * QK_K];

	/* F32, F16, BF16 */
	const float f32[3] = { 1.5f, -0.f, 3e38f };
	quant_dequantize_row(GGML_TYPE_F32, f32, out, 3);
	ASSERT_TRUE(out[0] == 1.5f && signbit(out[1]) && out[2] == 3e38f);
	const uint16_t f16[5] = { 0x3c00, 0x0001, 0xfc00, 0x7bff, 0xb800 };
	quant_dequantize_row(GGML_TYPE_F16, f16, out, 5);
	ASSERT_TRUE(out[0] == 1.f && out[1] == 0x1p-24f && isinf(out[2]) && out[2] < 0);
	ASSERT_TRUE(out[3] == 65504.f && out[4] == -0.5f);
	const uint16_t bf16[3] = { 0x3f80, 0xc2f7, 0x0001 };
	quant_dequantize_row(GGML_TYPE_BF16, bf16, out, 3);
	ASSERT_TRUE(out[0] == 1.f && out[1] == -123.5f && out[2] == bits_f32(0x10000));

	/* Q8_0: d = 0.5 */
	put_u16(blk, 0x3800);
	for (int j = 0; j < 32; j++)
		blk[2 + j] = (uint8_t) (j * 9 - 128);
	blk[2 + 1] = 127;
	quant_dequantize_row(GGML_TYPE_Q8_0, blk, out, 32);
	for (int j = 2; j < 32; j++)
		ASSERT_TRUE(out[j] == (float) (int8_t) (j * 9 - 128) * 0.5f);
	ASSERT_TRUE(out[0] == -64.f && out[1] == 63.5f && out[31] == -52.5f);

	/* Q4_0: d = -2; value j = low nibble of qs[j], value j + 16 = its high nibble */
	put_u16(blk, 0xc000);
	for (int j = 0; j < 16; j++)
		blk[2 + j] = (uint8_t) (j | (15 - j) << 4);
	quant_dequantize_row(GGML_TYPE_Q4_0, blk, out, 32);
	for (int j = 0; j < 16; j++) {
		ASSERT_TRUE(out[j] == (float) (j - 8) * -2.f);
		ASSERT_TRUE(out[j + 16] == (float) (15 - j - 8) * -2.f);
	}
	ASSERT_TRUE(out[0] == 16.f && out[15] == -14.f && out[16] == -14.f && out[31] == 16.f);

	/* Q4_K: d = 0.5, dmin = 0.25, scales and mins using all 6 bits, including the high
	 * bits stored separately for sub-blocks 4..7 */
	const uint8_t sc[8] = { 1, 2, 63, 17, 33, 48, 5, 62 };
	const uint8_t mn[8] = { 0, 3, 7, 63, 16, 31, 40, 1 };
	memset(blk, 0, 144);
	put_u16(blk + Q4_K_D, 0x3800);
	put_u16(blk + Q4_K_DMIN, 0x3400);
	pack_q4_K_scales(blk + Q4_K_SCALES, sc, mn);
	for (int k = 0; k < 128; k++)
		blk[Q4_K_QS + k] = (uint8_t) (k * 7 + 3);
	quant_dequantize_row(GGML_TYPE_Q4_K, blk, out, QK_K);
	for (int v = 0; v < QK_K; v++) {
		/* 64 values per 32 bytes: the first 32 in the low nibbles, the next in the high */
		const int j = v / 32;
		const uint8_t byte = blk[Q4_K_QS + 32 * (v / 64) + v % 32];
		const int q = j % 2 ? byte >> 4 : byte & 15;
		ASSERT_TRUE(out[v] == 0.5f * sc[j] * q - 0.25f * mn[j]);
	}
	/* a few by hand: v 0: qs[0] = 3, low 3, sc 1 -> 1.5; v 32: high nibble 0, m 3 ->
	 * -0.75; v 160: qs[64] = 0xc3, high 12, sc 48, m 31 -> 288 - 7.75; v 255: qs[127] =
	 * 0x7c, high 7, sc 62, m 1 -> 217 - 0.25 */
	ASSERT_TRUE(out[0] == 1.5f && out[32] == -0.75f && out[160] == 280.25f && out[255] == 216.75f);

	/* Q6_K: d = 0.25; scales from -128 to 127 */
	memset(blk, 0, 210);
	put_u16(blk + Q6_K_D, 0x3400);
	for (int g = 0; g < 16; g++)
		blk[Q6_K_SCALES + g] = (uint8_t) (int8_t) (g * 17 - 128);
	blk[Q6_K_SCALES + 2] = 10;
	blk[Q6_K_SCALES + 4] = (uint8_t) -3;
	blk[Q6_K_SCALES + 6] = 7;
	for (int k = 0; k < 128; k++)
		blk[Q6_K_QL + k] = (uint8_t) (k * 13 + 5);
	for (int k = 0; k < 64; k++)
		blk[Q6_K_QH + k] = (uint8_t) (k * 29 + 1);
	blk[Q6_K_QL + 0] = 0x21;
	blk[Q6_K_QL + 32] = 0x43;
	blk[Q6_K_QH + 0] = 0xe4; /* bit pairs 0, 1, 2, 3 for values 0, 32, 64, 96 */
	quant_dequantize_row(GGML_TYPE_Q6_K, blk, out, QK_K);
	for (int v = 0; v < QK_K; v++) {
		/* per 128 values: ql[64] and qh[32]; value l: ql[l % 64] (low nibble for l < 64),
		 * qh[l % 32] bits 2 * (l / 32) */
		const int h = v / 128, l = v % 128;
		const uint8_t lo = blk[Q6_K_QL + 64 * h + l % 64], hi = blk[Q6_K_QH + 32 * h + l % 32];
		const int q = ((l < 64 ? lo & 15 : lo >> 4) | ((hi >> (2 * (l / 32))) & 3) << 4) - 32;
		ASSERT_TRUE(out[v] == 0.25f * (float) (int8_t) blk[Q6_K_SCALES + v / 16] * q);
	}
	/* by hand: v 0: q = 1 | 0 -> -31, scale -128 -> 992; v 32: q = 3 | 1 << 4 -> -13,
	 * scale 10 -> -32.5; v 64: q = 2 | 2 << 4 -> 2, scale -3 -> -1.5; v 96: q = 4 | 3 << 4
	 * -> 20, scale 7 -> 35 */
	ASSERT_TRUE(out[0] == 992.f && out[32] == -32.5f && out[64] == -1.5f && out[96] == 35.f);

	/* Q8_K: float d, no fp16 */
	const float d8 = -0.375f;
	memset(blk, 0, 2 * 292);
	for (int b = 0; b < 2; b++) {
		memcpy(blk + 292 * b, &d8, 4);
		for (int k = 0; k < 256; k++)
			blk[292 * b + 4 + k] = (uint8_t) (k + b);
	}
	quant_dequantize_row(GGML_TYPE_Q8_K, blk, out, 2 * QK_K);
	for (int b = 0; b < 2; b++)
		for (int k = 0; k < 256; k++)
			ASSERT_TRUE(out[256 * b + k] == (float) (int8_t) (k + b) * d8);
	return 0;
}

/* ==== dot products ==== */

/*
 * Error bounds for a dot product, u = 2^-24 (float's unit roundoff), as a multiple of
 * T = sum_i |w_i| |x_i|, where w_i, x_i are the dequantized weight and activation and, for
 * Q4_K, |w_i| counts the two parts d*sc*q and dmin*m separately (the kernels round each
 * part's sum on its own, and they may nearly cancel).
 *
 * Every kernel computes the integer (or exact float) products exactly, then rounds while
 * scaling and summing. A sum of k rounded steps along any path is off by at most k*u*T (to
 * first order), so the bound is (longest chain of roundings + a few) * u * T:
 *  - float types: the SIMD kernels sum n/32 products per lane (+ a tail of <= 31 and a tree
 *    of <= 6), the scalar ones in double; n/16 + 40 covers every implementation twice over.
 *    F16 and BF16 products are exact in float; F32 products cost one more u.
 *  - block types: one rounding to scale each block (two for Q4_K), then at most nb/2 (two
 *    accumulators) or nb/8 (lanes) steps per chain; nb + 8 covers it.
 *  - the float64 reference itself: dequantized Q8_K activations (float d * q) and Q4_K
 *    weights (d*sc*q - dmin*m) are rounded once each, Q8_0/Q4_0/Q6_K values are exact in
 *    float: another 2u. Hence the + 4.
 * Comparing a SIMD kernel with the scalar one uses the same bound: both sit within it of
 * the exact value and the formula has 2x slack over the SIMD chains. A layout mistake, by
 * contrast, moves the result by a whole block's share of T (1/nb), far more.
 */
static double dot_bound(uint32_t type, int64_t n)
{
	const double u = 0x1p-24;
	const double chain = is_float_type(type) ? (double) n / 16 + 40
						 : (double) (n / (int64_t) quant_block_values(type)) + 8;

	return (chain + 4) * u;
}

/* |w_i| per value, for T above. Q4_K: |d*sc*q| + |dmin*m| from two dequantizations with
 * dmin and d zeroed in turn. */
static void term_magnitudes(uint32_t type, const uint8_t *w, int64_t n, float *mag)
{
	if (type == GGML_TYPE_Q4_K) {
		const size_t bytes = row_bytes(type, n);
		_cleanup_free_ uint8_t *a = malloc(bytes), *b = malloc(bytes);
		_cleanup_free_ float *fa = malloc((size_t) n * sizeof(float));

		assert(a && b && fa);
		memcpy(a, w, bytes);
		memcpy(b, w, bytes);
		for (size_t off = 0; off < bytes; off += 144) {
			put_u16(a + off + Q4_K_DMIN, 0);
			put_u16(b + off + Q4_K_D, 0);
		}
		quant_dequantize_row(type, a, fa, n);
		quant_dequantize_row(type, b, mag, n);
		for (int64_t i = 0; i < n; i++)
			mag[i] = fabsf(fa[i]) + fabsf(mag[i]);
		return;
	}
	quant_dequantize_row(type, w, mag, n);
	for (int64_t i = 0; i < n; i++)
		mag[i] = fabsf(mag[i]);
}

/* A random finite fp16 scale: +-2^(-12..-2) with a random mantissa. */
static uint16_t random_scale(bool allow_negative)
{
	const float v = (float) (exp2(-12.0 + 10.0 * rng_uniform()));

	return f32_to_fp16(allow_negative && rng_below(2) ? -v : v);
}

/* A weight row of random bytes, with the block scales made finite and sane (random bytes
 * give fp16 NaN/inf scales). Covers levels and scales no quantizer would produce: Q8_0
 * -128, Q4_K 6-bit scales of 63, Q6_K scales of -128. */
static void random_weights_raw(uint32_t type, uint8_t *w, int64_t n)
{
	const size_t bytes = row_bytes(type, n);

	for (size_t i = 0; i < bytes; i++)
		w[i] = (uint8_t) rng_u64();
	switch (type) {
	case GGML_TYPE_F32:
		for (int64_t i = 0; i < n; i++) {
			const float v = rng_normal() * (float) exp(rng_uniform() * 20 - 10);
			memcpy(w + 4 * i, &v, 4);
		}
		break;
	case GGML_TYPE_F16:
		for (int64_t i = 0; i < n; i++)
			if ((get_u16(w + 2 * i) & 0x7c00) == 0x7c00)
				put_u16(w + 2 * i, get_u16(w + 2 * i) & 0xbfff); /* no inf/NaN */
		break;
	case GGML_TYPE_BF16:
		for (int64_t i = 0; i < n; i++) /* exponents 2^-32 .. 2^31 */
			put_u16(w + 2 * i, (uint16_t) ((get_u16(w + 2 * i) & 0x807f) |
						       (95 + rng_below(64)) << 7));
		break;
	case GGML_TYPE_Q8_0:
	case GGML_TYPE_Q4_0:
		for (size_t off = 0; off < bytes; off += quant_block_bytes(type))
			put_u16(w + off, random_scale(true));
		break;
	case GGML_TYPE_Q4_K:
		for (size_t off = 0; off < bytes; off += 144) {
			put_u16(w + off + Q4_K_D, random_scale(rng_below(4) == 0));
			put_u16(w + off + Q4_K_DMIN, random_scale(rng_below(4) == 0));
		}
		break;
	case GGML_TYPE_Q6_K:
		for (size_t off = 0; off < bytes; off += 210)
			put_u16(w + off + Q6_K_D, random_scale(true));
		break;
	default:
		break;
	}
}

/* Activations for the dot tests: N(0,1) times a scale per 32 values, e^-6 .. e^3, so that
 * F16 activations cannot overflow. */
static void fill_activations(float *x, int64_t n, bool blockwise)
{
	float s = (float) exp(rng_uniform() * 9 - 6);

	for (int64_t i = 0; i < n; i++) {
		if (blockwise && i % 32 == 0)
			s = (float) exp(rng_uniform() * 9 - 6);
		x[i] = rng_normal() * s;
	}
}

/* One dot product case at the current level: the activation conversion must equal the
 * scalar one, and the dot must be within the bound of the float64 reference and of the
 * scalar kernel. Rows of block types sit at odd addresses, like blocks inside GGUF data. */
static int check_dot(uint32_t type, int64_t n, const uint8_t *w, const float *x, const char *what)
{
	const uint32_t vt = quant_vec_dot_type(type);
	const size_t xbytes = row_bytes(vt, n);
	const size_t off = is_float_type(type) ? 0 : 1;
	_cleanup_free_ uint8_t *xq = malloc(xbytes + 1), *xr = malloc(xbytes + 1);
	_cleanup_free_ float *wd = malloc((size_t) n * sizeof(float));
	_cleanup_free_ float *wm = malloc((size_t) n * sizeof(float));
	_cleanup_free_ float *xd = malloc((size_t) n * sizeof(float));
	double exact = 0, mag = 0;

	ASSERT_TRUE(xq && xr && wd && wm && xd);
	quant_quantize_row(vt, x, xq + off, n);
	quant_quantize_row_ref(vt, x, xr + off, n);
	CHECK(memcmp(xq + off, xr + off, xbytes) == 0, "%s %s n=%lld: %s activations differ from scalar",
	      quant_simd_level(), quant_type_name(type), (long long) n, quant_type_name(vt));

	quant_dequantize_row(type, w, wd, n);
	quant_dequantize_row(vt, xq + off, xd, n);
	term_magnitudes(type, w, n, wm);
	for (int64_t i = 0; i < n; i++) {
		exact += (double) wd[i] * xd[i];
		mag += (double) wm[i] * fabs(xd[i]);
	}
	const double bound = dot_bound(type, n) * mag;
	const float got = quant_vec_dot(type, n, w, xq + off);
	const float ref = quant_vec_dot_ref(type, n, w, xq + off);

	CHECK(fabs(got - exact) <= bound, "%s %s n=%lld (%s): %.9g, float64 %.9g, |diff| %.3g > %.3g",
	      quant_simd_level(), quant_type_name(type), (long long) n, what, got, exact,
	      fabs(got - exact), bound);
	CHECK(fabs(ref - exact) <= bound, "scalar %s n=%lld (%s): %.9g, float64 %.9g, |diff| %.3g > %.3g",
	      quant_type_name(type), (long long) n, what, ref, exact, fabs(ref - exact), bound);
	CHECK(fabs(got - ref) <= bound, "%s %s n=%lld (%s): %.9g, scalar %.9g, |diff| %.3g > %.3g",
	      quant_simd_level(), quant_type_name(type), (long long) n, what, got, ref,
	      fabs(got - ref), bound);
	return 0;
}

TEST(vec_dot_all_levels)
{
	static const uint32_t types[] = { GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,
					  GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K };
	/* in blocks for block types; float types use these * 32 +- a tail, and 1, 7 */
	static const int64_t sizes[] = { 1, 2, 7, 16, 4096, 11008 };
	const char *levels[MAX_LEVELS];
	size_t n_levels = available_levels(levels);
	char cpu_level[32];

	rng_start("vec_dot_all_levels");
	snprintf(cpu_level, sizeof(cpu_level), "%s", quant_simd_level());
	for (size_t l = 0; l < n_levels; l++) {
		ASSERT_OK(quant_force_simd_level(levels[l]));
		for (size_t t = 0; t < ELEMENTSOF(types); t++)
			for (size_t s = 0; s < ELEMENTSOF(sizes) + 2; s++) {
				const uint32_t type = types[t];
				const int64_t bv = (int64_t) quant_block_values(type);
				int64_t n;

				if (s >= ELEMENTSOF(sizes)) { /* odd lengths for float types */
					if (!is_float_type(type))
						continue;
					n = s == ELEMENTSOF(sizes) ? 1 : 7 + 32 * (int64_t) rng_below(4);
				} else if (sizes[s] >= 4096) {
					n = sizes[s] + (is_float_type(type) ? (int64_t) rng_below(32) : 0);
				} else {
					n = sizes[s] * (bv == 1 ? 32 : bv) + (bv == 1 ? (int64_t) rng_below(32) : 0);
				}
				const size_t bytes = row_bytes(type, n);
				_cleanup_free_ float *wf = malloc((size_t) n * sizeof(float));
				_cleanup_free_ float *x = malloc((size_t) n * sizeof(float));
				_cleanup_free_ uint8_t *w = malloc(bytes + 1);

				ASSERT_TRUE(wf && x && w && bytes > 0);
				/* weights from the quantizer, then raw random blocks */
				for (int variant = 0; variant < 2; variant++) {
					uint8_t *wr = w + (is_float_type(type) ? 0 : 1);
					if (variant == 0) {
						fill(wf, n, DIST_NORMAL);
						quant_quantize_row(type, wf, wr, n);
					} else {
						random_weights_raw(type, wr, n);
					}
					fill_activations(x, n, variant == 1);
					if (check_dot(type, n, wr, x, variant ? "random blocks" : "quantized"))
						return 1;
				}
			}
	}
	ASSERT_OK(quant_force_simd_level(cpu_level));
	return 0;
}

/* ==== weight quantizers ==== */

/*
 * Per-element error bounds for a quantized weight x -> deq, given the block as stored.
 * u = 2^-24; D = the block's fp16 scale; the quantizer computed with an unrounded float
 * scale d_f, |d_f - D| <= 2^-11 |d_f| + 2^-25 (fp16 rounding, normal or subnormal).
 *  - Q8_0: q = round(x / d_f) (to even, or away from zero in llama-quantize's version),
 *    so |x - d_f q| <= d_f/2 (+ float error of x * (1/d_f): 2u per level, |q| <= 127),
 *    and replacing d_f by D adds |q| |d_f - D| <= 127 (2^-11 d_f + 2^-25).
 *  - Q4_0: d_f = max / -8 puts every x at x/d_f in [-8, 8]; levels are -8..7 and
 *    round half up, so the error is <= d_f/2, except x/d_f in (7.5, 8] which clamps to 7:
 *    <= d_f. Replacing d_f by D adds 8 (2^-11 d_f + 2^-25).
 *  - Q4_K and Q6_K: the last pass of the quantizer rounds each x to the nearest point of
 *    its sub-block's grid as stored (d*sc*q - dmin*m, q = 0..15; d*sc*(q-32), q = 0..63),
 *    clamping at the ends. So the error is the distance from x to that grid (<= half a
 *    step inside it), up to float rounding: checked exactly that way.
 */
static double fp16_scale_bound(uint16_t h, double levels, double step_fraction)
{
	const double D = fabs(fp16_to_f32(h));
	const double d_f = (D + 0x1p-25) / (1 - 0x1p-11); /* largest d_f that rounds to D */

	return step_fraction * d_f + levels * (2 * 0x1p-24 * d_f + 0x1p-11 * d_f + 0x1p-25);
}

/* The grid of one value's sub-block: deq = lo + q * step, q = 0..n_levels-1. Found by
 * dequantizing copies of the block with every level set to 0 and to 1 (no layout
 * knowledge needed beyond where the quants are). */
static void block_grid(uint32_t type, const uint8_t *blk, float *lo, float *step, int *n_levels)
{
	uint8_t tmp[210];
	const size_t bytes = quant_block_bytes(type);
	const int64_t n = (int64_t) quant_block_values(type);

	memcpy(tmp, blk, bytes);
	if (type == GGML_TYPE_Q4_K) {
		memset(tmp + Q4_K_QS, 0x00, 128);
		quant_dequantize_row(type, tmp, lo, n);
		memset(tmp + Q4_K_QS, 0x11, 128);
		*n_levels = 16;
	} else { /* Q6_K: level 0 is q = 0 (-32); level 1 is q = 1 */
		memset(tmp + Q6_K_QL, 0x00, 192);
		quant_dequantize_row(type, tmp, lo, n);
		memset(tmp + Q6_K_QL, 0x11, 128);
		*n_levels = 64;
	}
	quant_dequantize_row(type, tmp, step, n);
	for (int64_t i = 0; i < n; i++)
		step[i] -= lo[i];
}

/* Distance from x to the grid lo + q * step, q = 0..n-1. */
static double grid_distance(double x, double lo, double step, int n)
{
	if (step == 0)
		return fabs(x - lo);
	double q = nearbyint((x - lo) / step);
	q = q < 0 ? 0 : q > n - 1 ? n - 1 : q;
	return fabs(x - (lo + q * step));
}

/* Checks deq against x for one row of `type`, per the bounds above. */
static int check_row_error(uint32_t type, const float *x, const uint8_t *q, const float *deq,
			   int64_t n, const char *what)
{
	const size_t bb = quant_block_bytes(type);
	const int64_t bv = (int64_t) quant_block_values(type);

	for (int64_t b = 0; b < n / bv; b++) {
		const uint8_t *blk = q + (size_t) b * bb;
		float lo[QK_K], step[QK_K];
		int n_levels = 0;

		if (type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q6_K)
			block_grid(type, blk, lo, step, &n_levels);
		for (int64_t j = 0; j < bv; j++) {
			const int64_t i = b * bv + j;
			const double err = fabs((double) x[i] - deq[i]);
			double bound;

			switch (type) {
			case GGML_TYPE_F16: /* round to nearest: half a unit in the last place */
				bound = fmax(fabs(x[i]) * 0x1p-11, 0x1p-25);
				break;
			case GGML_TYPE_BF16:
				bound = fabs(x[i]) * 0x1p-8;
				break;
			case GGML_TYPE_Q8_0:
				bound = fp16_scale_bound(get_u16(blk), 127, 0.5);
				break;
			case GGML_TYPE_Q4_0: {
				/* level 7 (the clamped side) may be a whole step away */
				const float D = fp16_to_f32(get_u16(blk));
				const bool top = D != 0 && nearbyint(deq[i] / D) == 7;
				bound = fp16_scale_bound(get_u16(blk), 8, top ? 1.0 : 0.5);
				break;
			}
			default: /* Q4_K, Q6_K: the nearest grid point, up to float rounding */
				bound = grid_distance(x[i], lo[j], step[j], n_levels) +
					32 * 0x1p-24 * (fabs(x[i]) + fabs(lo[j]) + n_levels * fabs(step[j]));
				break;
			}
			CHECK(err <= bound, "%s: %s value %lld: x %.9g, dequantized %.9g, error %.3g > %.3g",
			      what, quant_type_name(type), (long long) i, x[i], deq[i], err, bound);
		}
	}
	return 0;
}

TEST(weight_quantizers)
{
	static const uint32_t types[] = { GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,
					  GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K };
	/* relative RMS error on N(0,1) rows, with ~25% headroom over what these quantizers
	 * (ggml's reference algorithms) give: a broken search would blow past it */
	static const double max_rel_rmse[] = { 0.0003, 0.0025, 0.0075, 0.11, 0.09, 0.023 };
	const int64_t n = 8 * QK_K;

	rng_start("weight_quantizers");
	for (size_t t = 0; t < ELEMENTSOF(types); t++) {
		const uint32_t type = types[t];
		const size_t bytes = row_bytes(type, n);
		_cleanup_free_ float *x = malloc((size_t) n * sizeof(float));
		_cleanup_free_ float *deq = malloc((size_t) n * sizeof(float));
		_cleanup_free_ uint8_t *q = malloc(bytes);
		double se = 0, sx = 0;

		ASSERT_TRUE(x && deq && q);
		for (int round = 0; round < 40; round++) {
			const float scale = (float) exp(rng_uniform() * 12 - 8);

			for (int64_t i = 0; i < n; i++)
				x[i] = rng_normal() * scale;
			if (round % 4 == 1) /* hard cases in some blocks */
				for (int64_t b = 0; b < n; b += 256)
					switch (rng_below(6)) {
					case 0: /* all zero */
						memset(x + b, 0, 256 * sizeof(float));
						break;
					case 1: /* constant */
						for (int j = 0; j < 256; j++)
							x[b + j] = scale;
						break;
					case 2: /* all positive: the Q4_K min is 0 */
						for (int j = 0; j < 256; j++)
							x[b + j] = fabsf(x[b + j]);
						break;
					case 3: /* one outlier */
						x[b + rng_below(256)] *= 50;
						break;
					case 4: /* sub-blocks of very different scales */
						for (int j = 0; j < 256; j++)
							x[b + j] *= (float) exp2((j / 32) * 2 - 7);
						break;
					default: /* tiny: fp16 scales go subnormal */
						for (int j = 0; j < 256; j++)
							x[b + j] *= 1e-6f;
						break;
					}
			quant_quantize_row(type, x, q, n);
			quant_dequantize_row(type, q, deq, n);
			if (check_row_error(type, x, q, deq, n, "random weights"))
				return 1;
			if (round % 4 == 1)
				continue;
			for (int64_t i = 0; i < n; i++) {
				se += ((double) x[i] - deq[i]) * ((double) x[i] - deq[i]);
				sx += (double) x[i] * x[i];
			}
		}
		CHECK(sqrt(se / sx) <= max_rel_rmse[t], "%s: relative RMS error %.5f > %.5f",
		      quant_type_name(type), sqrt(se / sx), max_rel_rmse[t]);
		/* the reference path is the same code */
		_cleanup_free_ uint8_t *r = malloc(bytes);
		ASSERT_TRUE(r);
		quant_quantize_row_ref(type, x, r, n);
		quant_quantize_row(type, x, q, n);
		ASSERT_TRUE(memcmp(q, r, bytes) == 0);
	}
	return 0;
}

/* ==== the shared tiny models ==== */

static int open_model(const char *stem, struct gguf **ret)
{
	char rel[128];
	const char *path;
	struct errmsg e = {};
	int r;

	snprintf(rel, sizeof(rel), "models/tiny/%s.gguf", stem);
	path = test_shared_path(rel);
	if (access(path, R_OK) < 0) {
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

/*
 * Every 2-D tensor of each quantized tiny model against the same tensor of the F32 model it
 * was made from (llama-quantize --pure): per-element bounds as in check_row_error(), and
 * our quantizer applied to the F32 rows must reproduce the file's blocks: we implement the
 * same reference algorithms (llama-quantize without an imatrix). Q8_0 is the exception:
 * llama-quantize rounds half away from zero with 1/d, our conversion (ggml's activation
 * path) ties to even with 127/amax, so a rare block may differ; and a build with FMA
 * contraction (-march=native) may flip a rare float decision elsewhere: at most 0.1% of
 * blocks may differ, each still within the bounds.
 */
TEST(tiny_models)
{
	static const struct {
		const char *stem;
		uint32_t type;
	} files[] = {
		{ "tiny-llama-f16", GGML_TYPE_F16 },   { "tiny-llama-bf16", GGML_TYPE_BF16 },
		{ "tiny-llama-q8_0", GGML_TYPE_Q8_0 }, { "tiny-llama-q4_0", GGML_TYPE_Q4_0 },
		{ "tiny-llama-q4_k", GGML_TYPE_Q4_K }, { "tiny-llama-q6_k", GGML_TYPE_Q6_K },
		{ "tiny-qwen2-q8_0", GGML_TYPE_Q8_0 },
	};
	_cleanup_(gguf_freep) struct gguf *llama = NULL, *qwen2 = NULL;
	int r;

	rng_start("tiny_models");
	r = open_model("tiny-llama-f32", &llama);
	if (r)
		return r;
	r = open_model("tiny-qwen2-f32", &qwen2);
	if (r)
		return r;
	for (size_t f = 0; f < ELEMENTSOF(files); f++) {
		_cleanup_(gguf_freep) struct gguf *g = NULL;
		const struct gguf *base = strstr(files[f].stem, "qwen2") ? qwen2 : llama;
		const uint32_t type = files[f].type;
		size_t n_2d = 0, blocks = 0, blocks_differ = 0;

		r = open_model(files[f].stem, &g);
		if (r)
			return r;
		for (size_t t = 0; t < gguf_n_tensors(g); t++) {
			const struct gguf_tensor *q = gguf_tensor_at(g, t);
			const struct gguf_tensor *x = gguf_find_tensor(base, q->name);

			ASSERT_TRUE(x != NULL);
			ASSERT_EQ(x->type, GGML_TYPE_F32);
			ASSERT_EQ(q->n_dims, x->n_dims);
			for (int d = 0; d < GGUF_MAX_DIMS; d++)
				ASSERT_EQ(q->ne[d], x->ne[d]);
			if (q->n_dims != 2) { /* the 1-D norms and biases stay F32, bit for bit */
				ASSERT_EQ(q->type, GGML_TYPE_F32);
				ASSERT_TRUE(memcmp(q->data, x->data, x->n_bytes) == 0);
				continue;
			}
			n_2d++;
			ASSERT_EQ(q->type, type);
			const int64_t n = (int64_t) q->ne[0];
			const size_t rb = row_bytes(type, n), bb = quant_block_bytes(type);
			ASSERT_TRUE(rb > 0);
			ASSERT_EQ(q->n_bytes, rb * q->ne[1]);
			_cleanup_free_ float *deq = malloc((size_t) n * sizeof(float));
			_cleanup_free_ uint8_t *mine = malloc(rb);
			ASSERT_TRUE(deq && mine);
			for (uint64_t row = 0; row < q->ne[1]; row++) {
				const float *xr = (const float *) x->data + row * (uint64_t) n;
				const uint8_t *qr = (const uint8_t *) q->data + row * rb;
				char what[160];

				snprintf(what, sizeof(what), "%s %s row %" PRIu64, files[f].stem, q->name, row);
				quant_dequantize_row(type, qr, deq, n);
				if (check_row_error(type, xr, qr, deq, n, what))
					return 1;
				quant_quantize_row(type, xr, mine, n);
				for (size_t b = 0; b < rb / bb; b++) {
					blocks++;
					blocks_differ += memcmp(mine + b * bb, qr + b * bb, bb) != 0;
				}
			}
		}
		printf("  %s: %zu tensors, %zu of %zu blocks differ from our quantizer\n",
		       files[f].stem, n_2d, blocks_differ, blocks);
		ASSERT_TRUE(n_2d >= 15);
		ASSERT_TRUE(blocks_differ * 1000 <= blocks);
	}
	return 0;
}
