/* SPDX-License-Identifier: MIT */
/*
 * test-amx-emulated: the "amx" level's packed Q8_0 / Q4_0 kernel (daemon/engine/amx-gemm.h)
 * run through a C model of the AMX instructions it uses, on any CPU, bit for bit against
 * the scalar reference (quant_gemm_packed_ref()).
 *
 * No CPU here has AMX and no emulator here runs it, so this is what can be checked before a
 * Sapphire Rapids session proves the level: the tile shapes and their configuration (the
 * model refuses a tdpbssd whose shapes the hardware would fault on), the strides and
 * offsets into the packed weights and the activations, the Q4_0 unpacking, the padding of a
 * last partial token tile (the activations end at a guard page: a tile that read past them
 * faults here), the float step, rows and tokens past the ends left unwritten. The model
 * follows the instructions' definitions (Intel SDM: LDTILECFG, TILELOADD, TILEZERO, TDPBSSD,
 * TILESTORED, TILERELEASE).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test.h"
#include "basic/macro.h"
#include "engine/kernels.h"
#include "engine/quant.h"

/* ---- the model of the tile unit ---- */

static struct {
	bool configured;
	uint8_t rows[8];
	uint16_t colsb[8];
	int8_t t[8][16][64];
	int errors; /* operations the hardware would fault on */
} amx;

static void emu_loadconfig(const void *cfg)
{
	const uint8_t *c = cfg;

	memset(&amx.t, 0, sizeof(amx.t));
	if (c[0] != 1) /* palette 1: 8 tiles of up to 16 rows × 64 bytes */
		amx.errors++;
	for (int i = 0; i < 8; i++) {
		memcpy(&amx.colsb[i], c + 16 + 2 * i, 2);
		amx.rows[i] = c[48 + i];
		if (amx.rows[i] > 16 || amx.colsb[i] > 64)
			amx.errors++;
	}
	amx.configured = true;
}

static bool emu_usable(int t)
{
	if (!amx.configured || t < 0 || t > 7 || !amx.rows[t] || !amx.colsb[t]) {
		amx.errors++;
		return false;
	}
	return true;
}

static void emu_loadd(int t, const void *base, size_t stride)
{
	if (!emu_usable(t))
		return;
	memset(amx.t[t], 0, sizeof(amx.t[t]));
	for (int r = 0; r < amx.rows[t]; r++)
		memcpy(amx.t[t][r], (const char *) base + (size_t) r * stride, amx.colsb[t]);
}

static void emu_zero(int t)
{
	if (emu_usable(t))
		memset(amx.t[t], 0, sizeof(amx.t[t]));
}

/* C[m][n] += Σ_k Σ_j A[m][4k + j] · B[k][4n + j] in int32, the shapes checked as the
 * hardware checks them (#UD otherwise) */
static void emu_dpbssd(int c, int a, int b)
{
	if (!emu_usable(c) || !emu_usable(a) || !emu_usable(b))
		return;
	if (amx.colsb[a] % 4 || amx.rows[b] != amx.colsb[a] / 4 || amx.colsb[c] != amx.colsb[b] ||
	    amx.rows[c] != amx.rows[a] || c == a || c == b || a == b) {
		amx.errors++;
		return;
	}
	for (int m = 0; m < amx.rows[c]; m++)
		for (int n = 0; n < amx.colsb[c] / 4; n++) {
			int32_t acc;

			memcpy(&acc, &amx.t[c][m][4 * n], 4);
			for (int k = 0; k < amx.colsb[a] / 4; k++)
				for (int j = 0; j < 4; j++)
					acc += (int32_t) amx.t[a][m][4 * k + j] * amx.t[b][k][4 * n + j];
			memcpy(&amx.t[c][m][4 * n], &acc, 4);
		}
}

static void emu_stored(int t, void *base, size_t stride)
{
	if (!emu_usable(t))
		return;
	for (int r = 0; r < amx.rows[t]; r++)
		memcpy((char *) base + (size_t) r * stride, amx.t[t][r], amx.colsb[t]);
}

