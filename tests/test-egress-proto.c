/* SPDX-License-Identifier: MIT */
/*
 * test-egress-proto: the core↔worker protocol (daemon/egress/proto.h): every message type
 * through encode/decode, the validation of untrusted input, the framing over a real
 * SOCK_SEQPACKET socketpair; the worker's own payload check; and the whole path without BPF:
 * the egress client (PLAIN mode: molly-egress as a plain child) against a scripted HTTP
 * server on 127.0.0.1 — an answer comes back, a personal payload to T3 is refused by the
 * worker and never reaches the server, a killed worker is restarted and answers again.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "egress/client.h"
#include "egress/proto.h"
#include "egress/worker.h"
#include "loopback.h"
#include "policy/policy.h"
#include "test.h"

static int roundtrip(const struct proto_msg *in, struct proto_msg *out)
{
	_cleanup_free_ char *s = NULL;
	struct errmsg e = { { 0 } };
	size_t n = 0;
	int k;

	k = proto_encode(in, &s, &n);
	if (k < 0)
		return k;
	k = proto_decode(s, n, out, &e);
	if (k < 0)
		fprintf(stderr, "decode: %s\n  %s\n", e.text, s);
	return k;
}

TEST(roundtrip_configure)
{
	struct proto_target t[2] = {
		{ .name = "lan", .url = "http://127.0.0.1:8080", .model = "m", .timeout_ms = 5000,
		  .retries = 2, .user_controlled = true },
		{ .name = "api", .url = "https://api.example/v1", .key = "sk-123", .timeout_ms = 1 },
	};
	struct proto_msg in = { .type = PROTO_CONFIGURE, .generation = 7, .targets = t,
				.n_targets = 2 };
	struct proto_msg out = { 0 };

	ASSERT_OK(roundtrip(&in, &out));
	ASSERT_EQ(out.type, PROTO_CONFIGURE);
	ASSERT_EQ(out.generation, 7);
	ASSERT_EQ(out.n_targets, 2);
	ASSERT_STREQ(out.targets[0].name, "lan");
	ASSERT_STREQ(out.targets[0].model, "m");
	ASSERT_TRUE(out.targets[0].user_controlled);
	ASSERT_EQ(out.targets[0].retries, 2);
	ASSERT_TRUE(out.targets[0].key == NULL);
	ASSERT_STREQ(out.targets[1].key, "sk-123");
	ASSERT_TRUE(out.targets[1].model == NULL);
	ASSERT_EQ(out.targets[1].timeout_ms, 1);
	proto_msg_done(&out);
	return 0;
}

TEST(roundtrip_submit_and_events)
{
	struct chat_message msgs[2] = { { .role = "system", .content = "Be brief." }, { .role = "user", .content = "Hi \"you\"\n" } };
	const char *stop[] = { "\n\n", "END" };
	struct proto_msg in = { .type = PROTO_SUBMIT, .id = 42, .target = "lan",
				.tiers = POLICY_TIER(0) | POLICY_TIER(1),
				.class = POLICY_CLASS_PERSONAL,
				.request = { .messages = msgs, .n_messages = 2, .max_tokens = 9,
					     .temperature = 0.5f, .top_p = 0.9f, .has_seed = true,
					     .seed = UINT64_MAX - 1, .stop = stop, .n_stop = 2,
					     .logprobs = true } };
	struct proto_msg out = { 0 };

	ASSERT_OK(roundtrip(&in, &out));
	ASSERT_EQ(out.id, 42);
	ASSERT_STREQ(out.target, "lan");
	ASSERT_EQ(out.tiers, 3);
	ASSERT_EQ(out.class, POLICY_CLASS_PERSONAL);
	ASSERT_EQ(out.request.n_messages, 2);
	ASSERT_STREQ(out.request.messages[1].content, "Hi \"you\"\n");
	ASSERT_TRUE(out.request.prompt == NULL);
	ASSERT_EQ(out.request.max_tokens, 9);
	ASSERT_NEAR(out.request.temperature, 0.5, 1e-6);
	ASSERT_TRUE(out.request.has_seed);
	ASSERT_TRUE(out.request.seed == UINT64_MAX - 1);
	ASSERT_EQ(out.request.n_stop, 2);
	ASSERT_STREQ(out.request.stop[1], "END");
	ASSERT_TRUE(out.request.logprobs);
	proto_msg_done(&out);

	struct proto_msg ev = { .type = PROTO_EVENT, .id = 42,
				.event = { .type = REMOTE_EVENT_TEXT, .text = "héllo", .text_len = 6 } };
	ASSERT_OK(roundtrip(&ev, &out));
	ASSERT_EQ(out.event.type, REMOTE_EVENT_TEXT);
	ASSERT_EQ(out.event.text_len, 6);
	ASSERT_STREQ(out.event.text, "héllo");
	ASSERT_EQ(out.event.id, 42);
	proto_msg_done(&out);

	ev.event = (struct remote_event){ .type = REMOTE_EVENT_ERROR, .error = REMOTE_ERR_BLOCKED,
					  .http_status = 0, .message = "EPERM", .text_sent = true };
	ASSERT_OK(roundtrip(&ev, &out));
	ASSERT_EQ(out.event.error, REMOTE_ERR_BLOCKED);
	ASSERT_STREQ(out.event.message, "EPERM");
	ASSERT_TRUE(out.event.text_sent);
	proto_msg_done(&out);

	ev.event = (struct remote_event){ .type = REMOTE_EVENT_DONE, .finish_reason = "length",
					  .prompt_tokens = 3, .completion_tokens = 4 };
	ASSERT_OK(roundtrip(&ev, &out));
	ASSERT_STREQ(out.event.finish_reason, "length");
	ASSERT_EQ(out.event.completion_tokens, 4);
	ASSERT_EQ(out.event.n_logprobs, 0);
	proto_msg_done(&out);

	/* The cascade's confidence signal crosses the worker boundary. */
	ev.event.n_logprobs = 4;
	ev.event.logprob_sum = -1.25;
	ASSERT_OK(roundtrip(&ev, &out));
	ASSERT_EQ(out.event.n_logprobs, 4);
	ASSERT_NEAR(out.event.logprob_sum, -1.25, 1e-12);
	proto_msg_done(&out);
	return 0;
}

