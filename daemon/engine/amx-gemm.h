/* SPDX-License-Identifier: MIT */
/*
 * amx-gemm.h: the AMX packed Q8_0 / Q4_0 tile product, written once over six tile operations
 * that the includer defines:
 *
 *   AMX_LOADCONFIG(cfg)       ldtilecfg: the palette and each tile's rows and bytes per row
 *   AMX_LOADD(t, base, stride) tileloadd: tile t's rows from base, stride bytes apart
 *   AMX_ZERO(t)               tilezero
 *   AMX_DPBSSD(c, a, b)       tdpbssd: C[m][n] += Σ_k A[m][4k + j] · B[k][4n + j], int8 × int8
 *   AMX_STORED(t, base, stride) tilestored
 *   AMX_RELEASE()             tilerelease
 *
 * and AMX_FP16(h), an fp16 → float conversion. kernels-amx.c defines them as the AMX
 * intrinsics (the "amx" level); tests/test-amx-emulated.c as a C model of the instructions'
 * documented semantics, so the layout, strides, padding and the float step are checked on
 * CPUs without AMX, against the scalar reference, bit for bit. What that cannot check is
 * the hardware itself: the level stays held back (quant.c) until its tests pass on a CPU
 * that has AMX.
 *
 * Why these shapes: the packed layout (quant.h) already holds each 8-row group's block as
 * 8 k-rows of 32 bytes (rows r × 4 values), which is an AMX B tile of K = 32, N = 8 as it
 * lies in memory (Q8_0: loaded in place; Q4_0: nibbles unpacked to int8 - 8 first). K stays
 * 32, one block, because every block has its own scales: each block's int32 sums leave the
 * tile unit and go into float as the reference computes them, acc = fmaf(sum, d_w · d_x,
 * acc) in block order; so the result has the scalar reference's bits. Tiles: A (16 tokens ×
 * 32 bytes), B0 and B1 (two groups: 16 rows), C0 and C1 (16 × 8 int32).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "quant.h"

#define AMX_M 16          /* tokens per A tile */
#define AMX_TOKENS 64     /* tokens per pass over a row pair's blocks (the float accumulators) */
#define AMX_T_A 0
#define AMX_T_B0 1
#define AMX_T_B1 2
#define AMX_T_C0 3
#define AMX_T_C1 4

