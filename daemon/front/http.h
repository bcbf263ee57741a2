/* SPDX-License-Identifier: MIT */
/*
 * http.h: mollyd's OpenAI-compatible HTTP front (libmicrohttpd).
 *
 * Endpoints (docs/http.md has the fields and error codes):
 *   GET  /v1/models, /v1/models/{id}      the base and every loaded adapter
 *   POST /v1/completions                  text completion (stream: server-sent events)
 *   POST /v1/chat/completions             chat completion (stream: server-sent events)
 *   POST /v1/load_lora_adapter            vLLM's body {"lora_name","lora_path"}; Admin= only
 *   POST /v1/unload_lora_adapter          vLLM's body {"lora_name"}; Admin= only
 *   GET  /metrics                         Prometheus text (molly_* and vLLM's series)
 *   GET  /health                          200 while serving, 503 while stopping
 *
 * Listening: [HTTP] Listen= 127.0.0.1:PORT, [::1]:PORT or unix:PATH; the config refuses public
 * addresses unless AllowNonLoopback=yes. The front binds the socket itself (so port 0 works and
 * http_front_address() tells the port) and hands it to microhttpd.
 *
 * Authentication: with [Member] sections configured, /v1/ requests need "Authorization: Bearer
 * KEY" matching a member's KeyHash= (401 otherwise), or, on a unix socket, a peer uid in a
 * member's UIDs=. The member's Models= scopes are enforced by the manager (403), Admin= by the
 * adapter endpoints (403; without members nobody is admin over HTTP). /metrics and /health are
 * open, as in vLLM.
 *
 * Threading: microhttpd runs its own threads (a small pool with epoll); handlers never block on
 * generation: a generation request suspends its connection, the manager's events (scheduler
 * thread) are copied into the request's bounded queue and resume it, and the connection's
 * content reader turns them into JSON or SSE chunks. A client that disconnects (seen by an
 * epoll watcher on EPOLLRDHUP, or by a failed write) cancels its request.
 * http_front_new/free/reload/stop_accepting are for the main thread.
 */
#pragma once

#include "../basic/errmsg.h"
#include "../basic/macro.h"

struct config;
struct manager;
struct http_front;

/*
 * Starts serving on cfg's [HTTP] Listen= (nothing to do, *ret = NULL and 0, when Listen= is
 * empty). The manager must outlive the front. Errors (bind failures, a public address without
 * AllowNonLoopback=) are explained in e.
 */
int http_front_new(struct manager *m, const struct config *cfg, struct http_front **ret,
		   struct errmsg *e);

/*
 * Stops accepting, cancels the generations still in flight (each client gets its final error
 * event or response, bounded in time), then stops microhttpd. Call before manager_free().
 * NULL-safe; returns NULL.
 */
struct http_front *http_front_free(struct http_front *h);
DEFINE_CLEANUP_FUNC(struct http_front *, http_front_free, NULL)

/*
 * SIGHUP: members, keys, scopes and MaxBodyBytes= are read from the manager's current config on
 * every request, so they apply at once. Listen= cannot change without a restart: 1 with a
 * message in e when it differs, 0 otherwise.
 */
int http_front_reload(struct http_front *h, const struct config *cfg, struct errmsg *e);

/* SIGTERM: new requests get 503 from now on; requests in flight continue. */
void http_front_stop_accepting(struct http_front *h);

/* "127.0.0.1:8411", "[::1]:8411" or "unix:/run/molly/http.sock" (the bound port when Listen=
 * said 0). Valid until http_front_free(). */
const char *http_front_address(const struct http_front *h);
