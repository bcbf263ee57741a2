/* SPDX-License-Identifier: MIT */
/* Tests for targets/remote.h: SSE parsing (however split), backoff bounds, credential files,
 * and whole calls against a scripted HTTP server on 127.0.0.1 (retries, timeouts, typed
 * errors, cool-down, cancel). */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loopback.h"
#include "targets/remote.h"
#include "test.h"

/* ---- SSE ---- */

struct sse_log {
	char events[16][256];
	int n;
};

static int sse_collect(const char *data, size_t len, void *userdata)
{
	struct sse_log *l = userdata;

	if (l->n < 16)
		snprintf(l->events[l->n++], 256, "%.*s", (int) len, data);
	return 0;
}

static const char sse_text[] = ": keep-alive\r\n"
			       "data: {\"a\":1}\r\n\r\n"
			       "event: message\n"
			       "data: line1\n"
			       "data: line2\n\n"
			       "data:nospace\r\r"
			       "id: 7\n"
			       "data: [DONE]\n\n"
			       "data: tail";

static int check_sse_log(const struct sse_log *l)
{
	ASSERT_EQ(l->n, 5);
	ASSERT_STREQ(l->events[0], "{\"a\":1}");
	ASSERT_STREQ(l->events[1], "line1\nline2");
	ASSERT_STREQ(l->events[2], "nospace");
	ASSERT_STREQ(l->events[3], "[DONE]");
	ASSERT_STREQ(l->events[4], "tail");
	return 0;
}

TEST(sse_whole)
{
	struct sse_log l = { 0 };
	_cleanup_(remote_sse_freep) struct remote_sse *s = NULL;

	ASSERT_OK(remote_sse_new(sse_collect, &l, &s));
	ASSERT_OK(remote_sse_feed(s, sse_text, strlen(sse_text)));
	ASSERT_EQ(l.n, 4);
	ASSERT_OK(remote_sse_finish(s));
	return check_sse_log(&l);
}

TEST(sse_split_everywhere)
{
	size_t n = strlen(sse_text);

	/* Every split into two pieces, then byte by byte: the same events. */
	for (size_t cut = 0; cut <= n; cut++) {
		struct sse_log l = { 0 };
		_cleanup_(remote_sse_freep) struct remote_sse *s = NULL;
		ASSERT_OK(remote_sse_new(sse_collect, &l, &s));
		ASSERT_OK(remote_sse_feed(s, sse_text, cut));
		ASSERT_OK(remote_sse_feed(s, sse_text + cut, n - cut));
		ASSERT_OK(remote_sse_finish(s));
		if (check_sse_log(&l))
			TEST_FAIL_("split at %zu", cut);
	}
	{
		struct sse_log l = { 0 };
		_cleanup_(remote_sse_freep) struct remote_sse *s = NULL;
		ASSERT_OK(remote_sse_new(sse_collect, &l, &s));
		for (size_t i = 0; i < n; i++)
			ASSERT_OK(remote_sse_feed(s, sse_text + i, 1));
		ASSERT_OK(remote_sse_finish(s));
		return check_sse_log(&l);
	}
}

static int sse_stop(const char *data, size_t len, void *userdata)
{
	return -ECANCELED;
}

TEST(sse_callback_stops)
{
	_cleanup_(remote_sse_freep) struct remote_sse *s = NULL;

	ASSERT_OK(remote_sse_new(sse_stop, NULL, &s));
	ASSERT_ERR(remote_sse_feed(s, "data: x\n\n", 9), -ECANCELED);
	return 0;
}

/* ---- backoff ---- */

