/* SPDX-License-Identifier: MIT */
/*
 * kernels-amx.c: the "amx" level's packed Q8_0 / Q4_0 tile products (amx-gemm.h) on the AMX
 * tile unit (AMX-TILE + AMX-INT8, Sapphire Rapids and later). Built with the AMX and
 * AVX-512 flags; quant.c calls it only when cpuid reports AMX, the kernel grants this process
 * the tile state (arch_prctl ARCH_REQ_XCOMP_PERM) and the level is proven or
 * MOLLY_CPU_UNPROVEN=1 is set. Short batches (decode) go to the AVX-512 VNNI kernels: below
 * AMX_MIN_TOKENS tokens an A tile would be mostly padding.
 */
#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "kernels.h"
#include "quant.h"

#define AMX_LOADCONFIG(cfg) _tile_loadconfig(cfg)
#define AMX_LOADD(t, base, stride) _tile_loadd(t, base, stride)
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define AMX_STORED(t, base, stride) _tile_stored(t, base, stride)
#define AMX_RELEASE() _tile_release()
#define AMX_FP16(h) _cvtsh_ss(h)

#include "amx-gemm.h"

#define AMX_MIN_TOKENS 16

#define DEFINE_AMX_PACKED(kind, q4)                                                               \
	void quant_gemm_packed_##kind##_amx(int64_t n, const void *w, int64_t nr, const void *x,   \
					    size_t xs, const int16_t *sums, int64_t nc, float *y,   \
					    size_t ys)                                              \
	{                                                                                         \
		if (nc < AMX_MIN_TOKENS)                                                          \
			quant_kernels_avx512vnni.gemm_packed_##kind(n, w, nr, x, xs, sums, nc, y, ys); \
		else                                                                              \
			amx_gemm_packed(q4, n, w, nr, x, xs, nc, y, ys);                          \
	}

DEFINE_AMX_PACKED(q8_0, false)
DEFINE_AMX_PACKED(q4_0, true)

#endif
