/* SPDX-License-Identifier: MIT */
/*
 * simd-levels.h: the SIMD levels a kernel test runs its cases at, for the tests that compare
 * every level with the scalar reference (test-quant, test-matmul, test-forward-attention,
 * test-sampler). Include after test.h and engine/quant.h.
 *
 * levels[] lists every level the engine has, best first; a case loops over them and skips
 * the ones quant_force_simd_level() refuses. TEST(simd_paths) prints which levels ran, which
 * were skipped because this CPU lacks an instruction set, and which were held back as
 * unproven (quant.c: MOLLY_CPU_UNPROVEN=1 runs them), so that a skipped level is never
 * mistaken for a passed one.
 */
#pragma once

#define TEST_LEVELS_MAX 16

static const char *levels[TEST_LEVELS_MAX];
static size_t n_levels;

__attribute__((constructor)) static void test_levels_init(void)
{
	n_levels = quant_simd_levels(levels, TEST_LEVELS_MAX);
}

TEST(simd_paths)
{
	static const char *const what[] = {
		[QUANT_LEVEL_RUNS] = "ran",
		[QUANT_LEVEL_NO_ISA] = "skipped (this CPU lacks an instruction set it needs)",
		[QUANT_LEVEL_UNPROVEN] = ("held back (never proven on such a CPU; MOLLY_CPU_UNPROVEN=1 "
					  "runs it)"),
	};

	ASSERT_TRUE(n_levels >= 2);
	for (int s = QUANT_LEVEL_RUNS; s <= QUANT_LEVEL_UNPROVEN; s++) {
		bool any = false;

		printf("  %s:", what[s]);
		for (size_t i = 0; i < n_levels; i++)
			if ((int) quant_simd_level_state(levels[i]) == s) {
				printf(" %s", levels[i]);
				any = true;
			}
		printf("%s\n", any ? "" : " none");
	}
	for (size_t i = 0; i < n_levels; i++)
		if (quant_simd_level_state(levels[i]) == QUANT_LEVEL_RUNS)
			printf("  %s proven on: %s\n", levels[i],
			       quant_simd_level_proven(levels[i]) ? quant_simd_level_proven(levels[i])
								  : "(not yet: MOLLY_CPU_UNPROVEN=1)");
	ASSERT_TRUE(quant_simd_level_state("scalar") == QUANT_LEVEL_RUNS);
	return 0;
}