static void emu_release(void)
{
	amx.configured = false;
}

#define AMX_LOADCONFIG(cfg) emu_loadconfig(cfg)
#define AMX_LOADD(t, base, stride) emu_loadd(t, base, stride)
#define AMX_ZERO(t) emu_zero(t)
#define AMX_DPBSSD(c, a, b) emu_dpbssd(c, a, b)
#define AMX_STORED(t, base, stride) emu_stored(t, base, stride)
#define AMX_RELEASE() emu_release()
#define AMX_FP16(h) fp16_to_f32(h)

#include "engine/amx-gemm.h"

/* ---- the cases ---- */

/* bytes at the end of a mapping whose next page is inaccessible: a read past them faults */
struct guarded {
	void *map;
	size_t map_bytes;
	void *p;
};

static void *guarded_new(struct guarded *g, size_t bytes)
{
	size_t page = (size_t) sysconf(_SC_PAGESIZE), data = (bytes + page - 1) / page * page;

	g->map_bytes = data + page;
	g->map = mmap(NULL, g->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g->map == MAP_FAILED)
		return NULL;
	if (mprotect((char *) g->map + data, page, PROT_NONE) < 0)
		return NULL;
	g->p = (char *) g->map + data - bytes;
	return g->p;
}

static void guarded_free(struct guarded *g)
{
	if (g->map && g->map != MAP_FAILED)
		munmap(g->map, g->map_bytes);
}

static int check_case(uint32_t type, int64_t n, int64_t nr, int64_t nc)
{
	const size_t row_bytes = (size_t) quant_row_bytes(type, n);
	const size_t x_row = (size_t) quant_row_bytes(GGML_TYPE_Q8_0, n);
	const size_t x_stride = x_row + 6; /* rows not back to back, as a caller may pass them */
	const size_t y_stride = (size_t) nr + 3;
	const size_t packed_bytes = quant_packed_bytes(type, n, nr);
	_cleanup_free_ float *v = malloc(sizeof(float) * (size_t) n);
	_cleanup_free_ char *wq = malloc(row_bytes * (size_t) nr);
	_cleanup_free_ float *y = malloc(sizeof(float) * y_stride * (size_t) nc);
	_cleanup_free_ float *yref = malloc(sizeof(float) * y_stride * (size_t) nc);
	struct guarded gx = {}, gw = {};
	char *x = guarded_new(&gx, x_stride * (size_t) (nc - 1) + x_row);
	void *wp = guarded_new(&gw, packed_bytes);
	int ret = 0;

	ASSERT_TRUE(v && wq && y && yref && x && wp && packed_bytes);
	for (int64_t r = 0; r < nr; r++) {
		for (int64_t i = 0; i < n; i++)
			v[i] = (float) (test_uniform() * 2 - 1);
		quant_quantize_row_ref(type, v, wq + (size_t) r * row_bytes, n);
	}
	quant_pack_rows(type, n, wq, row_bytes, nr, wp);
	for (int64_t c = 0; c < nc; c++) {
		for (int64_t i = 0; i < n; i++)
			v[i] = (float) ((test_uniform() * 2 - 1) * 4);
		quant_quantize_row_ref(GGML_TYPE_Q8_0, v, x + (size_t) c * x_stride, n);
	}
	/* a sentinel where nothing may be written: the row padding of y */
	for (size_t i = 0; i < y_stride * (size_t) nc; i++)
		y[i] = yref[i] = -12345.0f;
	quant_gemm_packed_ref(type, n, wp, nr, x, x_stride, NULL, nc, yref, y_stride);
	amx.errors = 0;
	amx_gemm_packed(type == GGML_TYPE_Q4_0, n, wp, nr, x, x_stride, nc, y, y_stride);
	if (amx.errors) {
		TEST_FAIL_("%s n %lld nr %lld nc %lld: %d tile operations the hardware would refuse",
			   quant_type_name(type), (long long) n, (long long) nr, (long long) nc,
			   amx.errors);
		ret = 1;
	} else if (amx.configured) {
		TEST_FAIL_("%s: the tiles were not released", quant_type_name(type));
		ret = 1;
	} else if (memcmp(y, yref, sizeof(float) * y_stride * (size_t) nc) != 0) {
		for (int64_t c = 0; c < nc && !ret; c++)
			for (size_t r = 0; r < y_stride && !ret; r++)
				if (memcmp(&y[(size_t) c * y_stride + r], &yref[(size_t) c * y_stride + r], 4)) {
					TEST_FAIL_("%s n %lld nr %lld nc %lld: token %lld row %zu: %.9g vs "
						   "reference %.9g",
						   quant_type_name(type), (long long) n, (long long) nr,
						   (long long) nc, (long long) c, r,
						   (double) y[(size_t) c * y_stride + r],
						   (double) yref[(size_t) c * y_stride + r]);
					ret = 1;
				}
	}
	guarded_free(&gx);
	guarded_free(&gw);
	return ret;
}

