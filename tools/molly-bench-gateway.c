/* SPDX-License-Identifier: MIT */
/*
 * molly-bench-gateway: what the HTTP gateway adds to a request. Times a 1-token greedy
 * completion two ways and prints p50/p99 of each and of the difference:
 *
 *   direct  in this process: tokenize (BOS rule, as mollyd does for /v1/completions), then
 *           sched_submit() on a scheduler running the same model, until its DONE event;
 *   http    POST /v1/completions {"prompt", "max_tokens": 1, "temperature": 0} to a running
 *           mollyd over one keep-alive connection (TCP or a unix socket), until the whole
 *           JSON answer is read.
 *
 *   dbus    org.molly.Inference1.Generate({prompt, max_tokens: 1, temperature: 0}) on a
 *           running mollyd, over one bus connection, until the reply arrives.
 *
 *   molly-bench-gateway --model M (--url http://127.0.0.1:PORT | --unix PATH |
 *                       --dbus BUS_ADDRESS) [-n N] [--warmup W] [--prompt P] [--threads T]
 *                       [--key KEY] [--json]
 *
 * Run mollyd with the same model and Threads= (and nothing else using it). The overhead is
 * gateway minus direct, per percentile (the runs are separate, so it is an estimate).
 *
 *   route   molly-bench-gateway --url http://T1 --via http://MOLLYD [-n N] [--warmup W]:
 *           what routing through a mollyd adds to a remote target. The same request goes
 *           alternately straight to the T1 server (--url) and to a mollyd (--via) whose router
 *           sends it to that T1 ([Target] with the T1's URL), each over its own keep-alive
 *           connection; p50/p99 of each and of the difference. --model is not needed. Every
 *           routed answer must come through the target: one from the router's own engine
 *           (a fallback) stops the run with an error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

#include "bench-util.h"
#include "engine/model.h"
#include "engine/vocab.h"
#include "sched/sched.h"

struct options {
	const char *model;
	const char *url;
	const char *via;
	const char *unix_path;
	const char *dbus;
	const char *prompt;
	const char *key;
	long n;
	long warmup;
	int threads;
	bool json;
};



/* The p-th percentile (nearest rank) of n sorted samples. */
static uint64_t percentile(const uint64_t *sorted, size_t n, double p)
{
	size_t rank = (size_t) (p / 100.0 * (double) n + 0.999999);

	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return sorted[rank - 1];
}

/* Sorts the n samples (ns) and gives their p50 and p99 in µs. */
static void p50_p99_us(uint64_t *ns, long n, double *p50, double *p99)
{
	qsort(ns, (size_t) n, sizeof(*ns), cmp_u64);
	*p50 = (double) percentile(ns, (size_t) n, 50) / 1e3;
	*p99 = (double) percentile(ns, (size_t) n, 99) / 1e3;
}

/* ---- direct: the scheduler in this process ---- */

struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int error;
	uint32_t tokens;
};