TEST(roundtrip_endpoints_health_hello)
{
	struct proto_endpoint ep[2] = { { .target = "lan", .family = AF_INET, .port = 80 },
					{ .target = "lan", .family = AF_INET6, .port = 443 } };
	struct proto_unresolved un = { .target = "api", .message = "no such host" };
	struct proto_health h = { .name = "lan", .available = true, .latency_ms = 12.5 };
	struct proto_msg out = { 0 };

	struct proto_msg check = { .type = PROTO_CHECK };
	ASSERT_OK(roundtrip(&check, &out));
	ASSERT_EQ(out.type, PROTO_CHECK);
	proto_msg_done(&out);

	inet_pton(AF_INET, "127.0.0.9", ep[0].addr);
	inet_pton(AF_INET6, "::1", ep[1].addr);
	struct proto_msg in = { .type = PROTO_ENDPOINTS, .generation = 3, .endpoints = ep,
				.n_endpoints = 2, .unresolved = &un, .n_unresolved = 1 };
	ASSERT_OK(roundtrip(&in, &out));
	ASSERT_EQ(out.n_endpoints, 2);
	ASSERT_EQ(out.endpoints[0].family, AF_INET);
	ASSERT_TRUE(memcmp(out.endpoints[0].addr, ep[0].addr, 16) == 0);
	ASSERT_EQ(out.endpoints[1].family, AF_INET6);
	ASSERT_EQ(out.endpoints[1].port, 443);
	ASSERT_STREQ(out.unresolved[0].message, "no such host");
	proto_msg_done(&out);

	in = (struct proto_msg){ .type = PROTO_HEALTH, .health = &h, .n_health = 1 };
	ASSERT_OK(roundtrip(&in, &out));
	ASSERT_TRUE(out.health[0].available);
	ASSERT_NEAR(out.health[0].latency_ms, 12.5, 1e-9);
	proto_msg_done(&out);

	in = (struct proto_msg){ .type = PROTO_HELLO, .tier = 3, .pid = 99, .version = 1 };
	ASSERT_OK(roundtrip(&in, &out));
	ASSERT_EQ(out.tier, 3);
	proto_msg_done(&out);
	in.tier = 0; /* not a remote tier: never encoded */
	ASSERT_ERR(roundtrip(&in, &out), -EINVAL);
	return 0;
}