TEST(backoff_bounds)
{
	const uint64_t base = 100000000ull, max = 2000000000ull;

	ASSERT_EQ(remote_backoff_ns(1, base, max, 1.0), base);
	ASSERT_EQ(remote_backoff_ns(2, base, max, 1.0), 2 * base);
	ASSERT_EQ(remote_backoff_ns(3, base, max, 1.0), 4 * base);
	ASSERT_EQ(remote_backoff_ns(1, base, max, 0.0), base / 2);
	/* Capped however many attempts, and never overflowing. */
	for (uint32_t a = 1; a < 1000; a += 7)
		for (double j = 0; j <= 1.0; j += 0.25) {
			uint64_t d = remote_backoff_ns(a, base, max, j);
			ASSERT_TRUE(d >= base / 2 && d <= max);
		}
	ASSERT_EQ(remote_backoff_ns(UINT32_MAX, base, max, 1.0), max);
	ASSERT_EQ(remote_backoff_ns(5, base, max, NAN), remote_backoff_ns(5, base, max, 0.0));
	ASSERT_EQ(remote_backoff_ns(64, UINT64_MAX / 2, UINT64_MAX, 1.0), UINT64_MAX);
	return 0;
}

/* ---- credentials ---- */

static char tmpdir[64];

static const char *tmp_file(const char *name, const char *content, mode_t mode)
{
	static char path[128];
	FILE *f;

	if (!tmpdir[0]) {
		snprintf(tmpdir, sizeof(tmpdir), "/tmp/test-remote-XXXXXX");
		if (!mkdtemp(tmpdir))
			return NULL;
	}
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	if (!f)
		return NULL;
	fputs(content, f);
	fclose(f);
	chmod(path, mode);
	return path;
}

TEST(credential_permissions)
{
	struct errmsg e = { { 0 } };
	char *key = NULL;
	const char *p;

	p = tmp_file("ok", "  sk-test-123\n", 0600);
	ASSERT_OK(remote_credential_read(p, &key, &e));
	ASSERT_STREQ(key, "sk-test-123");
	free(key);
	key = NULL;
	p = tmp_file("group", "sk-g\n", 0640);
	ASSERT_OK(remote_credential_read(p, &key, &e));
	free(key);
	key = NULL;
	p = tmp_file("world", "sk-w\n", 0644);
	ASSERT_ERR(remote_credential_read(p, &key, &e), -EPERM);
	ASSERT_TRUE(strstr(e.text, "other users") != NULL);
	ASSERT_TRUE(key == NULL);
	p = tmp_file("worldw", "sk-w\n", 0602);
	ASSERT_ERR(remote_credential_read(p, &key, &e), -EPERM);
	p = tmp_file("empty", " \n", 0600);
	ASSERT_ERR(remote_credential_read(p, &key, &e), -EINVAL);
	p = tmp_file("lines", "a\nb\n", 0600);
	ASSERT_ERR(remote_credential_read(p, &key, &e), -EINVAL);
	ASSERT_ERR(remote_credential_read(tmpdir, &key, &e), -EINVAL);
	ASSERT_ERR(remote_credential_read("/nonexistent/x", &key, &e), -ENOENT);

	/* The target refuses to start with a world-readable key. */
	{
		struct remote_target *t = NULL;
		struct remote_target_config c = { .name = "t", .url = "http://127.0.0.1:9",
						  .credential_file = tmp_file("w2", "k", 0604) };
		ASSERT_ERR(remote_target_new(&c, &t, &e), -EPERM);
		ASSERT_TRUE(strstr(e.text, "target t") != NULL);
		/* A credential name needs $CREDENTIALS_DIRECTORY. */
		c.credential_file = "ok";
		unsetenv("CREDENTIALS_DIRECTORY");
		ASSERT_ERR(remote_target_new(&c, &t, &e), -ENOENT);
		setenv("CREDENTIALS_DIRECTORY", tmpdir, 1);
		ASSERT_OK(remote_target_new(&c, &t, &e));
		remote_target_free(t);
		unsetenv("CREDENTIALS_DIRECTORY");
	}
	{
		static const char *const names[] = { "ok", "group", "world", "worldw",
						     "empty", "lines", "w2" };
		char path[128];
		for (size_t i = 0; i < ELEMENTSOF(names); i++) {
			snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
			(void) unlink(path);
		}
		(void) rmdir(tmpdir);
	}
	return 0;
}

/* ---- a scripted server on 127.0.0.1 ---- */