static void on_event(const struct sched_event *ev, void *userdata)
{
	struct waiter *w = userdata;

	if (ev->type == SCHED_EVENT_TOKEN)
		return;
	pthread_mutex_lock(&w->lock);
	w->done = true;
	w->error = ev->type == SCHED_EVENT_ERROR ? (ev->error ? ev->error : -EIO) : 0;
	w->tokens = ev->completion_tokens;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static int bench_direct(const struct options *o, uint64_t *samples)
{
	_cleanup_(model_freep) struct model *m = NULL;
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct sched_params sp = { .max_sequences = 1, .queue_length = 4, .n_threads = o->threads };
	struct errmsg e = { "" };
	struct waiter w = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
	int32_t ids[4096];
	int64_t n_ids;
	int k;

	k = model_load(o->model, &m, &e);
	if (k < 0) {
		fprintf(stderr, "molly-bench-gateway: %s: %s\n", o->model, e.text);
		return k;
	}
	k = sched_new(m, &sp, &s, &e);
	if (k < 0 || (k = sched_start(s)) < 0) {
		fprintf(stderr, "molly-bench-gateway: scheduler: %s\n",
			e.text[0] ? e.text : strerror(-k));
		return k;
	}
	for (long i = -o->warmup; i < o->n; i++) {
		struct sched_request req = { .max_tokens = 1,
					     .on_event = on_event,
					     .userdata = &w };
		uint64_t id, t0 = now_ns();

		/* tokenizing is part of the request, as it is in the daemon */
		n_ids = vocab_tokenize(m->vocab, o->prompt, strlen(o->prompt),
				       vocab_add_bos(m->vocab), false, ids, ELEMENTSOF(ids));
		if (n_ids <= 0 || n_ids > (int64_t) ELEMENTSOF(ids)) {
			fprintf(stderr, "molly-bench-gateway: cannot tokenize the prompt\n");
			return -EINVAL;
		}
		req.prompt = ids;
		req.n_prompt = (size_t) n_ids;
		req.sampling.temperature = 0;
		req.sampling.top_p = 1;
		req.sampling.repeat_penalty = 1;
		w.done = false;
		k = sched_submit(s, &req, &id, &e);
		if (k < 0) {
			fprintf(stderr, "molly-bench-gateway: submit: %s\n", e.text);
			return k;
		}
		pthread_mutex_lock(&w.lock);
		while (!w.done)
			pthread_cond_wait(&w.cond, &w.lock);
		pthread_mutex_unlock(&w.lock);
		if (w.error < 0) {
			fprintf(stderr, "molly-bench-gateway: generation failed: %s\n",
				strerror(-w.error));
			return w.error;
		}
		if (i >= 0)
			samples[i] = now_ns() - t0;
	}
	return 0;
}

/* ---- http: a minimal keep-alive HTTP/1.1 client ---- */

static int connect_to(const struct options *o, char *host_header, size_t host_size)
{
	int fd, one = 1;

	if (o->unix_path) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		if (strlen(o->unix_path) >= sizeof(sa.sun_path))
			return -ENAMETOOLONG;
		strcpy(sa.sun_path, o->unix_path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
			int r = -errno;
			close(fd);
			return r;
		}
		snprintf(host_header, host_size, "localhost");
		return fd;
	}

	/* http://HOST:PORT[/] with HOST numeric or a name, IPv6 in brackets */
	const char *p = o->url;
	char host[256], port[16] = "80";
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
	size_t hl;

	if (strncmp(p, "http://", 7) != 0)
		return -EINVAL;
	p += 7;
	if (*p == '[') {
		const char *end = strchr(p, ']');

		if (!end || (size_t) (end - p - 1) >= sizeof(host))
			return -EINVAL;
		hl = (size_t) (end - p - 1);
		memcpy(host, p + 1, hl);
		p = end + 1;
	} else {
		hl = strcspn(p, ":/");
		if (hl >= sizeof(host))
			return -EINVAL;
		memcpy(host, p, hl);
		p += hl;
	}
	host[hl] = '\0';
	if (*p == ':') {
		size_t pl = strcspn(p + 1, "/");

		if (pl == 0 || pl >= sizeof(port))
			return -EINVAL;
		memcpy(port, p + 1, pl);
		port[pl] = '\0';
	}
	if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
		return -EHOSTUNREACH;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		int r = -errno;
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return r;
	}
	freeaddrinfo(ai);
	(void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	snprintf(host_header, host_size, "%s", o->url + 7);
	host_header[strcspn(host_header, "/")] = '\0';
	return fd;
}

static int write_all(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, buf, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -errno;
		buf += w;
		n -= (size_t) w;
	}
	return 0;
}