/* Each line must be refused with -EBADMSG. */
TEST(decode_refuses_bad_input)
{
	static const char *const bad[] = {
		"",
		"[]",
		"{}",
		"{\"type\":\"nope\"}",
		"{\"type\":\"hello\",\"tier\":4,\"version\":1}",
		"{\"type\":\"hello\",\"tier\":-1,\"version\":1}",
		"{\"type\":\"hello\",\"tier\":\"1\",\"version\":1}",
		"{\"type\":\"cancel\",\"id\":0}",
		"{\"type\":\"cancel\"}",
		"{\"type\":\"cancel\",\"id\":1} trailing",
		"{\"type\":\"configure\",\"generation\":1,\"targets\":[{\"name\":\"a\","
		"\"url\":\"file:///etc/passwd\",\"timeout_ms\":5}]}",
		"{\"type\":\"configure\",\"generation\":1,\"targets\":[{\"name\":\"a\","
		"\"url\":\"http://x\",\"timeout_ms\":0}]}",
		"{\"type\":\"configure\",\"generation\":1,\"targets\":[{\"name\":\"a\","
		"\"url\":\"http://x\",\"timeout_ms\":5,\"key\":\"a\\nInjected: 1\"}]}",
		"{\"type\":\"configure\",\"generation\":1,\"targets\":[{\"name\":\"a\",\"url\":"
		"\"http://x\",\"timeout_ms\":5},{\"name\":\"a\",\"url\":\"http://y\",\"timeout_ms\":5}]}",
		"{\"type\":\"configure\",\"generation\":1,\"targets\":[{\"name\":\"a\\u0000b\","
		"\"url\":\"http://x\",\"timeout_ms\":5}]}",
		"{\"type\":\"submit\",\"id\":1,\"target\":\"a\",\"tiers\":16,\"class\":\"public\","
		"\"request\":{\"prompt\":\"x\"}}",
		"{\"type\":\"submit\",\"id\":1,\"target\":\"a\",\"tiers\":2,\"class\":\"nope\","
		"\"request\":{\"prompt\":\"x\"}}",
		"{\"type\":\"submit\",\"id\":1,\"target\":\"a\",\"tiers\":2,\"class\":\"public\","
		"\"request\":{\"prompt\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"y\"}]}}",
		"{\"type\":\"submit\",\"id\":1,\"target\":\"a\",\"tiers\":2,\"class\":\"public\","
		"\"request\":{}}",
		"{\"type\":\"submit\",\"id\":1,\"target\":\"a\",\"tiers\":2,\"class\":\"public\","
		"\"request\":{\"prompt\":\"x\",\"top_p\":2}}",
		"{\"type\":\"endpoints\",\"generation\":1,\"endpoints\":[{\"target\":\"a\","
		"\"addr\":\"localhost\",\"port\":80}]}",
		"{\"type\":\"endpoints\",\"generation\":1,\"endpoints\":[{\"target\":\"a\","
		"\"addr\":\"127.0.0.1\",\"port\":70000}]}",
		"{\"type\":\"event\",\"id\":1,\"kind\":\"text\",\"text\":\"\"}",
		"{\"type\":\"event\",\"id\":1,\"kind\":\"error\",\"error\":\"none\"}",
		"{\"type\":\"event\",\"id\":1,\"kind\":\"error\",\"error\":\"whatever\"}",
		"{\"type\":\"event\",\"id\":1,\"kind\":\"later\"}",
		"{\"type\":\"event\",\"id\":1,\"kind\":\"done\",\"finish_reason\":\"stop\","
		"\"n_logprobs\":2,\"logprob_sum\":0.5}",
		"{\"type\":\"event\",\"id\":1,\"kind\":\"done\",\"finish_reason\":\"stop\","
		"\"logprob_sum\":-1}",
		"{\"type\":\"submit\",\"id\":1,\"target\":\"a\",\"tiers\":2,\"class\":\"public\","
		"\"request\":{\"prompt\":\"x\",\"logprobs\":1}}",
	};
	struct proto_msg m;
	struct errmsg e;

	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		int k = proto_decode(bad[i], strlen(bad[i]), &m, &e);
		if (k != -EBADMSG) {
			fprintf(stderr, "accepted (%d): %s\n", k, bad[i]);
			proto_msg_done(&m);
			return 1;
		}
		ASSERT_TRUE(e.text[0] != 0);
	}
	/* An unknown field is fine (a newer peer). */
	const char *ok = "{\"type\":\"cancel\",\"id\":5,\"future\":[1,2]}";
	ASSERT_OK(proto_decode(ok, strlen(ok), &m, &e));
	ASSERT_EQ(m.id, 5);
	proto_msg_done(&m);
	return 0;
}