enum script {
	S_OK,          /* a chat stream, split mid-JSON, with usage */
	S_500,
	S_HANG,        /* reads the request, answers nothing until server_stop() */
	S_CLOSE,       /* closes without answering */
	S_CONTEXT,     /* 400 context_length_exceeded */
	S_MIDDROP,     /* a chunk of text, then the connection drops */
	S_KEEP,        /* S_OK's answer with a length, then the next request on the same connection */
};

struct server {
	int fd;
	uint16_t port;
	pthread_t thread;
	enum script scripts[16]; /* per connection; the last repeats */
	int n_scripts;
	atomic_int connections;
	atomic_int requests;
	atomic_bool stop;
	char last_request[8192];
};

/* Reads one request; false when the peer closed before sending any. */
static bool read_request(int c, struct server *s)
{
	char buf[8192];
	size_t n = 0;
	char *hdr_end = NULL;
	size_t body = 0;

	while (n < sizeof(buf) - 1) {
		ssize_t k = read(c, buf + n, sizeof(buf) - 1 - n);
		if (k <= 0)
			break;
		n += (size_t) k;
		buf[n] = 0;
		if (!hdr_end && (hdr_end = strstr(buf, "\r\n\r\n"))) {
			const char *cl = strcasestr(buf, "Content-Length:");
			body = cl ? strtoul(cl + 15, NULL, 10) : 0;
		}
		if (hdr_end && n >= (size_t) (hdr_end + 4 - buf) + body)
			break;
	}
	snprintf(s->last_request, sizeof(s->last_request), "%s", buf);
	if (n > 0)
		atomic_fetch_add(&s->requests, 1);
	return n > 0;
}

static void write_all(int c, const char *s)
{
	size_t n = strlen(s);
	while (n > 0) {
		ssize_t k = write(c, s, n);
		if (k <= 0)
			return;
		s += k;
		n -= (size_t) k;
	}
}

