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

/*
 * `molly-bench --tier-serve --model M [--adapters 64,128,256,512,1000] [--hot-slots 64]
 * [--requests R] [--concurrency C] [--threads T] [--seed S] [--json]` — the same Zipf(1.0)
 * request trace over each working set of generated adapters (ranks 4–64 mixed, Molly blobs
 * in /var/tmp), run twice: every adapter hot beforehand (the all-hot time), then tiered with
 * room for hot-slots mean adapters hot and as much warm (cold reads with io_uring). Reports
 * the measured time against predicted = all-hot time + missed bytes ÷ the loader's bandwidth
 * (bytes read ÷ load time), both from the same run.
 */
int bench_tier_serve(int argc, char **argv);