TEST(framing_over_seqpacket)
{
	int sv[2];
	struct proto_conn a, b;
	_cleanup_free_ char *big = malloc(300000);
	const char *text;
	size_t len;
	int k;

	ASSERT_TRUE(big != NULL);
	ASSERT_OK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv));
	proto_conn_init(&a, sv[0]);
	proto_conn_init(&b, sv[1]);
	for (size_t i = 0; i < 299999; i++)
		big[i] = (char) ('a' + i % 26);
	big[299999] = 0;
	/* Several messages, one larger than a fragment, in a row from another thread. */
	pid_t pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		int r = proto_conn_send(&a, "{\"x\":1}", 7) == 0 &&
			proto_conn_send(&a, big, 299999) == 0 &&
			proto_conn_send(&a, "{\"x\":2}", 7) == 0;
		_exit(r ? 0 : 1);
	}
	for (int want = 0; want < 3;) {
		k = proto_conn_recv(&b, &text, &len);
		ASSERT_TRUE(k >= 0);
		if (k == 0)
			continue;
		if (want == 0)
			ASSERT_TRUE(len == 7 && memcmp(text, "{\"x\":1}", 7) == 0);
		if (want == 1)
			ASSERT_TRUE(len == 299999 && memcmp(text, big, len) == 0);
		if (want == 2)
			ASSERT_TRUE(len == 7 && memcmp(text, "{\"x\":2}", 7) == 0);
		want++;
	}
	int st;
	waitpid(pid, &st, 0);
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* A datagram without a valid header byte is a framing error. */
	ASSERT_EQ(send(sv[0], "Xabc", 4, 0), 4);
	ASSERT_ERR(proto_conn_recv(&b, &text, &len), -EBADMSG);
	/* The end of the stream. */
	close(sv[0]);
	ASSERT_ERR(proto_conn_recv(&b, &text, &len), -EPIPE);
	proto_conn_done(&a);
	proto_conn_done(&b);
	close(sv[1]);
	return 0;
}