/* Reads one response (Content-Length or chunked) into buf; returns the status or -errno. */
static int read_response(int fd, char *buf, size_t cap, size_t *ret_body_len)
{
	size_t have = 0, head_len, need;
	char *end, *cl;
	int status;

	for (;;) {
		ssize_t r;

		buf[have] = '\0';
		end = strstr(buf, "\r\n\r\n");
		if (end)
			break;
		if (have + 1 >= cap)
			return -E2BIG;
		r = read(fd, buf + have, cap - 1 - have);
		if (r <= 0)
			return r < 0 ? -errno : -ECONNRESET;
		have += (size_t) r;
	}
	head_len = (size_t) (end - buf) + 4;
	if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
		return -EBADMSG;
	cl = strcasestr(buf, "\r\ncontent-length:");
	if (!cl || cl > end) {
		/* chunked: read until the terminating chunk */
		while (!strstr(buf + head_len, "\r\n0\r\n\r\n")) {
			ssize_t r;

			if (have + 1 >= cap)
				return -E2BIG;
			r = read(fd, buf + have, cap - 1 - have);
			if (r <= 0)
				return r < 0 ? -errno : -ECONNRESET;
			have += (size_t) r;
			buf[have] = '\0';
		}
		*ret_body_len = have - head_len;
		return status;
	}
	need = head_len + strtoul(cl + 17, NULL, 10);
	if (need >= cap)
		return -E2BIG;
	while (have < need) {
		ssize_t r = read(fd, buf + have, need - have);

		if (r <= 0)
			return r < 0 ? -errno : -ECONNRESET;
		have += (size_t) r;
	}
	buf[have] = '\0';
	*ret_body_len = have - head_len;
	return status;
}

static int bench_http(const struct options *o, uint64_t *samples)
{
	char host[300], body[8192], req[12288], auth[600] = "";
	static char resp[1 << 20];
	size_t body_len, req_len, got;
	int fd, status;

	/* the prompt as a JSON string: escape what JSON needs */
	{
		size_t n = 0;

		n += (size_t) snprintf(body, sizeof(body), "{\"prompt\":\"");
		for (const char *p = o->prompt; *p && n + 8 < sizeof(body); p++) {
			unsigned char c = (unsigned char) *p;

			if (c == '"' || c == '\\')
				n += (size_t) snprintf(body + n, sizeof(body) - n, "\\%c", c);
			else if (c < 0x20)
				n += (size_t) snprintf(body + n, sizeof(body) - n, "\\u%04x", c);
			else
				body[n++] = (char) c;
		}
		n += (size_t) snprintf(body + n, sizeof(body) - n,
				       "\",\"max_tokens\":1,\"temperature\":0}");
		if (n >= sizeof(body)) {
			fprintf(stderr, "molly-bench-gateway: the prompt is too long\n");
			return -E2BIG;
		}
		body_len = n;
	}
	fd = connect_to(o, host, sizeof(host));
	if (fd < 0) {
		fprintf(stderr, "molly-bench-gateway: cannot connect to %s: %s\n",
			o->unix_path ? o->unix_path : o->url, strerror(-fd));
		return fd;
	}
	if (o->key)
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", o->key);
	req_len =
	    (size_t) snprintf(req, sizeof(req),
			      "POST /v1/completions HTTP/1.1\r\nHost: %s\r\n%s"
			      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
			      host, auth, body_len, body);
	for (long i = -o->warmup; i < o->n; i++) {
		uint64_t t0 = now_ns();
		int k = write_all(fd, req, req_len);

		if (k < 0) {
			fprintf(stderr, "molly-bench-gateway: write: %s\n", strerror(-k));
			close(fd);
			return k;
		}
		status = read_response(fd, resp, sizeof(resp), &got);
		if (status != 200) {
			fprintf(stderr, "molly-bench-gateway: HTTP %d%s%s\n", status,
				status > 0 ? ": " : "", status > 0 ? resp : strerror(-status));
			close(fd);
			return status < 0 ? status : -EPROTO;
		}
		if (i >= 0)
			samples[i] = now_ns() - t0;
	}
	close(fd);
	return 0;
}