/* The 64-byte tile configuration (palette 1), as ldtilecfg reads it. */
struct amx_tilecfg {
	uint8_t palette_id;
	uint8_t start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

static void amx_config(struct amx_tilecfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->palette_id = 1;
	cfg->rows[AMX_T_A] = AMX_M, cfg->colsb[AMX_T_A] = 32;      /* 16 tokens × one block */
	cfg->rows[AMX_T_B0] = 8, cfg->colsb[AMX_T_B0] = 32;        /* K/4 = 8 rows × 8 rows · 4 */
	cfg->rows[AMX_T_B1] = 8, cfg->colsb[AMX_T_B1] = 32;
	cfg->rows[AMX_T_C0] = AMX_M, cfg->colsb[AMX_T_C0] = 32;    /* 16 tokens × 8 int32 */
	cfg->rows[AMX_T_C1] = AMX_M, cfg->colsb[AMX_T_C1] = 32;
}

/* Q4_0 block of a group (4 k-rows of 32 bytes, two nibbles each) as 8 int8 k-rows. */
static void amx_unpack_q4_0(const uint8_t *q, int8_t out[8][32])
{
	for (int k = 0; k < 4; k++)
		for (int j = 0; j < 32; j++) {
			out[k][j] = (int8_t) ((q[32 * k + j] & 0xf) - 8);
			out[k + 4][j] = (int8_t) ((q[32 * k + j] >> 4) - 8);
		}
}

/*
 * quant_gemm_packed() for Q8_0 (q4 false) or Q4_0 (q4 true): y[c][r] for c < nc, r < nr,
 * w at the group of row 0, x rows of Q8_0 blocks x_stride bytes apart. Any nc >= 1.
 */
static void amx_gemm_packed(bool q4, int64_t n, const void *w, int64_t nr, const void *x,
			    size_t x_stride, int64_t nc, float *y, size_t y_stride)
{
	const size_t bb = q4 ? QUANT_PACKED_Q4_0_BLOCK : QUANT_PACKED_Q8_0_BLOCK;
	const int64_t nb = n / 32;
	const size_t group_bytes = (size_t) nb * bb;
	struct amx_tilecfg cfg;

	amx_config(&cfg);
	AMX_LOADCONFIG(&cfg);
	for (int64_t r0 = 0; r0 < nr; r0 += 16) {
		const uint8_t *g0 = (const uint8_t *) w + (size_t) (r0 / 8) * group_bytes;
		const uint8_t *g1 = g0 + group_bytes;
		const int nrow = (int) (nr - r0 < 16 ? nr - r0 : 16);
		const int two = nrow > 8; /* a second group in this pair */

		for (int64_t t0 = 0; t0 < nc; t0 += AMX_TOKENS) {
			const int nt = (int) (nc - t0 < AMX_TOKENS ? nc - t0 : AMX_TOKENS);
			float acc[AMX_TOKENS][16];

			memset(acc, 0, sizeof(acc));
			for (int64_t b = 0; b < nb; b++) {
				const uint8_t *gb[2] = { g0 + (size_t) b * bb, g1 + (size_t) b * bb };
				int8_t unpacked[2][8][32];
				float dw[16];

				for (int h = 0; h < 1 + two; h++) {
					for (int r = 0; r < 8; r++) {
						uint16_t d;

						memcpy(&d, gb[h] + 2 * r, 2);
						dw[8 * h + r] = AMX_FP16(d);
					}
				}
				/* (the tile numbers are immediates: no expression may pick them) */
				if (q4) {
					amx_unpack_q4_0(gb[0] + 16, unpacked[0]);
					AMX_LOADD(AMX_T_B0, unpacked[0], 32);
					if (two) {
						amx_unpack_q4_0(gb[1] + 16, unpacked[1]);
						AMX_LOADD(AMX_T_B1, unpacked[1], 32);
					}
				} else {
					AMX_LOADD(AMX_T_B0, gb[0] + 16, 32);
					if (two)
						AMX_LOADD(AMX_T_B1, gb[1] + 16, 32);
				}
				for (int tt = 0; tt < nt; tt += AMX_M) {
					const int m_valid = nt - tt < AMX_M ? nt - tt : AMX_M;
					const char *xb = (const char *) x + (size_t) (t0 + tt) * x_stride +
							 (size_t) b * sizeof(struct block_q8_0);
					int32_t c[2][AMX_M][8];
					int8_t pad[AMX_M][32];

					if (m_valid == AMX_M) {
						AMX_LOADD(AMX_T_A, xb + 2, x_stride);
					} else {
						/* the last tokens, with zero rows below them: a tile
						 * never reads past the activations */
						memset(pad, 0, sizeof(pad));
						for (int m = 0; m < m_valid; m++)
							memcpy(pad[m], xb + (size_t) m * x_stride + 2, 32);
						AMX_LOADD(AMX_T_A, pad, 32);
					}
					AMX_ZERO(AMX_T_C0);
					AMX_DPBSSD(AMX_T_C0, AMX_T_A, AMX_T_B0);
					AMX_STORED(AMX_T_C0, c[0], 32);
					if (two) {
						AMX_ZERO(AMX_T_C1);
						AMX_DPBSSD(AMX_T_C1, AMX_T_A, AMX_T_B1);
						AMX_STORED(AMX_T_C1, c[1], 32);
					}
					for (int m = 0; m < m_valid; m++) {
						uint16_t dxh;
						float dx, *a = acc[tt + m];

						memcpy(&dxh, xb + (size_t) m * x_stride, 2);
						dx = AMX_FP16(dxh);
						for (int h = 0; h < 1 + two; h++)
							for (int r = 0; r < 8; r++)
								a[8 * h + r] = fmaf((float) c[h][m][r],
										    dw[8 * h + r] * dx,
										    a[8 * h + r]);
					}
				}
			}
			for (int m = 0; m < nt; m++)
				for (int r = 0; r < nrow; r++)
					y[(size_t) (t0 + m) * y_stride + (size_t) (r0 + r)] = acc[m][r];
		}
	}
	AMX_RELEASE();
}
