/* SPDX-License-Identifier: MIT */
/*
 * bench-load.h: `molly-bench --adapter-load FILE... [--path uring|pread|mmap] [--verify]
 * [--json] [--queue-depth N] [--chunk BYTES]` — reads the files whole as bytes (any file) with
 * the adapter loader (blob-load.h) and reports the rate. With --json the last line is one
 * object: {"path" (the path that really ran), "bytes", "seconds", "gb_s" (= bytes / seconds /
 * 1e9), "verify", "hash", "hash_seconds", "files", "queue_depth", "chunk_bytes"}.
 * The caller drops the page cache when it wants cold reads (tools/bench-adapter-load.sh).
 */
#pragma once

/* Returns the process exit status (0 ok, 1 error, 2 usage). */
int bench_adapter_load(int argc, char **argv);