static int bench_dbus(const struct options *o, uint64_t *samples)
{
	sd_bus *bus = NULL;
	int r;

	r = sd_bus_new(&bus);
	if (r >= 0)
		r = sd_bus_set_address(bus, o->dbus);
	if (r >= 0)
		r = sd_bus_set_bus_client(bus, 1);
	if (r >= 0)
		r = sd_bus_start(bus);
	if (r < 0) {
		fprintf(stderr, "molly-bench-gateway: cannot connect to the bus %s: %s\n", o->dbus,
			strerror(-r));
		sd_bus_unref(bus);
		return r;
	}
	for (long i = -o->warmup; i < o->n && r >= 0; i++) {
		sd_bus_message *m = NULL, *reply = NULL;
		sd_bus_error error = SD_BUS_ERROR_NULL;
		uint64_t t0 = now_ns();

		r = sd_bus_message_new_method_call(bus, &m, "org.molly.Daemon1", "/org/molly/Daemon1",
						   "org.molly.Inference1", "Generate");
		if (r >= 0)
			r = sd_bus_message_append(m, "a{sv}", 3, "prompt", "s", o->prompt, "max_tokens",
						  "u", 1, "temperature", "d", 0.0);
		if (r >= 0)
			r = sd_bus_call(bus, m, 0, &error, &reply);
		if (r < 0)
			fprintf(stderr, "molly-bench-gateway: Generate: %s\n",
				error.message ? error.message : strerror(-r));
		else if (i >= 0)
			samples[i] = now_ns() - t0;
		sd_bus_error_free(&error);
		sd_bus_message_unref(reply);
		sd_bus_message_unref(m);
	}
	sd_bus_flush_close_unref(bus);
	return r < 0 ? r : 0;
}

/* --via: one request to o->url, one to o->via, alternately. */
static int bench_route(const struct options *o, uint64_t *direct, uint64_t *routed)
{
	struct options ov = *o;
	char host[300], host_via[300], req[2][4096];
	static char resp[1 << 16];
	const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":1,\"temperature\":0}";
	size_t req_len[2], got;
	int fd[2];

	ov.url = o->via;
	fd[0] = connect_to(o, host, sizeof(host));
	fd[1] = connect_to(&ov, host_via, sizeof(host_via));
	if (fd[0] < 0 || fd[1] < 0) {
		fprintf(stderr, "molly-bench-gateway: cannot connect to %s\n",
			fd[0] < 0 ? o->url : o->via);
		return -EHOSTUNREACH;
	}
	for (int w = 0; w < 2; w++)
		req_len[w] = (size_t) snprintf(
			req[w], sizeof(req[w]),
			"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: "
			"application/json\r\nContent-Length: %zu\r\n\r\n%s",
			w ? host_via : host, strlen(body), body);
	for (long i = -o->warmup; i < o->n; i++)
		for (int w = 0; w < 2; w++) {
			uint64_t t0 = now_ns();
			int k = write_all(fd[w], req[w], req_len[w]), status;

			if (k < 0)
				return k;
			status = read_response(fd[w], resp, sizeof(resp), &got);
			if (status != 200) {
				fprintf(stderr, "molly-bench-gateway: %s: HTTP %d\n",
					w ? o->via : o->url, status);
				return -EPROTO;
			}
			/* A routed answer that came from the router's own engine (the target
			 * refused, or the router preferred T0) would measure the wrong path. */
			if (w && strstr(resp, "\"target\":\"local:")) {
				fprintf(stderr,
					"molly-bench-gateway: %s answered with its local engine, not "
					"through the target: check its [Target] (Model=, policy) and its "
					"audit record\n",
					o->via);
				return -EPROTO;
			}
			if (i >= 0)
				(w ? routed : direct)[i] = now_ns() - t0;
		}
	close(fd[0]);
	close(fd[1]);
	return 0;
}