TEST(amx_packed_emulated_equals_reference)
{
	static const uint32_t types[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q4_0 };
	static const int64_t ns[] = { 32, 96, 320 };
	/* one group, a whole pair, a pair and a half, a pair and 9 rows, a partial last group,
	 * several pairs */
	static const int64_t nrs[] = { 8, 16, 24, 41, 45, 64 };
	/* below a tile, one tile, a tile and one, whole and partial 64-token passes */
	static const int64_t ncs[] = { 1, 5, 16, 17, 64, 70, 130 };

	test_seed_rng();
	for (size_t t = 0; t < ELEMENTSOF(types); t++)
		for (size_t a = 0; a < ELEMENTSOF(ns); a++)
			for (size_t b = 0; b < ELEMENTSOF(nrs); b++)
				for (size_t c = 0; c < ELEMENTSOF(ncs); c++)
					if (check_case(types[t], ns[a], nrs[b], ncs[c]))
						return 1;
	return 0;
}

/* The model itself: a tdpbssd on known bytes, and a shape the hardware refuses. */
TEST(amx_model_known_answer)
{
	struct amx_tilecfg cfg;
	int8_t a[16][32], b[8][32];
	int32_t c[16][8];

	amx_config(&cfg);
	for (int m = 0; m < 16; m++)
		for (int k = 0; k < 32; k++)
			a[m][k] = (int8_t) (m - k);
	for (int k = 0; k < 8; k++)
		for (int j = 0; j < 32; j++)
			b[k][j] = (int8_t) (3 * k - j);
	amx.errors = 0;
	emu_loadconfig(&cfg);
	emu_loadd(AMX_T_A, a, 32);
	emu_loadd(AMX_T_B0, b, 32);
	emu_zero(AMX_T_C0);
	emu_dpbssd(AMX_T_C0, AMX_T_A, AMX_T_B0);
	emu_stored(AMX_T_C0, c, 32);
	ASSERT_EQ(amx.errors, 0);
	/* C[m][n] = Σ_{kk < 32} a[m][kk] · b[kk / 4][4n + kk % 4] */
	for (int m = 0; m < 16; m++)
		for (int n = 0; n < 8; n++) {
			int32_t want = 0;

			for (int kk = 0; kk < 32; kk++)
				want += (m - kk) * (3 * (kk / 4) - (4 * n + kk % 4));
			ASSERT_EQ(c[m][n], want);
		}
	/* B with 16 rows for an A of 32 bytes: K / 4 = 8 rows are required */
	cfg.rows[AMX_T_B1] = 16;
	emu_loadconfig(&cfg);
	emu_dpbssd(AMX_T_C1, AMX_T_A, AMX_T_B1);
	ASSERT_TRUE(amx.errors > 0);
	emu_release();
	return 0;
}