TEST(worker_payload_check)
{
	struct remote_request pub = { .prompt = "Tell me a story about a dragon." };
	struct remote_request mail = { .prompt = "Write to mario.rossi@example.com today." };
	struct chat_message m[2] = { { .role = "system", .content = "Be brief." },
				     { .role = "user", .content = "My IBAN is IT60X0542811101000000123456" } };
	struct remote_request chat = { .messages = m, .n_messages = 2 };
	const uint32_t all = POLICY_TIERS_ALL;
	char why[512];

	ASSERT_OK(worker_check_payload(3, false, all, POLICY_CLASS_PUBLIC, &pub, why, sizeof(why)));
	/* T3 never carries a personal value, whatever the core says. */
	ASSERT_ERR(worker_check_payload(3, false, all, POLICY_CLASS_PERSONAL, &mail, why,
					sizeof(why)),
		   -EPERM);
	ASSERT_TRUE(strstr(why, "email") != NULL);
	ASSERT_TRUE(strstr(why, "mario") == NULL); /* the kind, never the value */
	ASSERT_ERR(worker_check_payload(3, false, all, POLICY_CLASS_PERSONAL, &chat, why,
					sizeof(why)),
		   -EPERM);
	/* A core that declares it public is caught by the detectors. */
	ASSERT_ERR(worker_check_payload(1, false, all, POLICY_CLASS_PUBLIC, &mail, why, sizeof(why)),
		   -EPERM);
	ASSERT_OK(worker_check_payload(1, false, all, POLICY_CLASS_PERSONAL, &mail, why,
				       sizeof(why)));
	/* T2: only to a user-controlled target. */
	ASSERT_ERR(worker_check_payload(2, false, all, POLICY_CLASS_PERSONAL, &mail, why,
					sizeof(why)),
		   -EPERM);
	ASSERT_OK(worker_check_payload(2, true, all, POLICY_CLASS_PERSONAL, &mail, why,
				       sizeof(why)));
	/* The tier must be permitted. */
	ASSERT_ERR(worker_check_payload(1, true, POLICY_TIER(0), POLICY_CLASS_PUBLIC, &pub, why,
					sizeof(why)),
		   -EPERM);
	ASSERT_TRUE(strstr(why, "T1") != NULL);
	/* A special-category statement without identifying values (what redaction leaves of a
	 * personal request allowed to T3, docs/policy.md) may go; the classifier's finding marks
	 * the topic, not a value. An identifier beside it may not. */
	{
		struct remote_request stmt = {
			.prompt = "I was diagnosed with HIV last year, what should I ask my doctor?"
		};
		struct remote_request stmt_mail = {
			.prompt = "I was diagnosed with HIV last year; write to "
				  "mario.rossi@example.com"
		};
		ASSERT_OK(worker_check_payload(3, false, all, POLICY_CLASS_PERSONAL, &stmt, why,
					       sizeof(why)));
		ASSERT_ERR(worker_check_payload(3, false, all, POLICY_CLASS_PERSONAL, &stmt_mail,
						why, sizeof(why)),
			   -EPERM);
		ASSERT_TRUE(strstr(why, "email") != NULL);
	}
	return 0;
}

TEST(url_host_port)
{
	char host[256];
	uint16_t port;

	ASSERT_OK(worker_url_host_port("http://127.0.0.1:8080/v1", host, &port));
	ASSERT_STREQ(host, "127.0.0.1");
	ASSERT_EQ(port, 8080);
	ASSERT_OK(worker_url_host_port("https://api.example", host, &port));
	ASSERT_STREQ(host, "api.example");
	ASSERT_EQ(port, 443);
	ASSERT_OK(worker_url_host_port("http://[::1]:9/x", host, &port));
	ASSERT_STREQ(host, "::1");
	ASSERT_EQ(port, 9);
	ASSERT_ERR(worker_url_host_port("http://user@evil:80", host, &port), -EINVAL);
	ASSERT_ERR(worker_url_host_port("ftp://x", host, &port), -EINVAL);
	ASSERT_ERR(worker_url_host_port("http://x:0", host, &port), -EINVAL);
	ASSERT_ERR(worker_url_host_port("http://x:99999", host, &port), -EINVAL);
	return 0;
}

/* ---- the whole path without BPF: client + molly-egress (plain child) + a server ---- */

struct server {
	int fd;
	uint16_t port;
	pthread_t thread;
	atomic_int requests;
	atomic_bool stop;
	pthread_mutex_t lock;
	char log[65536]; /* every request received, appended */
};

static void *server_main(void *userdata)
{
	struct server *s = userdata;

	while (!atomic_load(&s->stop)) {
		char buf[16384];
		size_t n = 0;
		char *hdr_end = NULL;
		size_t body = 0;
		int c = accept(s->fd, NULL, NULL);
		if (c < 0 || atomic_load(&s->stop)) {
			if (c >= 0)
				close(c);
			break;
		}
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
		pthread_mutex_lock(&s->lock);
		strncat(s->log, buf, sizeof(s->log) - strlen(s->log) - 1);
		pthread_mutex_unlock(&s->lock);
		atomic_fetch_add(&s->requests, 1);
		const char *ans = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				  "Connection: close\r\n\r\n"
				  "data: {\"choices\":[{\"text\":\"from \"}]}\n\n"
				  "data: {\"choices\":[{\"text\":\"the worker\","
				  "\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
		(void) !write(c, ans, strlen(ans));
		close(c);
	}
	return NULL;
}

static int server_start(struct server *s)
{
	pthread_mutex_init(&s->lock, NULL);
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
	bool done;
	struct remote_event final;
	char message[700];
};