static void usage(FILE *f)
{
	fputs("usage: molly-bench-gateway --model M (--url http://127.0.0.1:PORT | --unix PATH |\n"
	      "                           --dbus BUS_ADDRESS)\n"
	      "                           [-n N] [--warmup W] [--prompt P] [--threads T]\n"
	      "                           [--key KEY] [--json]\n"
	      "       molly-bench-gateway --url http://T1:PORT --via http://MOLLYD:PORT [-n N]\n"
	      "                           [--warmup W] [--json]\n",
	      f);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "url", required_argument, NULL, 'u' },
		{ "via", required_argument, NULL, 'V' },
		{ "unix", required_argument, NULL, 'U' },
		{ "dbus", required_argument, NULL, 'D' },
		{ "prompt", required_argument, NULL, 'p' },
		{ "threads", required_argument, NULL, 't' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "key", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct options o = { .prompt = "Once upon a time", .n = 1000, .warmup = 50, .threads = 1 };
	_cleanup_free_ uint64_t *direct = NULL, *http = NULL;
	double d50, d99, h50, h99;
	int c, k;

	while ((c = getopt_long(argc, argv, "n:h", longopts, NULL)) >= 0) {
		switch (c) {
		case 'm':
			o.model = optarg;
			break;
		case 'u':
			o.url = optarg;
			break;
		case 'V':
			o.via = optarg;
			break;
		case 'U':
			o.unix_path = optarg;
			break;
		case 'D':
			o.dbus = optarg;
			break;
		case 'p':
			o.prompt = optarg;
			break;
		case 'k':
			o.key = optarg;
			break;
		case 'j':
			o.json = true;
			break;
		case 't':
			o.threads = atoi(optarg);
			break;
		case 'w':
			o.warmup = atol(optarg);
			break;
		case 'n':
			o.n = atol(optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (o.via) {
		if (!o.url || o.n < 1 || o.n > 10000000 || o.warmup < 0) {
			usage(stderr);
			return 2;
		}
		direct = calloc((size_t) o.n, sizeof(*direct));
		http = calloc((size_t) o.n, sizeof(*http));
		if (!direct || !http || bench_route(&o, direct, http) < 0)
			return 1;
		p50_p99_us(direct, o.n, &d50, &d99);
		p50_p99_us(http, o.n, &h50, &h99);
		if (o.json)
			printf("{\"n\":%ld,\"t1_us\":{\"p50\":%.1f,\"p99\":%.1f},"
			       "\"via_mollyd_us\":{\"p50\":%.1f,\"p99\":%.1f},"
			       "\"overhead_us\":{\"p50\":%.1f,\"p99\":%.1f}}\n",
			       o.n, d50, d99, h50, h99, h50 - d50, h99 - d99);
		else {
			printf("1-token greedy completion, %ld samples each (%ld warm-up), "
			       "alternating\n", o.n, o.warmup);
			printf("  T1 directly (%s)  p50 %9.1f us   p99 %9.1f us\n", o.url, d50, d99);
			printf("  through mollyd (%s)  p50 %9.1f us   p99 %9.1f us\n", o.via, h50,
			       h99);
			printf("  routing overhead  p50 %9.1f us (target <= 1000)   p99 %9.1f us\n",
			       h50 - d50, h99 - d99);
		}
		return 0;
	}
	if (!o.model || (!!o.url + !!o.unix_path + !!o.dbus) != 1 || o.n < 1 || o.n > 10000000 || o.warmup < 0 ||
	    o.threads < 1 || !o.prompt[0]) {
		usage(stderr);
		return 2;
	}
	direct = calloc((size_t) o.n, sizeof(*direct));
	http = calloc((size_t) o.n, sizeof(*http));
	if (!direct || !http)
		return 1;
	k = bench_direct(&o, direct);
	if (k < 0)
		return 1;
	k = o.dbus ? bench_dbus(&o, http) : bench_http(&o, http);
	if (k < 0)
		return 1;
	p50_p99_us(direct, o.n, &d50, &d99);
	p50_p99_us(http, o.n, &h50, &h99);
	if (o.json) {
		printf("{\"n\":%ld,\"direct_us\":{\"p50\":%.1f,\"p99\":%.1f},"
		       "\"%s_us\":{\"p50\":%.1f,\"p99\":%.1f},"
		       "\"overhead_us\":{\"p50\":%.1f,\"p99\":%.1f}}\n",
		       o.n, d50, d99, o.dbus ? "dbus" : "http", h50, h99, h50 - d50, h99 - d99);
	} else {
		printf("1-token greedy request, %ld samples (%ld warm-up), prompt \"%s\"\n", o.n,
		       o.warmup, o.prompt);
		printf("  direct (tokenize + scheduler)  p50 %9.1f us   p99 %9.1f us\n", d50, d99);
		printf("  %-30s p50 %9.1f us   p99 %9.1f us\n",
		       o.dbus ? "D-Bus (Generate)" : o.unix_path ? "HTTP (unix socket)" : "HTTP (loopback TCP)",
		       h50, h99);
		printf("  gateway overhead               p50 %9.1f us   p99 %9.1f us\n", h50 - d50,
		       h99 - d99);
	}
	return 0;
}
