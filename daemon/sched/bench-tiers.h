/* SPDX-License-Identifier: MIT */
/*
 * bench-tiers.h: `molly-bench --cold-ttft --model M --adapter FILE [--reps R] [--threads T]
 * [--json]` — time to the first token of a one-token request whose adapter is cold (its blob
 * out of the page cache: POSIX_FADV_DONTNEED, then read by the loader, checked, made hot)
 * against the same request once the adapter is hot, and against no adapter; medians of R
 * fresh schedulers. FILE is any adapter format; it is written as a Molly blob first, as the
 * registry stores it.
 */
#pragma once

int bench_cold_ttft(int argc, char **argv);