static void on_event(const struct remote_event *ev, void *userdata)
{
	struct collect *c = userdata;

	pthread_mutex_lock(&c->lock);
	if (ev->type == REMOTE_EVENT_TEXT)
		strncat(c->text, ev->text, MIN(ev->text_len, sizeof(c->text) - strlen(c->text) - 1));
	else {
		c->final = *ev;
		snprintf(c->message, sizeof(c->message), "%s", ev->message ? ev->message : "");
		c->done = true;
		pthread_cond_broadcast(&c->cond);
	}
	pthread_mutex_unlock(&c->lock);
}

static int call(struct remote_target *t, const char *prompt, uint32_t tiers, int class,
		struct collect *c)
{
	struct remote_request r = { .prompt = prompt, .max_tokens = 8, .top_p = 1,
				    .permitted_tiers = tiers, .sensitivity = class };
	uint64_t id;
	int k;

	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	k = remote_submit(t, &r, on_event, c, &id);
	if (k < 0)
		return k;
	pthread_mutex_lock(&c->lock);
	while (!c->done)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

TEST(client_and_worker_without_bpf)
{
	struct server s = { 0 };
	char url[64], worker[512], conf[1024];
	struct errmsg e = { { 0 } };
	_cleanup_(config_unrefp) struct config *cfg = NULL;
	_cleanup_(egress_client_freep) struct egress_client *c = NULL;
	_cleanup_(remote_target_freep) struct remote_target *t1 = NULL, *t3 = NULL;
	struct collect col;
	struct egress_client_options o = { .mode = EGRESS_CLIENT_PLAIN };
	struct stat st;
	pid_t pid;

	snprintf(worker, sizeof(worker), "%s/molly-egress", MOLLY_BIN_DIR);
	if (stat(worker, &st) < 0)
		return TEST_SKIP;
	ASSERT_OK(server_start(&s));
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", s.port);
	snprintf(conf, sizeof(conf),
		 "[Target lan]\nTier=T1\nURL=%s\nTimeoutSec=5\nRetries=0\n"
		 "[Target api]\nTier=T3\nURL=%s/v1\nTimeoutSec=5\nRetries=0\n",
		 url, url);
	ASSERT_OK(config_new(&cfg));
	ASSERT_OK(config_parse_text(cfg, conf, strlen(conf), "test.conf", &e));
	o.worker_path = worker;
	ASSERT_OK(egress_client_new(&o, &c, &e));
	ASSERT_OK(egress_client_target_new(c, &cfg->targets[0], &t1, &e));
	ASSERT_OK(egress_client_target_new(c, &cfg->targets[1], &t3, &e));
	ASSERT_EQ(egress_client_configure(c, cfg, 10ull * 1000000000ull, &e), 0);
	ASSERT_TRUE(egress_client_worker_pid(c, 1) > 0);
	ASSERT_TRUE(egress_client_worker_pid(c, 3) > 0);
	ASSERT_TRUE(egress_client_worker_pid(c, 2) == 0); /* no targets: no worker */

	/* An answer through the T1 worker. */
	ASSERT_OK(call(t1, "Once upon a time", POLICY_TIERS_ALL, POLICY_CLASS_PUBLIC, &col));
	ASSERT_EQ(col.final.type, REMOTE_EVENT_DONE);
	ASSERT_STREQ(col.text, "from the worker");
	ASSERT_EQ(atomic_load(&s.requests), 1);
	ASSERT_TRUE(strstr(s.log, "Once upon a time") != NULL);

	/* The core's hand-off check: T1 not permitted → never sent. */
	ASSERT_OK(call(t1, "Once upon a time", POLICY_TIER(0), POLICY_CLASS_PUBLIC, &col));
	ASSERT_EQ(col.final.type, REMOTE_EVENT_ERROR);
	ASSERT_EQ(col.final.error, REMOTE_ERR_REFUSED);
	ASSERT_EQ(atomic_load(&s.requests), 1);

	/* A personal payload toward T3, with a core that says "public" and "T3 permitted":
	 * the worker's own detectors refuse it, nothing reaches the server. */
	ASSERT_OK(call(t3, "Mail mario.rossi@example.com please", POLICY_TIERS_ALL,
		       POLICY_CLASS_PUBLIC, &col));
	ASSERT_EQ(col.final.type, REMOTE_EVENT_ERROR);
	ASSERT_EQ(col.final.error, REMOTE_ERR_REFUSED);
	ASSERT_TRUE(strstr(col.message, "T3 egress worker refused") != NULL);
	ASSERT_EQ(atomic_load(&s.requests), 1);
	ASSERT_TRUE(strstr(s.log, "mario.rossi") == NULL);

	/* Kill the T1 worker: it is restarted and answers again. */
	pid = egress_client_worker_pid(c, 1);
	ASSERT_OK(kill(pid, SIGKILL));
	(void) TEST_WAIT_UNTIL(egress_client_worker_pid(c, 1) > 0 && egress_client_worker_pid(c, 1) != pid &&
			remote_target_available(t1));
	ASSERT_TRUE(egress_client_worker_pid(c, 1) != pid);
	ASSERT_TRUE(egress_client_worker_starts(c, 1) >= 2);
	ASSERT_OK(call(t1, "Again", POLICY_TIERS_ALL, POLICY_CLASS_PUBLIC, &col));
	ASSERT_EQ(col.final.type, REMOTE_EVENT_DONE);
	ASSERT_STREQ(col.text, "from the worker");
	ASSERT_EQ(atomic_load(&s.requests), 2);

	t1 = remote_target_free(t1);
	t3 = remote_target_free(t3);
	c = egress_client_free(c);
	server_stop(&s);
	return 0;
}

TEST(client_disabled_refuses_clearly)
{
	char conf[] = "[Target lan]\nTier=T1\nURL=http://127.0.0.1:9\n";
	struct errmsg e = { { 0 } };
	_cleanup_(config_unrefp) struct config *cfg = NULL;
	_cleanup_(egress_client_freep) struct egress_client *c = NULL;
	_cleanup_(remote_target_freep) struct remote_target *t1 = NULL;
	struct egress_client_options o = { .mode = EGRESS_CLIENT_DISABLED,
					   .disabled_reason = "not root" };
	struct collect col;

	ASSERT_OK(config_new(&cfg));
	ASSERT_OK(config_parse_text(cfg, conf, strlen(conf), "test.conf", &e));
	ASSERT_OK(egress_client_new(&o, &c, &e));
	ASSERT_OK(egress_client_target_new(c, &cfg->targets[0], &t1, &e));
	ASSERT_TRUE(egress_client_configure(c, cfg, 0, &e) >= 0);
	ASSERT_TRUE(!remote_target_available(t1));
	ASSERT_OK(call(t1, "hi", POLICY_TIERS_ALL, POLICY_CLASS_PUBLIC, &col));
	ASSERT_EQ(col.final.error, REMOTE_ERR_BLOCKED);
	ASSERT_TRUE(strstr(col.message, "not root") != NULL);
	ASSERT_TRUE(strstr(egress_client_status(c), "disabled") != NULL);
	return 0;
}

/* A worker that lies: it reports an address that is not its target's. The core must not
 * allow it (no ALLOWED, the target never becomes available), kill it and restart it. */
TEST(client_refuses_a_lying_worker)
{
	static const char script[] =
		"#!/usr/bin/python3\n"
		"import json, socket, sys\n"
		"s = socket.socket(fileno=3)\n"
		"def send(o):\n"
		"    s.send(b'L' + json.dumps(o).encode())\n"
		"send({'type': 'hello', 'tier': 1, 'pid': 1, 'version': 1})\n"
		"while True:\n"
		"    d = s.recv(1 << 20)\n"
		"    if not d: sys.exit(0)\n"
		"    m = json.loads(d[1:])\n"
		"    if m['type'] == 'configure':\n"
		"        send({'type': 'endpoints', 'generation': m['generation'],\n"
		"              'endpoints': [{'target': 'lan', 'addr': '10.1.2.3', 'port': 8080}]})\n"
		"    if m['type'] == 'allowed':\n"
		"        open(sys.argv[0] + '.allowed', 'w').write('yes')\n";
	char dir[] = "/tmp/molly-egress-test.XXXXXX", path[128], allowed[160];
	char conf[] = "[Target lan]\nTier=T1\nURL=http://127.0.0.1:8080\n";
	struct errmsg e = { { 0 } };
	_cleanup_(config_unrefp) struct config *cfg = NULL;
	_cleanup_(egress_client_freep) struct egress_client *c = NULL;
	_cleanup_(remote_target_freep) struct remote_target *t1 = NULL;
	struct egress_client_options o = { .mode = EGRESS_CLIENT_PLAIN };
	FILE *f;

	if (access("/usr/bin/python3", X_OK) < 0)
		return TEST_SKIP;
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/liar", dir);
	snprintf(allowed, sizeof(allowed), "%s.allowed", path);
	f = fopen(path, "w");
	ASSERT_TRUE(f != NULL);
	fputs(script, f);
	fclose(f);
	ASSERT_OK(chmod(path, 0755));
	ASSERT_OK(config_new(&cfg));
	ASSERT_OK(config_parse_text(cfg, conf, strlen(conf), "test.conf", &e));
	o.worker_path = path;
	ASSERT_OK(egress_client_new(&o, &c, &e));
	ASSERT_OK(egress_client_target_new(c, &cfg->targets[0], &t1, &e));
	/* Never confirmed: a warning after the wait, not success (however long the wait). */
	ASSERT_EQ(egress_client_configure(c, cfg, 1500000000ull, &e), 1);
	/* killed and restarted by the client's thread: waited for, not assumed done in 1.5 s
	 * (a worker's start can take longer than that on a loaded machine) */
	ASSERT_TRUE(TEST_WAIT_UNTIL(egress_client_worker_starts(c, 1) >= 2));
	ASSERT_TRUE(!remote_target_available(t1));
	ASSERT_TRUE(access(allowed, F_OK) < 0); /* never told ALLOWED */
	t1 = remote_target_free(t1);
	c = egress_client_free(c);
	(void) unlink(allowed);
	(void) unlink(path);
	(void) rmdir(dir);
	return 0;
}

/* CURLOPT_RESOLVE pins (remote_target_config.resolve): a name that DNS does not know is
 * reached at the pinned address, and nowhere else; replacing the pins moves the calls. */
TEST(remote_pins_resolve)
{
	struct server s = { 0 };
	char url[96], pin[128], bad_pin[128];
	const char *pins[1] = { pin }, *bad[1] = { bad_pin };
	struct errmsg e = { { 0 } };
	_cleanup_(remote_target_freep) struct remote_target *t = NULL;
	struct remote_target_config rc = { .name = "pinned", .url = url, .timeout_ns = 5000000000ull,
					   .resolve = pins, .n_resolve = 1 };
	struct collect col;

	ASSERT_OK(server_start(&s));
	/* .invalid never resolves (RFC 6761): only the pin can make this work. */
	snprintf(url, sizeof(url), "http://molly-pin.invalid:%u", s.port);
	snprintf(pin, sizeof(pin), "molly-pin.invalid:%u:127.0.0.1", s.port);
	ASSERT_OK(remote_target_new(&rc, &t, &e));
	ASSERT_OK(call(t, "pinned", POLICY_TIERS_ALL, POLICY_CLASS_PUBLIC, &col));
	ASSERT_EQ(col.final.type, REMOTE_EVENT_DONE);
	ASSERT_STREQ(col.text, "from the worker");
	ASSERT_EQ(atomic_load(&s.requests), 1);
	/* Pinned to an address where nothing listens: the call fails, no DNS fallback. */
	snprintf(bad_pin, sizeof(bad_pin), "molly-pin.invalid:%u:127.0.0.2", s.port);
	ASSERT_OK(remote_target_set_resolve(t, bad, 1));
	ASSERT_OK(call(t, "pinned", POLICY_TIERS_ALL, POLICY_CLASS_PUBLIC, &col));
	ASSERT_EQ(col.final.type, REMOTE_EVENT_ERROR);
	ASSERT_EQ(col.final.error, REMOTE_ERR_DOWN);
	ASSERT_EQ(atomic_load(&s.requests), 1);
	t = remote_target_free(t);
	server_stop(&s);
	return 0;
}