static void *server_main(void *userdata)
{
	struct server *s = userdata;

	while (!atomic_load(&s->stop)) {
		int c = accept(s->fd, NULL, NULL);
		int i;
		if (c < 0)
			break;
		if (atomic_load(&s->stop)) {
			close(c);
			break;
		}
		i = atomic_fetch_add(&s->connections, 1);
		read_request(c, s);
		switch (s->scripts[MIN(i, s->n_scripts - 1)]) {
		case S_OK:
			write_all(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				     "Connection: close\r\n\r\n");
			write_all(c, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"
				     "data: {\"choices\":[{\"delta\":");
			usleep(20000);
			write_all(c, "{\"content\":\"lo\"}}]}\n\ndata: {\"choices\":[{\"delta\":{},"
				     "\"finish_reason\":\"length\"}]}\n\n"
				     "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
				     "\"completion_tokens\":2}}\n\ndata: [DONE]\n\n");
			break;
		case S_500:
			write_all(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 40\r\n"
				     "Connection: close\r\n\r\n"
				     "{\"error\":{\"message\":\"boom\",\"code\":1}}  ");
			break;
		case S_CONTEXT:
			write_all(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"
				     "{\"error\":{\"message\":\"too long\",\"code\":"
				     "\"context_length_exceeded\"}}");
			break;
		case S_HANG:
			/* until the test stops the server: only the client's timeout or a
			 * cancellation can end the call, however slow the machine */
			while (!atomic_load(&s->stop))
				usleep(10000);
			break;
		case S_CLOSE:
			break;
		case S_KEEP: {
			static const char body[] =
				"data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n"
				"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
				"data: [DONE]\n\n";
			char head[160];

			snprintf(head, sizeof(head),
				 "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				 "Content-Length: %zu\r\n\r\n", sizeof(body) - 1);
			do {
				write_all(c, head);
				write_all(c, body);
			} while (!atomic_load(&s->stop) && read_request(c, s));
			break;
		}
		case S_MIDDROP:
			write_all(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				     "Connection: close\r\n\r\n"
				     "data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n");
			break;
		}
		close(c);
	}
	return NULL;
}

static int server_start(struct server *s)
{
	s->fd = loopback_listen(&s->port);
	if (s->fd < 0)
		return s->fd;
	return -pthread_create(&s->thread, NULL, server_main, s);
}

static void server_stop(struct server *s)
{
	atomic_store(&s->stop, true);
	shutdown(s->fd, SHUT_RDWR);
	close(s->fd);
	pthread_join(s->thread, NULL);
}

struct collect {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char text[1024];
	int n_text;
	bool done;
	struct remote_event final;
	char message[384];
	char finish[32];
};

static void on_event(const struct remote_event *ev, void *userdata)
{
	struct collect *c = userdata;

	pthread_mutex_lock(&c->lock);
	if (ev->type == REMOTE_EVENT_TEXT) {
		strncat(c->text, ev->text, MIN(ev->text_len, sizeof(c->text) - strlen(c->text) - 1));
		c->n_text++;
	} else {
		c->final = *ev;
		snprintf(c->message, sizeof(c->message), "%s", ev->message ? ev->message : "");
		snprintf(c->finish, sizeof(c->finish), "%s",
			 ev->finish_reason ? ev->finish_reason : "");
		c->done = true;
		pthread_cond_broadcast(&c->cond);
	}
	pthread_mutex_unlock(&c->lock);
}

static void collect_wait(struct collect *c)
{
	pthread_mutex_lock(&c->lock);
	while (!c->done)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static int run_call(struct server *s, uint32_t retries, uint64_t timeout_ms, struct collect *c,
		    struct remote_target **ret_t)
{
	char url[64];
	struct errmsg e = { { 0 } };
	struct remote_target_config cfg = { .name = "fake",
					    .url = url,
					    .model = "m",
					    .timeout_ns = timeout_ms * 1000000ull,
					    .retries = retries,
					    .backoff_base_ns = 10000000ull,
					    .backoff_max_ns = 40000000ull };
	struct chat_message msg = { .role = "user", .content = "hi \"there\"" };
	struct remote_request r = { .messages = &msg, .n_messages = 1, .max_tokens = 8,
				    .temperature = 0, .top_p = 1 };
	uint64_t id;
	int k;

	snprintf(url, sizeof(url), "http://127.0.0.1:%u/v1/", s->port);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	k = remote_target_new(&cfg, ret_t, &e);
	if (k < 0)
		return k;
	k = remote_submit(*ret_t, &r, on_event, c, &id);
	if (k < 0)
		return k;
	collect_wait(c);
	return 0;
}

TEST(call_ok_streams_and_parses)
{
	struct server s = { .scripts = { S_OK }, .n_scripts = 1 };
	struct collect c = { 0 };
	struct remote_target *t = NULL;

	ASSERT_OK(server_start(&s));
	ASSERT_OK(run_call(&s, 0, 2000, &c, &t));
	ASSERT_EQ(c.final.type, REMOTE_EVENT_DONE);
	ASSERT_STREQ(c.text, "Hello");
	ASSERT_EQ(c.n_text, 2);
	ASSERT_STREQ(c.finish, "length");
	ASSERT_EQ(c.final.prompt_tokens, 3);
	ASSERT_EQ(c.final.completion_tokens, 2);
	ASSERT_TRUE(strstr(s.last_request, "POST /v1/chat/completions ") != NULL);
	ASSERT_TRUE(strstr(s.last_request, "\"stream\":true") != NULL);
	ASSERT_TRUE(strstr(s.last_request, "hi \\\"there\\\"") != NULL);
	ASSERT_TRUE(remote_target_available(t));
	ASSERT_TRUE(remote_target_latency_ms(t) > 0);
	remote_target_free(t);
	server_stop(&s);
	return 0;
}

TEST(call_retries_then_succeeds)
{
	struct server s = { .scripts = { S_500, S_CLOSE, S_OK }, .n_scripts = 3 };
	struct collect c = { 0 };
	struct remote_target *t = NULL;

	ASSERT_OK(server_start(&s));
	ASSERT_OK(run_call(&s, 2, 2000, &c, &t));
	ASSERT_EQ(c.final.type, REMOTE_EVENT_DONE);
	ASSERT_STREQ(c.text, "Hello");
	ASSERT_EQ(atomic_load(&s.connections), 3);
	remote_target_free(t);
	server_stop(&s);
	return 0;
}

TEST(call_always_fails_is_bounded)
{
	struct server s = { .scripts = { S_500 }, .n_scripts = 1 };
	struct collect c = { 0 };
	struct remote_target *t = NULL;
	uint64_t id;

	ASSERT_OK(server_start(&s));
	ASSERT_OK(run_call(&s, 3, 2000, &c, &t));
	ASSERT_EQ(c.final.type, REMOTE_EVENT_ERROR);
	ASSERT_EQ(c.final.error, REMOTE_ERR_SERVER);
	ASSERT_EQ(c.final.http_status, 500);
	ASSERT_STREQ(c.message, "boom");
	/* 1 + 3 retries, no more (how long the backoff took depends on the machine: not
	 * asserted) */
	ASSERT_EQ(atomic_load(&s.connections), 4);
	/* Cooling down now: no new call goes out. */
	ASSERT_TRUE(!remote_target_available(t));
	{
		struct remote_request r = { .prompt = "x" };
		ASSERT_ERR(remote_submit(t, &r, on_event, &c, &id), -EHOSTDOWN);
	}
	ASSERT_EQ(atomic_load(&s.connections), 4);
	remote_target_free(t);
	server_stop(&s);
	return 0;
}

TEST(call_context_is_typed_and_not_retried)
{
	struct server s = { .scripts = { S_CONTEXT }, .n_scripts = 1 };
	struct collect c = { 0 };
	struct remote_target *t = NULL;

	ASSERT_OK(server_start(&s));
	ASSERT_OK(run_call(&s, 3, 2000, &c, &t));
	ASSERT_EQ(c.final.type, REMOTE_EVENT_ERROR);
	ASSERT_EQ(c.final.error, REMOTE_ERR_CONTEXT);
	ASSERT_EQ(atomic_load(&s.connections), 1);
	/* The target is fine; the request was not. */
	ASSERT_TRUE(remote_target_available(t));
	remote_target_free(t);
	server_stop(&s);
	return 0;
}

TEST(call_timeout)
{
	struct server s = { .scripts = { S_HANG }, .n_scripts = 1 };
	struct collect c = { 0 };
	struct remote_target *t = NULL;
	uint64_t t0 = mono_ms();

	ASSERT_OK(server_start(&s));
	ASSERT_OK(run_call(&s, 1, 200, &c, &t));
	ASSERT_EQ(c.final.type, REMOTE_EVENT_ERROR);
	ASSERT_EQ(c.final.error, REMOTE_ERR_TIMEOUT);
	/* Two attempts of 200 ms (the server takes one connection at a time, so the second
	 * waits in its backlog), then the error. A timeout never fires early; the server never
	 * answers, so only the timeouts can have ended the call (no upper bound: it would be
	 * a bound on the machine's speed). */
	ASSERT_TRUE(mono_ms() - t0 >= 380);
	remote_target_free(t);
	server_stop(&s);
	return 0;
}

TEST(call_dropped_midstream_not_retried)
{
	struct server s = { .scripts = { S_MIDDROP, S_OK }, .n_scripts = 2 };
	struct collect c = { 0 };
	struct remote_target *t = NULL;

	ASSERT_OK(server_start(&s));
	ASSERT_OK(run_call(&s, 3, 2000, &c, &t));
	ASSERT_EQ(c.final.type, REMOTE_EVENT_ERROR);
	ASSERT_TRUE(c.final.text_sent);
	ASSERT_STREQ(c.text, "par");
	ASSERT_EQ(atomic_load(&s.connections), 1);
	remote_target_free(t);
	server_stop(&s);
	return 0;
}

/* One call after another: through the connection the first left open; new pins (an address
 * the filter may no longer allow) mean a new connection; the health check shares it too. */
TEST(calls_reuse_the_connection)
{
	struct server s = { .scripts = { S_KEEP }, .n_scripts = 1 };
	struct remote_target *t = NULL;
	struct errmsg e = { { 0 } };
	struct chat_message msg = { .role = "user", .content = "hi" };
	struct remote_request r = { .messages = &msg, .n_messages = 1, .temperature = 1, .top_p = 1 };
	char url[64], pin[64];
	const char *pins[1] = { pin };
	uint64_t id;

	ASSERT_OK(server_start(&s));
	snprintf(url, sizeof(url), "http://localhost:%u", s.port);
	snprintf(pin, sizeof(pin), "localhost:%u:127.0.0.1", s.port);
	struct remote_target_config cfg = { .name = "k", .url = url, .timeout_ns = 5000000000ull,
					    .resolve = pins, .n_resolve = 1 };
	ASSERT_OK(remote_target_new(&cfg, &t, &e));
	for (int i = 0; i < 6; i++) {
		struct collect c = { 0 };

		pthread_mutex_init(&c.lock, NULL);
		pthread_cond_init(&c.cond, NULL);
		if (i == 3)
			ASSERT_OK(remote_target_set_resolve(t, pins, 1));
		ASSERT_OK(remote_submit(t, &r, on_event, &c, &id));
		collect_wait(&c);
		ASSERT_EQ(c.final.type, REMOTE_EVENT_DONE);
		ASSERT_STREQ(c.text, "Hello");
		ASSERT_EQ(atomic_load(&s.requests), i + 1);
		ASSERT_EQ(atomic_load(&s.connections), i < 3 ? 1 : 2);
	}
	ASSERT_OK(remote_health_check(t, &e));
	ASSERT_EQ(atomic_load(&s.requests), 7);
	ASSERT_EQ(atomic_load(&s.connections), 2);
	remote_target_free(t);
	server_stop(&s);
	return 0;
}

TEST(call_down_and_health)
{
	struct server s = { .scripts = { S_OK }, .n_scripts = 1 };
	struct collect c = { 0 };
	struct remote_target *t = NULL;
	struct errmsg e = { { 0 } };
	uint16_t port;

	/* A port nobody listens on: start a server to learn a free port, then stop it. */
	ASSERT_OK(server_start(&s));
	port = s.port;
	server_stop(&s);
	s = (struct server){ .port = port };
	ASSERT_OK(run_call(&s, 1, 1000, &c, &t));
	ASSERT_EQ(c.final.type, REMOTE_EVENT_ERROR);
	ASSERT_EQ(c.final.error, REMOTE_ERR_DOWN);
	ASSERT_TRUE(remote_health_check(t, &e) < 0);
	ASSERT_TRUE(strstr(e.text, "fake") != NULL);
	ASSERT_TRUE(!remote_target_available(t));
	remote_target_free(t);
	return 0;
}

TEST(cancel_hanging_call)
{
	struct server s = { .scripts = { S_HANG }, .n_scripts = 1 };
	struct collect c = { 0 };
	struct remote_target *t = NULL;
	struct errmsg e = { { 0 } };
	char url[64];
	struct remote_request r = { .prompt = "x", .temperature = 1, .top_p = 1 };
	uint64_t id;

	ASSERT_OK(server_start(&s));
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", s.port);
	/* an hour: nothing but the cancellation can end this call */
	struct remote_target_config cfg = { .name = "h", .url = url,
					    .timeout_ns = 3600ull * 1000000000ull };
	pthread_mutex_init(&c.lock, NULL);
	pthread_cond_init(&c.cond, NULL);
	ASSERT_OK(remote_target_new(&cfg, &t, &e));
	ASSERT_OK(remote_submit(t, &r, on_event, &c, &id));
	/* the call is in flight once the server has read the request */
	while (atomic_load(&s.requests) < 1)
		usleep(1000);
	ASSERT_TRUE(strstr(s.last_request, "POST /v1/completions ") != NULL);
	ASSERT_OK(remote_cancel(t, id));
	collect_wait(&c);
	ASSERT_EQ(c.final.type, REMOTE_EVENT_DONE);
	ASSERT_STREQ(c.finish, "cancelled");
	ASSERT_ERR(remote_cancel(t, id), -ENOENT);
	remote_target_free(t);
	server_stop(&s);
	return 0;
}
