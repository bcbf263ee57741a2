/* SPDX-License-Identifier: MIT */
/*
 * molly: the command line client of mollyd.
 *
 *   molly ask PROMPT [--adapter A] [--chat] [--max-tokens N] [--temperature T] [--seed S]
 *             [--stop STR]...           streams the answer (D-Bus Stream, one JSON line each)
 *             [--transport dev|dbus|auto] the same through libmolly: /dev/molly or D-Bus
 *             [--transport http [--url U | --unix-socket P]]  the OpenAI front (SSE);
 *                                       MOLLY_API_KEY: the member's key
 *   molly adapters list                 the adapters in the registry (name, version, hash,
 *                                       tier (hot, warm, loading, cold, bad), hits and
 *                                       misses per tier, bytes, pinned...)
 *   molly adapters import PATH [--name N] [--load]    a new version of N in the registry
 *   molly adapters load|unload|pin|unpin|remove NAME
 *   molly adapters prefetch NAME        starts reading a loaded adapter toward the hot tier
 *   molly adapters history NAME         the versions of NAME
 *   molly adapters rollback NAME VERSION    makes an earlier version the active one
 *   molly adapters gc                   prunes old versions, removes unreferenced blobs
 *   molly adapters fsck [--state-dir DIR] [--repair]   checks the registry (no daemon needed)
 *   molly status                        the daemon's counters
 *   molly config check [FILE]           parses the configuration like mollyd would
 *   molly config apply [--config FILE] [--out DIR]   writes the systemd drop-in with
 *                                       IPAddressDeny=any and the targets' addresses
 *   molly key new NAME                  a new API key and the [Member NAME] lines to add
 *   molly explain [--config FILE] [--] PROMPT   the policy's class, findings (kind, span,
 *                                       class, layer, score) and tiers for PROMPT (no daemon
 *                                       needed; PROMPT "-" reads stdin; a PROMPT starting with
 *                                       '-' needs "--" only when it looks like an option)
 *   molly explain --daemon PROMPT       the running daemon's decision (Policy1.Explain) with
 *                                       the router's candidate targets and their scores
 *
 * Global options: --json (machine-readable output), --bus-address ADDRESS (else the system bus:
 * $DBUS_SYSTEM_BUS_ADDRESS is honoured), --session (the session bus).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <systemd/sd-bus.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <curl/curl.h>
#include <molly/molly.h>

#include "audit/audit.h"
#include "registry/registry.h"
#include "egress/worker.h"
#include "router/priors.h"
#include "core/config.h"
#include "core/default-model.h"
#include "front/keys.h"
#include "policy/policy.h"

#ifndef MOLLY_VERSION
#define MOLLY_VERSION "0.1.0"
#endif

#define BUS_NAME "org.molly.Daemon1"
#define BUS_PATH "/org/molly/Daemon1"

static bool arg_json;
static const char *arg_bus_address;
static bool arg_session;

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void) sig;
	interrupted = 1;
}

/* ---- the bus ---- */

static int bus_open(sd_bus **ret)
{
	sd_bus *bus = NULL;
	int r;

	if (arg_bus_address) {
		r = sd_bus_new(&bus);
		if (r >= 0)
			r = sd_bus_set_address(bus, arg_bus_address);
		if (r >= 0)
			r = sd_bus_set_bus_client(bus, true);
		if (r >= 0)
			r = sd_bus_start(bus);
	} else if (arg_session)
		r = sd_bus_open_user(&bus);
	else
		r = sd_bus_open_system(&bus);
	if (r < 0) {
		fprintf(stderr,
			"molly: cannot connect to the %s: %s\n"
			"  Is D-Bus running? For a private bus pass --bus-address=ADDRESS or set "
			"DBUS_SYSTEM_BUS_ADDRESS.\n",
			arg_bus_address ? arg_bus_address
			: arg_session	? "session bus"
					: "system bus",
			strerror(-r));
		sd_bus_unref(bus);
		return r;
	}
	*ret = bus;
	return 0;
}

/* Explains a failed call and what to do about it. Returns 1 (the exit code). */
static int explain(const char *what, const sd_bus_error *error, int r)
{
	const char *name = error && error->name ? error->name : "";
	const char *msg = error && error->message ? error->message : strerror(-r);

	fprintf(stderr, "molly: %s: %s\n", what, msg);
	if (sd_bus_error_has_names(error, SD_BUS_ERROR_SERVICE_UNKNOWN,
				   SD_BUS_ERROR_NAME_HAS_NO_OWNER))
		fprintf(stderr, "  mollyd is not running on this bus. Start it: systemctl start "
				"mollyd (or check: journalctl -u mollyd)\n");
	else if (strcmp(name, SD_BUS_ERROR_ACCESS_DENIED) == 0)
		fprintf(stderr,
			"  Administrative commands need root, the group named by "
			"AdminGroup= in mollyd.conf, or polkit; try with sudo. Asking needs "
			"membership of the group 'molly'.\n");
	else if (strcmp(name, "org.molly.Error.ModelNotFound") == 0)
		fprintf(stderr, "  See the adapters with: molly adapters list\n");
	else if (strcmp(name, "org.molly.Error.QueueFull") == 0)
		fprintf(stderr, "  The daemon is busy; retry in a moment.\n");
	else if (strcmp(name, "org.molly.Error.Unavailable") == 0)
		fprintf(stderr, "  The daemon is stopping or restarting; retry in a moment.\n");
	else if (strcmp(name, SD_BUS_ERROR_NO_REPLY) == 0 ||
		 strcmp(name, SD_BUS_ERROR_TIMEOUT) == 0)
		fprintf(stderr, "  The daemon did not answer in time (journalctl -u mollyd).\n");
	return 1;
}

/* ---- molly ask ---- */

struct ask_opts {
	const char *adapter;
	bool chat;
	int64_t max_tokens;  /* -1: not given */
	double temperature;  /* NAN: not given */
	int64_t seed;
	bool has_seed;
	const char **stop;
	size_t n_stop;
};

static int append_request(sd_bus_message *m, const char *prompt, const struct ask_opts *o)
{
	int r;

	r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r < 0)
		return r;
	if (o->chat)
		r = sd_bus_message_append(m, "{sv}", "messages", "aa{ss}", 1, 2, "role", "user",
					  "content", prompt);
	else
		r = sd_bus_message_append(m, "{sv}", "prompt", "s", prompt);
	if (r >= 0 && o->adapter)
		r = sd_bus_message_append(m, "{sv}", "adapter", "s", o->adapter);
	if (r >= 0 && o->max_tokens >= 0)
		r = sd_bus_message_append(m, "{sv}", "max_tokens", "u", (uint32_t) o->max_tokens);
	if (r >= 0 && !isnan(o->temperature))
		r = sd_bus_message_append(m, "{sv}", "temperature", "d", o->temperature);
	if (r >= 0 && o->has_seed)
		r = sd_bus_message_append(m, "{sv}", "seed", "x", o->seed);
	if (r >= 0 && o->n_stop > 0) {
		r = sd_bus_message_open_container(m, 'e', "sv");
		if (r >= 0)
			r = sd_bus_message_append(m, "s", "stop");
		if (r >= 0)
			r = sd_bus_message_open_container(m, 'v', "as");
		if (r >= 0)
			r = sd_bus_message_open_container(m, 'a', "s");
		for (size_t i = 0; r >= 0 && i < o->n_stop; i++)
			r = sd_bus_message_append(m, "s", o->stop[i]);
		for (int k = 0; r >= 0 && k < 3; k++)
			r = sd_bus_message_close_container(m);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	return r;
}

/* Handles one JSON line of the stream; 1 at the final line, -1 on an error event. */
static int ask_line(const char *line, bool *ended_with_newline)
{
	struct json_object *o = json_tokener_parse(line), *v;
	const char *type;
	int ret = 0;

	if (arg_json) {
		printf("%s\n", line);
		fflush(stdout);
	}
	if (!o || !json_object_object_get_ex(o, "type", &v)) {
		fprintf(stderr, "molly: the daemon sent a line that is not an event: %.80s\n",
			line);
		json_object_put(o);
		return -1;
	}
	type = json_object_get_string(v);
	if (strcmp(type, "token") == 0) {
		if (!arg_json && json_object_object_get_ex(o, "text", &v)) {
			const char *t = json_object_get_string(v);
			size_t n = (size_t) json_object_get_string_len(v);
			fwrite(t, 1, n, stdout);
			fflush(stdout);
			if (n > 0)
				*ended_with_newline = t[n - 1] == '\n';
		}
	} else if (strcmp(type, "done") == 0) {
		if (!arg_json && !*ended_with_newline)
			putchar('\n');
		ret = 1;
	} else if (strcmp(type, "error") == 0) {
		if (!arg_json) {
			if (!*ended_with_newline)
				putchar('\n');
			fflush(stdout);
			fprintf(stderr, "molly: %s\n",
				json_object_object_get_ex(o, "message", &v)
					? json_object_get_string(v)
					: "the request failed");
		}
		ret = -1;
	}
	json_object_put(o);
	return ret;
}

/* molly ask --transport dev|dbus: through libmolly, printed as it comes. With --json, one
 * JSON object per event (type, id, text / finish_reason, usage / error). */
static int ask_via_libmolly(const char *prompt, const struct ask_opts *o,
			    enum molly_transport transport)
{
	struct molly *h = NULL;
	struct molly_params p;
	struct molly_output out;
	_cleanup_free_ char *messages = NULL;
	bool nl = true;
	uint64_t id;
	int r;

	if (o->n_stop > 0) {
		fprintf(stderr, "molly ask: --stop is not part of the /dev/molly ABI v1; "
				"use --transport dbus\n");
		return 2;
	}
	r = molly_open(transport, &h);
	if (r < 0) {
		fprintf(stderr, "molly: cannot open the %s transport: %s\n",
			transport == MOLLY_TRANSPORT_DEV ? "/dev/molly" : "D-Bus", strerror(-r));
		return 1;
	}
	molly_params_init(&p);
	if (o->chat) {
		struct json_object *a = json_object_new_array(), *m = json_object_new_object();
		json_object_object_add(m, "role", json_object_new_string("user"));
		json_object_object_add(m, "content", json_object_new_string(prompt));
		json_object_array_add(a, m);
		messages = strdup(json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN));
		json_object_put(a);
		p.messages_json = messages;
	} else {
		p.prompt = prompt;
	}
	p.model = o->adapter;
	if (o->max_tokens >= 0)
		p.max_tokens = (uint32_t) o->max_tokens;
	if (!isnan(o->temperature))
		p.temperature = o->temperature;
	p.has_seed = o->has_seed;
	p.seed = (uint64_t) o->seed;
	r = molly_submit(h, &p, &id);
	if (r < 0) {
		fprintf(stderr, "molly: ask: %s\n", molly_last_error(h)[0] ? molly_last_error(h)
									   : strerror(-r));
		molly_close(h);
		return 1;
	}
	for (;;) {
		r = molly_next_event(h, &out, -1);
		if (r <= 0) {
			fprintf(stderr, "molly: reading events: %s\n", strerror(-r));
			molly_close(h);
			return 1;
		}
		if (arg_json) {
			struct json_object *j = json_object_new_object();
			json_object_object_add(j, "transport",
					       json_object_new_string(molly_transport_name(h)));
			json_object_object_add(j, "id", json_object_new_int64((int64_t) out.id));
			if (out.type == MOLLY_OUTPUT_TEXT) {
				json_object_object_add(j, "type", json_object_new_string("token"));
				json_object_object_add(j, "text", json_object_new_string_len(
								  out.text, (int) out.text_len));
			} else if (out.type == MOLLY_OUTPUT_DONE) {
				json_object_object_add(j, "type", json_object_new_string("done"));
				json_object_object_add(j, "finish_reason",
						       json_object_new_string(out.finish_reason));
				json_object_object_add(j, "model", json_object_new_string(out.model));
				json_object_object_add(j, "prompt_tokens",
						       json_object_new_int64(out.prompt_tokens));
				json_object_object_add(j, "completion_tokens",
						       json_object_new_int64(out.completion_tokens));
			} else {
				json_object_object_add(j, "type", json_object_new_string("error"));
				json_object_object_add(j, "code",
						       json_object_new_string(out.error_name));
				json_object_object_add(j, "message",
						       json_object_new_string(out.error_message));
			}
			printf("%s\n", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN));
			fflush(stdout);
			json_object_put(j);
		}
		if (out.type == MOLLY_OUTPUT_TEXT) {
			if (!arg_json) {
				fwrite(out.text, 1, out.text_len, stdout);
				fflush(stdout);
				if (out.text_len)
					nl = out.text[out.text_len - 1] == '\n';
			}
			continue;
		}
		if (!arg_json && !nl)
			putchar('\n');
		if (out.type == MOLLY_OUTPUT_ERROR && !arg_json)
			fprintf(stderr, "molly: %s: %s\n", out.error_name, out.error_message);
		molly_close(h);
		return out.type == MOLLY_OUTPUT_DONE ? 0 : 1;
	}
}

/* molly ask --transport http: the OpenAI-compatible front, streamed (SSE). */
struct http_ask {
	char *buf;           /* a partial line */
	size_t n, cap;
	bool chat, nl, done, failed;
	long status;
	char error[512];
};

/* Handles one SSE line; the text goes to stdout as it comes. */
static void http_ask_line(struct http_ask *a, const char *line)
{
	struct json_object *o, *v, *c;
	const char *text = NULL;

	if (strncmp(line, "data: ", 6) != 0)
		return;
	line += 6;
	if (strcmp(line, "[DONE]") == 0) {
		a->done = true;
		return;
	}
	o = json_tokener_parse(line);
	if (!o)
		return;
	if (json_object_object_get_ex(o, "error", &v)) {
		a->failed = true;
		snprintf(a->error, sizeof(a->error), "%s",
			 json_object_object_get_ex(v, "message", &c) ? json_object_get_string(c)
								     : line);
	} else if (json_object_object_get_ex(o, "choices", &v) &&
		   json_object_array_length(v) > 0) {
		c = json_object_array_get_idx(v, 0);
		if (a->chat && json_object_object_get_ex(c, "delta", &c) &&
		    json_object_object_get_ex(c, "content", &c))
			text = json_object_get_string(c);
		else if (!a->chat && json_object_object_get_ex(c, "text", &c))
			text = json_object_get_string(c);
	}
	if (arg_json) {
		printf("%s\n", line);
	} else if (text && *text) {
		fputs(text, stdout);
		a->nl = text[strlen(text) - 1] == '\n';
	}
	fflush(stdout);
	json_object_put(o);
}

static size_t http_ask_write(char *data, size_t size, size_t n, void *userdata)
{
	struct http_ask *a = userdata;
	size_t len = size * n;
	char *nl;

	if (a->n + len + 1 > a->cap) {
		size_t cap = (a->n + len + 1) * 2;
		char *b = realloc(a->buf, cap);
		if (!b)
			return 0;
		a->buf = b;
		a->cap = cap;
	}
	memcpy(a->buf + a->n, data, len);
	a->n += len;
	a->buf[a->n] = 0;
	while ((nl = memchr(a->buf, '\n', a->n))) {
		*nl = 0;
		if (nl > a->buf && nl[-1] == '\r')
			nl[-1] = 0;
		if (a->status < 400)
			http_ask_line(a, a->buf);
		else if (a->buf[0] && !a->error[0])
			snprintf(a->error, sizeof(a->error), "%s", a->buf);
		a->n -= (size_t) (nl + 1 - a->buf);
		memmove(a->buf, nl + 1, a->n + 1);
	}
	return len;
}

static int ask_via_http(const char *prompt, const struct ask_opts *o, const char *url,
			const char *unix_socket)
{
	_cleanup_free_ char *endpoint = NULL, *auth = NULL;
	struct json_object *body = json_object_new_object();
	struct http_ask a = { .chat = o->chat, .nl = true };
	struct curl_slist *headers = NULL;
	const char *key = getenv("MOLLY_API_KEY");
	CURLcode rc;
	CURL *curl;

	if (o->chat) {
		struct json_object *msgs = json_object_new_array(), *m = json_object_new_object();
		json_object_object_add(m, "role", json_object_new_string("user"));
		json_object_object_add(m, "content", json_object_new_string(prompt));
		json_object_array_add(msgs, m);
		json_object_object_add(body, "messages", msgs);
	} else {
		json_object_object_add(body, "prompt", json_object_new_string(prompt));
	}
	if (o->adapter)
		json_object_object_add(body, "model", json_object_new_string(o->adapter));
	if (o->max_tokens >= 0)
		json_object_object_add(body, "max_tokens", json_object_new_int64(o->max_tokens));
	if (!isnan(o->temperature))
		json_object_object_add(body, "temperature", json_object_new_double(o->temperature));
	if (o->has_seed)
		json_object_object_add(body, "seed", json_object_new_int64(o->seed));
	if (o->n_stop > 0) {
		struct json_object *st = json_object_new_array();
		for (size_t i = 0; i < o->n_stop; i++)
			json_object_array_add(st, json_object_new_string(o->stop[i]));
		json_object_object_add(body, "stop", st);
	}
	json_object_object_add(body, "stream", json_object_new_boolean(1));
	if (asprintf(&endpoint, "%s%s", url,
		     o->chat ? "/v1/chat/completions" : "/v1/completions") < 0)
		endpoint = NULL;
	curl = curl_easy_init();
	if (!curl || !endpoint) {
		json_object_put(body);
		return 1;
	}
	headers = curl_slist_append(headers, "Content-Type: application/json");
	if (key && *key && asprintf(&auth, "Authorization: Bearer %s", key) >= 0)
		headers = curl_slist_append(headers, auth);
	curl_easy_setopt(curl, CURLOPT_URL, endpoint);
	if (unix_socket)
		curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, unix_socket);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS,
			 json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN));
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, http_ask_write);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &a);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	rc = curl_easy_perform(curl);
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &a.status);
	curl_slist_free_all(headers);
	curl_easy_cleanup(curl);
	json_object_put(body);
	if (a.n > 0 && a.status < 400) /* a last line without its newline */
		http_ask_line(&a, a.buf);
	free(a.buf);
	if (!arg_json && !a.nl)
		putchar('\n');
	if (rc != CURLE_OK) {
		fprintf(stderr, "molly: %s: %s\n", endpoint, curl_easy_strerror(rc));
		return 1;
	}
	if (a.status >= 400 || a.failed || !a.done) {
		fprintf(stderr, "molly: HTTP %ld: %s\n", a.status,
			a.error[0] ? a.error : "the stream ended without [DONE]");
		return 1;
	}
	return 0;
}

static int cmd_ask(int argc, char **argv)
{
	static const struct option options[] = {
		{ "adapter", required_argument, NULL, 'a' },
		{ "chat", no_argument, NULL, 'C' },
		{ "max-tokens", required_argument, NULL, 'n' },
		{ "temperature", required_argument, NULL, 't' },
		{ "seed", required_argument, NULL, 's' },
		{ "stop", required_argument, NULL, 'S' },
		{ "transport", required_argument, NULL, 'T' },
		{ "url", required_argument, NULL, 'U' },
		{ "unix-socket", required_argument, NULL, 'X' },
		{},
	};
	struct ask_opts o = { .max_tokens = -1, .temperature = NAN };
	const char *transport = NULL, *url = "http://127.0.0.1:8411", *unix_socket = NULL;
	_cleanup_free_ const char **stops = calloc((size_t) argc + 1, sizeof(char *));
	_cleanup_free_ char *stdin_prompt = NULL;
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	const char *prompt, *handle;
	char buf[65536];
	size_t n_buf = 0;
	bool nl = true;
	int fd, c, r, result = 0;

	if (!stops)
		return 1;
	optind = 0; /* 0: glibc re-initialises (the main parse used "+") */
	while ((c = getopt_long(argc, argv, "a:", options, NULL)) >= 0) {
		char *end;
		switch (c) {
		case 'a':
			o.adapter = optarg;
			break;
		case 'C':
			o.chat = true;
			break;
		case 'n':
			errno = 0;
			o.max_tokens = strtoll(optarg, &end, 10);
			if (errno || *end || o.max_tokens < 0 || o.max_tokens > UINT32_MAX) {
				fprintf(stderr,
					"molly ask: --max-tokens needs a whole number >= 0\n");
				return 2;
			}
			break;
		case 't':
			errno = 0;
			o.temperature = strtod(optarg, &end);
			if (errno || *end || !(o.temperature >= 0)) {
				fprintf(stderr, "molly ask: --temperature needs a number >= 0\n");
				return 2;
			}
			break;
		case 's':
			errno = 0;
			o.seed = strtoll(optarg, &end, 10);
			if (errno || *end) {
				fprintf(stderr, "molly ask: --seed needs a whole number\n");
				return 2;
			}
			o.has_seed = true;
			break;
		case 'S':
			stops[o.n_stop++] = optarg;
			break;
		case 'T':
			if (strcmp(optarg, "dev") != 0 && strcmp(optarg, "dbus") != 0 &&
			    strcmp(optarg, "http") != 0 && strcmp(optarg, "auto") != 0) {
				fprintf(stderr,
					"molly ask: --transport is dev, dbus, http or auto\n");
				return 2;
			}
			transport = optarg;
			break;
		case 'U':
			url = optarg;
			break;
		case 'X':
			unix_socket = optarg;
			url = "http://localhost";
			break;
		default:
			return 2;
		}
	}
	o.stop = stops;
	if (optind + 1 != argc) {
		fprintf(stderr, "Usage: molly ask \"PROMPT\" [--adapter NAME] [--chat] "
				"[--max-tokens N] [--temperature T] [--seed S] [--stop STR]...\n"
				"  [--transport dev|dbus|auto] | [--transport http [--url URL | "
				"--unix-socket PATH]]\n"
				"  (PROMPT '-' reads it from standard input)\n");
		return 2;
	}
	prompt = argv[optind];
	if (strcmp(prompt, "-") == 0) {
		size_t cap = 0, n = 0;
		ssize_t k;
		FILE *in = open_memstream(&stdin_prompt, &cap);
		if (!in)
			return 1;
		while ((k = read(STDIN_FILENO, buf, sizeof(buf))) > 0)
			fwrite(buf, 1, (size_t) k, in);
		fclose(in);
		(void) n;
		/* `echo PROMPT | molly ask -` means PROMPT, not PROMPT and a newline. */
		n = strlen(stdin_prompt);
		if (n > 0 && stdin_prompt[n - 1] == '\n')
			stdin_prompt[n - 1] = 0;
		prompt = stdin_prompt;
	}

	if (transport && strcmp(transport, "http") == 0)
		return ask_via_http(prompt, &o, url, unix_socket);
	if (transport) {
		/* libmolly reads DBUS_SYSTEM_BUS_ADDRESS for its D-Bus transport */
		if (arg_bus_address)
			setenv("DBUS_SYSTEM_BUS_ADDRESS", arg_bus_address, 1);
		return ask_via_libmolly(prompt, &o,
					strcmp(transport, "dev") == 0	? MOLLY_TRANSPORT_DEV
					: strcmp(transport, "dbus") == 0 ? MOLLY_TRANSPORT_DBUS
									 : MOLLY_TRANSPORT_AUTO);
	}
	r = bus_open(&bus);
	if (r < 0)
		return 1;
	r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, BUS_PATH, "org.molly.Inference1",
					   "Stream");
	if (r >= 0)
		r = append_request(m, prompt, &o);
	if (r < 0) {
		fprintf(stderr, "molly: building the request: %s\n", strerror(-r));
		return 1;
	}
	r = sd_bus_call(bus, m, 0, &error, &reply);
	if (r < 0)
		return explain("ask", &error, r);
	r = sd_bus_message_read(reply, "ho", &fd, &handle);
	if (r < 0) {
		fprintf(stderr, "molly: unexpected reply: %s\n", strerror(-r));
		return 1;
	}

	/* Ctrl-C: closing the fd is what cancels; we just stop reading and exit. */
	signal(SIGINT, on_sigint);
	for (;;) {
		ssize_t k;
		char *nlp;

		if (interrupted) {
			fprintf(stderr, "\nmolly: interrupted; the request is cancelled\n");
			return 130;
		}
		if (n_buf == sizeof(buf)) {
			fprintf(stderr, "molly: a stream line is longer than %zu bytes\n",
				sizeof(buf));
			return 1;
		}
		k = read(fd, buf + n_buf, sizeof(buf) - n_buf - 1);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "molly: reading the stream: %s\n", strerror(errno));
			return 1;
		}
		if (k == 0) {
			if (result == 0)
				fprintf(stderr,
					"\nmolly: the stream ended without a final event (did "
					"the daemon stop?)\n");
			return result == 1 ? 0 : 1;
		}
		n_buf += (size_t) k;
		buf[n_buf] = 0;
		while ((nlp = memchr(buf, '\n', n_buf))) {
			*nlp = 0;
			int s = ask_line(buf, &nl);
			memmove(buf, nlp + 1, n_buf - (size_t) (nlp + 1 - buf));
			n_buf -= (size_t) (nlp + 1 - buf);
			if (s != 0)
				return s > 0 ? 0 : 1;
		}
	}
	(void) result;
}

/* ---- molly status ---- */

/* Prints a variant's value as text (or adds it to a JSON object). */
static int print_variant(sd_bus_message *m, const char *key, struct json_object *json,
			 bool print_key)
{
	const char *contents;
	char type;
	int r;

	r = sd_bus_message_peek_type(m, &type, &contents);
	if (r < 0)
		return r;
	r = sd_bus_message_enter_container(m, 'v', contents);
	if (r < 0)
		return r;
	if (print_key && !json)
		printf("%-20s ", key);
	switch (contents[0]) {
	case 's': {
		const char *s;
		r = sd_bus_message_read_basic(m, 's', &s);
		if (r < 0)
			return r;
		if (json)
			json_object_object_add(json, key, json_object_new_string(s));
		else
			printf("%s", s);
		break;
	}
	case 'b': {
		int b;
		r = sd_bus_message_read_basic(m, 'b', &b);
		if (r < 0)
			return r;
		if (json)
			json_object_object_add(json, key, json_object_new_boolean(b));
		else
			printf("%s", b ? "yes" : "no");
		break;
	}
	case 'u': {
		uint32_t u;
		r = sd_bus_message_read_basic(m, 'u', &u);
		if (r < 0)
			return r;
		if (json)
			json_object_object_add(json, key, json_object_new_int64(u));
		else
			printf("%u", u);
		break;
	}
	case 'i': {
		int32_t i;
		r = sd_bus_message_read_basic(m, 'i', &i);
		if (r < 0)
			return r;
		if (json)
			json_object_object_add(json, key, json_object_new_int(i));
		else
			printf("%d", i);
		break;
	}
	case 'd': {
		double d;
		r = sd_bus_message_read_basic(m, 'd', &d);
		if (r < 0)
			return r;
		if (json)
			json_object_object_add(json, key, json_object_new_double(d));
		else
			printf("%.6g", d);
		break;
	}
	case 't': {
		uint64_t t;
		r = sd_bus_message_read_basic(m, 't', &t);
		if (r < 0)
			return r;
		if (json)
			json_object_object_add(json, key, json_object_new_uint64(t));
		else
			printf("%llu", (unsigned long long) t);
		break;
	}
	case 'a': {
		const char *s;
		struct json_object *a = json ? json_object_new_array() : NULL;
		bool first = true;
		r = sd_bus_message_enter_container(m, 'a', "s");
		if (r < 0)
			return r;
		while ((r = sd_bus_message_read_basic(m, 's', &s)) > 0) {
			if (a)
				json_object_array_add(a, json_object_new_string(s));
			else
				printf("%s%s", first ? "" : ",", s);
			first = false;
		}
		if (r < 0)
			return r;
		r = sd_bus_message_exit_container(m);
		if (r < 0)
			return r;
		if (json)
			json_object_object_add(json, key, a);
		else if (first)
			printf("-");
		break;
	}
	default:
		r = sd_bus_message_skip(m, contents);
		if (r < 0)
			return r;
		if (!json)
			printf("(%s)", contents);
	}
	if (print_key && !json)
		printf("\n");
	return sd_bus_message_exit_container(m);
}

static int cmd_status(int argc, char **argv)
{
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	struct json_object *json = arg_json ? json_object_new_object() : NULL;
	int r;

	if (argc > 1) {
		fprintf(stderr, "Usage: molly status\n");
		return 2;
	}
	if (bus_open(&bus) < 0)
		return 1;
	r = sd_bus_call_method(bus, BUS_NAME, BUS_PATH, "org.molly.Daemon1", "Status", &error,
			       &reply, "");
	if (r < 0)
		return explain("status", &error, r);
	r = sd_bus_message_enter_container(reply, 'a', "{sv}");
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
		const char *key;
		r = sd_bus_message_read(reply, "s", &key);
		if (r >= 0)
			r = print_variant(reply, key, json, true);
		if (r >= 0)
			r = sd_bus_message_exit_container(reply);
	}
	if (r < 0) {
		fprintf(stderr, "molly: unexpected reply: %s\n", strerror(-r));
		json_object_put(json);
		return 1;
	}
	if (json) {
		printf("%s\n",
		       json_object_to_json_string_ext(
			       json, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(json);
	}
	return 0;
}

/* ---- molly adapters ---- */

static int adapters_list(sd_bus *bus)
{
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	struct json_object *all = arg_json ? json_object_new_array() : NULL;
	const char *name, *hash;
	int r, n = 0;

	r = sd_bus_call_method(bus, BUS_NAME, BUS_PATH, "org.molly.Adapters1", "List", &error,
			       &reply, "");
	if (r < 0)
		return explain("adapters list", &error, r);
	r = sd_bus_message_enter_container(reply, 'a', "(ssa{sv})");
	while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'r', "ssa{sv}")) > 0) {
		struct json_object *o = NULL;

		r = sd_bus_message_read(reply, "ss", &name, &hash);
		if (r < 0)
			break;
		if (all) {
			o = json_object_new_object();
			json_object_object_add(o, "name", json_object_new_string(name));
			json_object_object_add(o, "hash", json_object_new_string(hash));
			json_object_object_add(o, "content_hash", json_object_new_string(hash));
			json_object_array_add(all, o);
		} else {
			if (n == 0)
				printf("%-24s %-12s %s\n", "NAME", "HASH", "PROPERTIES");
			printf("%-24s %-12.12s", name, hash[0] ? hash : "-");
		}
		r = sd_bus_message_enter_container(reply, 'a', "{sv}");
		while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
			const char *key;
			r = sd_bus_message_read(reply, "s", &key);
			if (r < 0)
				break;
			if (!all)
				printf(" %s=", key);
			r = print_variant(reply, key, o, false);
			if (r >= 0)
				r = sd_bus_message_exit_container(reply);
		}
		if (r >= 0)
			r = sd_bus_message_exit_container(reply); /* a{sv} */
		if (r >= 0)
			r = sd_bus_message_exit_container(reply); /* r */
		if (!all)
			printf("\n");
		n++;
	}
	if (r < 0) {
		fprintf(stderr, "molly: unexpected reply: %s\n", strerror(-r));
		json_object_put(all);
		return 1;
	}
	if (all) {
		printf("%s\n",
		       json_object_to_json_string_ext(all, JSON_C_TO_STRING_PRETTY |
								   JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(all);
	} else if (n == 0)
		printf("No adapters. Import one with: molly adapters import PATH\n");
	return 0;
}

static void progress_bar(uint64_t done, uint64_t total)
{
	struct winsize ws;
	int width = 40, cols = 80;
	double f = total ? (double) done / (double) total : 0;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20)
		cols = ws.ws_col;
	width = MIN(40, cols - 32);
	if (f > 1)
		f = 1;
	fprintf(stderr, "\rimporting [");
	for (int i = 0; i < width; i++)
		fputc(i < (int) (f * width) ? '#' : '.', stderr);
	fprintf(stderr, "] %3d%% %7.1f MiB", (int) (f * 100), (double) done / (1024.0 * 1024.0));
	fflush(stderr);
}

struct import_state {
	bool done;
	int r;
	char *name;
	sd_bus_error error;
};

static int on_import_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error)
{
	struct import_state *s = userdata;
	const char *name;

	s->done = true;
	if (sd_bus_message_is_method_error(m, NULL)) {
		sd_bus_error_copy(&s->error, sd_bus_message_get_error(m));
		s->r = -EIO;
		return 0;
	}
	s->r = sd_bus_message_read(m, "s", &name);
	if (s->r >= 0)
		s->name = strdup(name);
	return 0;
}

static int adapters_import(sd_bus *bus, int argc, char **argv)
{
	static const struct option options[] = {
		{ "name", required_argument, NULL, 'n' },
		{ "load", no_argument, NULL, 'l' },
		{},
	};
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
	_cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
	_cleanup_free_ char *path = NULL;
	struct import_state st = { .error = SD_BUS_ERROR_NULL };
	const char *name = NULL;
	bool load = false, bar = isatty(STDERR_FILENO) && !arg_json, shown = false;
	int fds[2] = { -1, -1 }, c, r;
	char pbuf[256];
	size_t n_pbuf = 0;

	optind = 0; /* 0: glibc re-initialises (the main parse used "+") */
	while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0) {
		if (c == 'n')
			name = optarg;
		else if (c == 'l')
			load = true;
		else
			return 2;
	}
	if (optind + 1 != argc) {
		fprintf(stderr,
			"Usage: molly adapters import PATH [--name NAME] [--load]\n"
			"  PATH: a PEFT directory (adapter_config.json + "
			"adapter_model.safetensors), a GGUF LoRA or a Molly adapter file\n");
		return 2;
	}
	/* The daemon does not share our working directory. */
	path = realpath(argv[optind], NULL);
	if (!path) {
		fprintf(stderr, "molly: %s: %s\n", argv[optind], strerror(errno));
		return 1;
	}
	if (pipe2(fds, O_CLOEXEC) < 0)
		return 1;

	r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, BUS_PATH, "org.molly.Adapters1",
					   "Import");
	if (r >= 0)
		r = sd_bus_message_append(m, "s", path);
	if (r >= 0)
		r = sd_bus_message_open_container(m, 'a', "{sv}");
	if (r >= 0)
		r = sd_bus_message_append(m, "{sv}{sv}", "progress_fd", "h", fds[1], "load", "b",
					  (int) load);
	if (r >= 0 && name)
		r = sd_bus_message_append(m, "{sv}", "name", "s", name);
	if (r >= 0)
		r = sd_bus_message_close_container(m);
	/* Copies can take long: no method timeout; progress shows it is moving. */
	if (r >= 0)
		r = sd_bus_call_async(bus, &slot, m, on_import_reply, &st, UINT64_MAX - 1);
	close(fds[1]);
	if (r < 0) {
		close(fds[0]);
		fprintf(stderr, "molly: sending the request: %s\n", strerror(-r));
		return 1;
	}

	while (!st.done) {
		struct pollfd p[2] = {
			{ .fd = sd_bus_get_fd(bus), .events = (short) sd_bus_get_events(bus) },
			{ .fd = fds[0], .events = POLLIN },
		};
		r = sd_bus_process(bus, NULL);
		if (r < 0) {
			fprintf(stderr, "molly: bus: %s\n", strerror(-r));
			break;
		}
		if (r > 0)
			continue;
		if (poll(p, fds[0] >= 0 ? 2 : 1, 1000) < 0 && errno != EINTR)
			break;
		if (fds[0] >= 0 && (p[1].revents & (POLLIN | POLLHUP))) {
			ssize_t k = read(fds[0], pbuf + n_pbuf, sizeof(pbuf) - 1 - n_pbuf);
			if (k <= 0) {
				close(fds[0]);
				fds[0] = -1;
				continue;
			}
			n_pbuf += (size_t) k;
			pbuf[n_pbuf] = 0;
			/* Show the last complete line "DONE TOTAL". */
			char *last = memrchr(pbuf, '\n', n_pbuf);
			if (last) {
				unsigned long long done = 0, total = 0;
				char *line = last;
				*last = 0;
				while (line > pbuf && line[-1] != '\n')
					line--;
				if (sscanf(line, "%llu %llu", &done, &total) == 2 && bar) {
					progress_bar(done, total);
					shown = true;
				}
				size_t used = (size_t) (last + 1 - pbuf);
				memmove(pbuf, last + 1, n_pbuf - used);
				n_pbuf -= used;
			}
			if (n_pbuf == sizeof(pbuf) - 1)
				n_pbuf = 0;
		}
	}
	if (fds[0] >= 0)
		close(fds[0]);
	if (shown)
		fprintf(stderr, "\n");
	if (st.r < 0) {
		int ret = explain("adapters import", &st.error, st.r);
		sd_bus_error_free(&st.error);
		return ret;
	}
	if (arg_json)
		printf("{\"name\":\"%s\"}\n", st.name);
	else
		printf("Imported %s as '%s'%s.\n", path, st.name,
		       load ? " and loaded it" : "; load it with: molly adapters load NAME");
	free(st.name);
	return 0;
}

static int adapters_history(sd_bus *bus, const char *name)
{
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	struct json_object *all = arg_json ? json_object_new_array() : NULL;
	const char *hash, *created, *prov;
	uint32_t version;
	int64_t bytes;
	char what[128];
	int r, n = 0;

	snprintf(what, sizeof(what), "adapters history %s", name);
	r = sd_bus_call_method(bus, BUS_NAME, BUS_PATH, "org.molly.Adapters1", "History", &error,
			       &reply, "s", name);
	if (r < 0)
		return explain(what, &error, r);
	r = sd_bus_message_enter_container(reply, 'a', "(ussxs)");
	while (r >= 0 && (r = sd_bus_message_read(reply, "(ussxs)", &version, &hash, &created,
						  &bytes, &prov)) > 0) {
		if (all) {
			struct json_object *o = json_object_new_object();
			json_object_object_add(o, "version", json_object_new_int64(version));
			json_object_object_add(o, "hash", json_object_new_string(hash));
			json_object_object_add(o, "created", json_object_new_string(created));
			json_object_object_add(o, "bytes", json_object_new_int64(bytes));
			json_object_object_add(o, "provenance", json_object_new_string(prov));
			json_object_array_add(all, o);
		} else {
			if (n == 0)
				printf("%-8s %-16s %-21s %10s %s\n", "VERSION", "HASH", "CREATED",
				       "BYTES", "PROVENANCE");
			printf("%-8u %-16.16s %-21s %10" PRId64 " %s\n", version, hash, created, bytes,
			       prov);
		}
		n++;
	}
	if (r < 0) {
		fprintf(stderr, "molly: unexpected reply: %s\n", strerror(-r));
		json_object_put(all);
		return 1;
	}
	if (all) {
		printf("%s\n", json_object_to_json_string_ext(all, JSON_C_TO_STRING_PRETTY |
									   JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(all);
	}
	return 0;
}

/* The daemon's store STATE/SUB (registry, audit, priors): STATE from --state-dir, else the
 * configuration's StateDirectory= (*ret_cfg keeps it alive). Says what is missing, as cmd. */
static int store_dir(const char *cmd, const char *state_dir, const char *config_file,
		     const char *sub, struct config **ret_cfg, char **ret_dir)
{
	struct errmsg e = { { 0 } };
	int r;

	if (!state_dir) {
		r = config_load(config_file, ret_cfg, &e);
		if (r < 0) {
			fprintf(stderr, "%s: %s (or pass --state-dir DIR)\n", cmd, e.text);
			return r;
		}
		state_dir = (*ret_cfg)->state_directory;
	}
	if (!state_dir || asprintf(ret_dir, "%s/%s", state_dir, sub) < 0) {
		*ret_dir = NULL;
		fprintf(stderr, "%s: no state directory: pass --state-dir DIR\n", cmd);
		return -ENOENT;
	}
	return 0;
}

static void fsck_report(enum registry_finding kind, const char *text, void *ud)
{
	static const char *const what[] = { "error", "warning", "repaired" };

	(void) ud;
	if (arg_json) {
		struct json_object *o = json_object_new_object();
		json_object_object_add(o, "kind", json_object_new_string(what[kind]));
		json_object_object_add(o, "text", json_object_new_string(text));
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
	} else
		printf("%s: %s\n", what[kind], text);
}

/* molly adapters fsck: the registry checked without a daemon (like molly audit). */
static int adapters_fsck(int argc, char **argv)
{
	static const struct option options[] = {
		{ "state-dir", required_argument, NULL, 'd' },
		{ "config", required_argument, NULL, 'f' },
		{ "repair", no_argument, NULL, 'r' },
		{},
	};
	_cleanup_(config_unrefp) struct config *cfg = NULL;
	_cleanup_free_ char *dir = NULL;
	const char *state_dir = NULL, *config_file = NULL;
	struct errmsg e = { { 0 } };
	size_t warnings = 0;
	bool repair = false;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0) {
		switch (c) {
		case 'd':
			state_dir = optarg;
			break;
		case 'f':
			config_file = optarg;
			break;
		case 'r':
			repair = true;
			break;
		default:
			fprintf(stderr, "Usage: molly adapters fsck [--state-dir DIR] [--config FILE] "
					"[--repair]\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "molly adapters fsck: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (store_dir("molly adapters fsck", state_dir, config_file, "registry", &cfg, &dir) < 0)
		return 1;
	r = registry_fsck(dir, repair, fsck_report, NULL, &warnings, &e);
	if (r < 0) {
		fprintf(stderr, "molly adapters fsck: %s\n", e.text[0] ? e.text : strerror(-r));
		return 1;
	}
	if (!arg_json)
		printf("%d error%s, %zu warning%s%s\n", r, r == 1 ? "" : "s", warnings,
		       warnings == 1 ? "" : "s", repair && warnings ? " (repaired)" : "");
	/* Errors (a record without its blob, a corrupt blob) fail; warnings do not. */
	return r > 0 ? 1 : 0;
}

static int cmd_adapters(int argc, char **argv)
{
	static const char *const simple[] = { "load", "unload", "pin", "unpin", "remove",
					      "prefetch" };
	static const char *const methods[] = { "Load", "Unload", "Pin", "Unpin", "Remove",
					       "Prefetch" };
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	const char *verb = argc > 1 ? argv[1] : "list";

	if (strcmp(verb, "fsck") == 0)
		return adapters_fsck(argc - 1, argv + 1);
	if (bus_open(&bus) < 0)
		return 1;
	if (strcmp(verb, "history") == 0) {
		if (argc != 3) {
			fprintf(stderr, "Usage: molly adapters history NAME\n");
			return 2;
		}
		return adapters_history(bus, argv[2]);
	}
	if (strcmp(verb, "rollback") == 0) {
		char *end, what[128];
		unsigned long v;
		int r;

		errno = 0;
		v = argc == 4 ? strtoul(argv[3], &end, 10) : 0;
		if (argc != 4 || errno || *end || v == 0 || v > UINT32_MAX) {
			fprintf(stderr, "Usage: molly adapters rollback NAME VERSION (a number from "
					"molly adapters history NAME)\n");
			return 2;
		}
		snprintf(what, sizeof(what), "adapters rollback %s %lu", argv[2], v);
		r = sd_bus_call_method(bus, BUS_NAME, BUS_PATH, "org.molly.Adapters1", "Rollback",
				       &error, NULL, "su", argv[2], (uint32_t) v);
		if (r < 0)
			return explain(what, &error, r);
		if (arg_json)
			printf("{\"ok\":true}\n");
		return 0;
	}
	if (strcmp(verb, "gc") == 0) {
		_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
		uint32_t blobs;
		uint64_t bytes;
		int r = sd_bus_call_method(bus, BUS_NAME, BUS_PATH, "org.molly.Adapters1", "Gc",
					   &error, &reply, "");
		if (r < 0)
			return explain("adapters gc", &error, r);
		r = sd_bus_message_read(reply, "ut", &blobs, &bytes);
		if (r < 0) {
			fprintf(stderr, "molly: unexpected reply: %s\n", strerror(-r));
			return 1;
		}
		if (arg_json)
			printf("{\"blobs\":%u,\"bytes\":%" PRIu64 "}\n", blobs, bytes);
		else
			printf("removed %u blob%s, %" PRIu64 " bytes\n", blobs, blobs == 1 ? "" : "s",
			       bytes);
		return 0;
	}
	if (strcmp(verb, "list") == 0)
		return adapters_list(bus);
	if (strcmp(verb, "import") == 0)
		return adapters_import(bus, argc - 1, argv + 1);
	for (size_t i = 0; i < ELEMENTSOF(simple); i++) {
		char what[64];
		int r;

		if (strcmp(verb, simple[i]) != 0)
			continue;
		if (argc != 3) {
			fprintf(stderr, "Usage: molly adapters %s NAME\n", verb);
			return 2;
		}
		r = sd_bus_call_method(bus, BUS_NAME, BUS_PATH, "org.molly.Adapters1", methods[i],
				       &error, NULL, "s", argv[2]);
		snprintf(what, sizeof(what), "adapters %s %s", verb, argv[2]);
		if (r < 0)
			return explain(what, &error, r);
		if (arg_json)
			printf("{\"ok\":true}\n");
		return 0;
	}
	fprintf(stderr, "molly adapters: unknown command '%s' (list, import, load, unload, pin, "
			"unpin, prefetch, remove, history, rollback, gc, fsck)\n",
		verb);
	return 2;
}

/* ---- molly config apply ---- */

#define APPLY_DEFAULT_DIR "/etc/systemd/system/mollyd.service.d"
#define APPLY_FILE "50-egress.conf"

static int add_line(char **buf, size_t *len, const char *fmt, ...) _printf_(3, 4);
static int add_line(char **buf, size_t *len, const char *fmt, ...)
{
	char line[1024], *b;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= sizeof(line))
		return -EINVAL;
	b = realloc(*buf, *len + (size_t) n + 1);
	if (!b)
		return -ENOMEM;
	memcpy(b + *len, line, (size_t) n + 1);
	*buf = b;
	*len += (size_t) n;
	return 0;
}

/*
 * The drop-in: systemd's own per-unit IP filter (IPAddressDeny=any, then IPAddressAllow= for
 * localhost, the resolvers and every [Target]'s addresses as they resolve now), a second wall
 * around the whole unit besides the per-tier eBPF allow-lists. A name resolves here, at apply
 * time: run it again when the targets' addresses change.
 */
static int cmd_config_apply(int argc, char **argv)
{
	static const struct option options[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "out", required_argument, NULL, 'o' },
		{},
	};
	_cleanup_(config_unrefp) struct config *cfg = NULL;
	_cleanup_free_ char *text = NULL, *path = NULL, *tmp = NULL;
	struct errmsg e = { { 0 } };
	const char *file = NULL, *dir = APPLY_DEFAULT_DIR;
	size_t len = 0;
	int c, r = 0, fd;
	FILE *rf;

	optind = 0; /* 0: glibc re-initialises (the main parse used "+") */
	while ((c = getopt_long(argc - 1, argv + 1, "", options, NULL)) >= 0) {
		switch (c) {
		case 'c':
			file = optarg;
			break;
		case 'o':
			dir = optarg;
			break;
		default:
			fprintf(stderr, "Usage: molly config apply [--config FILE] [--out DIR]   "
					"(default DIR " APPLY_DEFAULT_DIR ")\n");
			return 2;
		}
	}
	if (optind < argc - 1) {
		fprintf(stderr, "molly: config apply: unexpected argument '%s'\n", argv[optind + 1]);
		return 2;
	}
	r = config_load(file, &cfg, &e);
	if (r < 0) {
		fprintf(stderr, "molly: %s\n", e.text);
		return 1;
	}
	r = add_line(&text, &len,
		     "# Generated by `molly config apply` from %s: do not edit, run it again.\n"
		     "# A second wall around mollyd.service besides the eBPF allow-lists of its\n"
		     "# egress workers: the unit may reach only these addresses.\n"
		     "[Service]\n"
		     "IPAddressDeny=any\n"
		     "# the HTTP front and D-Bus clients on loopback\n"
		     "IPAddressAllow=localhost\n",
		     cfg->n_files ? cfg->files[0] : "the defaults");
	rf = fopen("/etc/resolv.conf", "re");
	if (rf) {
		char line[512], addr[128];
		while (r >= 0 && fgets(line, sizeof(line), rf))
			if (sscanf(line, " nameserver %127s", addr) == 1) {
				char *pct = strchr(addr, '%');
				unsigned char probe[16];
				if (pct)
					*pct = 0;
				if (inet_pton(AF_INET, addr, probe) == 1 ||
				    inet_pton(AF_INET6, addr, probe) == 1)
					r = add_line(&text, &len,
						     "# resolver (the workers resolve their targets)\n"
						     "IPAddressAllow=%s\n",
						     addr);
			}
		fclose(rf);
	}
	for (size_t i = 0; r >= 0 && i < cfg->n_targets; i++) {
		const struct config_target *t = &cfg->targets[i];
		struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
		struct addrinfo *ai = NULL;
		char host[256];
		uint16_t port;
		int g;

		if (worker_url_host_port(t->url, host, &port) < 0) {
			fprintf(stderr, "molly: [Target %s] URL=%s has no host\n", t->name, t->url);
			return 1;
		}
		g = getaddrinfo(host, NULL, &hints, &ai);
		if (g != 0) {
			fprintf(stderr, "molly: [Target %s]: cannot resolve %s: %s\n", t->name, host,
				gai_strerror(g));
			return 1;
		}
		r = add_line(&text, &len, "# [Target %s] T%d %s\n", t->name, t->tier, t->url);
		for (struct addrinfo *a = ai; r >= 0 && a; a = a->ai_next) {
			char buf[INET6_ADDRSTRLEN];
			const void *src = a->ai_family == AF_INET
						  ? (const void *) &((struct sockaddr_in *) a->ai_addr)->sin_addr
						  : (const void *) &((struct sockaddr_in6 *) a->ai_addr)
							    ->sin6_addr;
			if ((a->ai_family != AF_INET && a->ai_family != AF_INET6) ||
			    !inet_ntop(a->ai_family, src, buf, sizeof(buf)))
				continue;
			/* getaddrinfo gives one entry per socket type; the same address once. */
			char probe[64];
			snprintf(probe, sizeof(probe), "IPAddressAllow=%s\n", buf);
			if (!strstr(text, probe))
				r = add_line(&text, &len, "%s", probe);
		}
		freeaddrinfo(ai);
	}
	if (r < 0) {
		fprintf(stderr, "molly: %s\n", strerror(-r));
		return 1;
	}
	{
		/* mkdir -p: the drop-in directory and what leads to it */
		char p[PATH_MAX];
		snprintf(p, sizeof(p), "%s", dir);
		for (char *q = p + 1;; q++) {
			bool end = *q == 0;
			if (*q != '/' && !end)
				continue;
			*q = 0;
			if (mkdir(p, 0755) < 0 && errno != EEXIST) {
				fprintf(stderr, "molly: creating %s: %s\n", p, strerror(errno));
				return 1;
			}
			if (end)
				break;
			*q = '/';
		}
	}
	if (asprintf(&path, "%s/" APPLY_FILE, dir) < 0 ||
	    asprintf(&tmp, "%s/." APPLY_FILE ".XXXXXX", dir) < 0) {
		fprintf(stderr, "molly: out of memory\n");
		return 1;
	}
	fd = mkstemp(tmp);
	if (fd < 0) {
		fprintf(stderr, "molly: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	if (fchmod(fd, 0644) < 0 || write(fd, text, len) != (ssize_t) len || fsync(fd) < 0 ||
	    close(fd) < 0 || rename(tmp, path) < 0) {
		fprintf(stderr, "molly: writing %s: %s\n", path, strerror(errno));
		(void) unlink(tmp);
		return 1;
	}
	if (arg_json) {
		struct json_object *o = json_object_new_object();
		json_object_object_add(o, "ok", json_object_new_boolean(1));
		json_object_object_add(o, "path", json_object_new_string(path));
		json_object_object_add(o, "targets", json_object_new_int64((int64_t) cfg->n_targets));
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
		json_object_put(o);
	} else
		printf("wrote %s (%zu target(s)); apply it with: systemctl daemon-reload && "
		       "systemctl restart mollyd\n",
		       path, cfg->n_targets);
	return 0;
}

/* ---- molly config check ---- */

static int cmd_config(int argc, char **argv)
{
	_cleanup_(config_unrefp) struct config *c = NULL;
	struct errmsg e = { { 0 } };
	const char *file;
	int r;

	if (argc >= 2 && strcmp(argv[1], "apply") == 0)
		return cmd_config_apply(argc, argv);
	if (argc < 2 || strcmp(argv[1], "check") != 0 || argc > 3) {
		fprintf(stderr, "Usage: molly config check [FILE]   (default " CONFIG_DEFAULT_PATH
				")\n"
				"       molly config apply [--config FILE] [--out DIR]\n");
		return 2;
	}
	file = argc == 3 ? argv[2] : NULL;
	r = config_load(file, &c, &e);
	if (r < 0) {
		if (arg_json) {
			struct json_object *o = json_object_new_object();
			json_object_object_add(o, "ok", json_object_new_boolean(0));
			json_object_object_add(o, "error", json_object_new_string(e.text));
			printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
			json_object_put(o);
		} else
			fprintf(stderr, "molly: %s\n", e.text);
		return 1;
	}
	if (arg_json) {
		struct json_object *o = json_object_new_object(), *files = json_object_new_array();
		for (size_t i = 0; i < c->n_files; i++)
			json_object_array_add(files, json_object_new_string(c->files[i]));
		json_object_object_add(o, "ok", json_object_new_boolean(1));
		json_object_object_add(o, "files", files);
		json_object_object_add(
			o, "model", c->model_path ? json_object_new_string(c->model_path) : NULL);
		json_object_object_add(o, "members", json_object_new_int64((int64_t) c->n_members));
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
		json_object_put(o);
	} else {
		if (c->n_files == 0)
			printf("No configuration files found; the defaults apply.\n");
		for (size_t i = 0; i < c->n_files; i++)
			printf("read %s\n", c->files[i]);
		printf("OK: %zu member(s), HTTP %s, D-Bus %s bus\n", c->n_members,
		       c->listen.kind == CONFIG_LISTEN_NONE   ? "off"
		       : c->listen.kind == CONFIG_LISTEN_UNIX ? c->listen.path
							      : c->listen.host,
		       c->bus == CONFIG_BUS_SYSTEM    ? "system"
		       : c->bus == CONFIG_BUS_SESSION ? "session"
						      : "no");
	}
	/* Not errors for the parser, but mollyd would not start: say so. */
	if (!c->model_path) {
		_cleanup_free_ char *def = NULL;

		if (default_model_find(&def) < 0 || !def) {
			fprintf(stderr, "warning: no [Model] Path=, no $MOLLY_MODEL, and the default "
					"model (%s) is not installed: mollyd would not start\n",
				DEFAULT_MODEL_FILE);
			return 1;
		}
		if (access(def, R_OK) < 0) {
			fprintf(stderr, "warning: $MOLLY_MODEL=%s: %s\n", def, strerror(errno));
			return 1;
		}
		return 0;
	}
	if (access(c->model_path, R_OK) < 0) {
		fprintf(stderr, "warning: [Model] Path=%s: %s\n", c->model_path, strerror(errno));
		return 1;
	}
	return 0;
}

/* ---- molly explain ---- */

static int read_stdin(char **ret, size_t *ret_len)
{
	char *buf = NULL;
	size_t n = 0, cap = 0;

	for (;;) {
		size_t k;
		if (n + 4096 + 1 > cap) {
			char *nb;
			if (cap >= (64u << 20)) {
				free(buf);
				return -EFBIG;
			}
			cap = cap ? cap * 2 : 8192;
			nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
		}
		k = fread(buf + n, 1, cap - n - 1, stdin);
		n += k;
		if (k == 0)
			break;
	}
	if (ferror(stdin)) {
		free(buf);
		return -EIO;
	}
	buf[n] = 0;
	*ret = buf;
	*ret_len = n;
	return 0;
}

static void tiers_json(struct json_object *arr, uint32_t tiers)
{
	for (int k = 0; k < 4; k++)
		if (tiers & POLICY_TIER(k)) {
			char t[4];
			snprintf(t, sizeof(t), "T%d", k);
			json_object_array_add(arr, json_object_new_string(t));
		}
}

/* Reads one D-Bus value of the reply (the basic types, arrays and dictionaries Policy1.Explain
 * uses) into JSON. */
static int read_value(sd_bus_message *m, struct json_object **ret);

static int read_dict(sd_bus_message *m, struct json_object **ret)
{
	struct json_object *o = json_object_new_object();
	int r;

	r = sd_bus_message_enter_container(m, 'a', "{sv}");
	while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
		const char *key;
		struct json_object *v = NULL;
		const char *contents;

		r = sd_bus_message_read(m, "s", &key);
		if (r >= 0)
			r = sd_bus_message_peek_type(m, NULL, &contents);
		if (r >= 0)
			r = sd_bus_message_enter_container(m, 'v', contents);
		if (r >= 0)
			r = read_value(m, &v);
		if (r >= 0)
			json_object_object_add(o, key, v);
		if (r >= 0)
			r = sd_bus_message_exit_container(m);
		if (r >= 0)
			r = sd_bus_message_exit_container(m);
	}
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	if (r < 0) {
		json_object_put(o);
		return r;
	}
	*ret = o;
	return 0;
}

static int read_value(sd_bus_message *m, struct json_object **ret)
{
	char type;
	const char *contents;
	int r = sd_bus_message_peek_type(m, &type, &contents);

	if (r <= 0)
		return r < 0 ? r : -EBADMSG;
	switch (type) {
	case 's': {
		const char *v;
		r = sd_bus_message_read_basic(m, 's', &v);
		*ret = json_object_new_string(v);
		return r;
	}
	case 'b': {
		int v;
		r = sd_bus_message_read_basic(m, 'b', &v);
		*ret = json_object_new_boolean(v);
		return r;
	}
	case 'd': {
		double v;
		r = sd_bus_message_read_basic(m, 'd', &v);
		*ret = json_object_new_double(v);
		return r;
	}
	case 't': {
		uint64_t v;
		r = sd_bus_message_read_basic(m, 't', &v);
		*ret = json_object_new_uint64(v);
		return r;
	}
	case 'u': {
		uint32_t v;
		r = sd_bus_message_read_basic(m, 'u', &v);
		*ret = json_object_new_int64(v);
		return r;
	}
	case 'a':
		if (strcmp(contents, "{sv}") == 0)
			return read_dict(m, ret);
		r = sd_bus_message_enter_container(m, 'a', contents);
		if (r < 0)
			return r;
		*ret = json_object_new_array();
		for (;;) {
			struct json_object *v = NULL;
			r = sd_bus_message_at_end(m, false);
			if (r != 0)
				break;
			r = read_value(m, &v);
			if (r < 0)
				return r;
			json_object_array_add(*ret, v);
		}
		return r < 0 ? r : sd_bus_message_exit_container(m);
	default:
		return sd_bus_message_skip(m, NULL);
	}
}

static const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v;
	return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

static double jnum(struct json_object *o, const char *key)
{
	struct json_object *v;
	return json_object_object_get_ex(o, key, &v) ? json_object_get_double(v) : 0;
}

static bool jbool(struct json_object *o, const char *key)
{
	struct json_object *v;
	return json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

/* molly explain --daemon: Policy1.Explain on the running daemon. */
static int explain_daemon(const char *text)
{
	_cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
	_cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
	struct json_object *o = NULL, *v, *route;
	int r;

	r = bus_open(&bus);
	if (r < 0)
		return 1;
	r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, BUS_PATH, "org.molly.Policy1",
					   "Explain");
	if (r >= 0)
		r = sd_bus_message_append(m, "a{sv}", 1, "prompt", "s", text);
	if (r < 0) {
		fprintf(stderr, "molly: explain: %s\n", strerror(-r));
		return 1;
	}
	r = sd_bus_call(bus, m, 60 * 1000000ull, &error, &reply);
	if (r < 0)
		return explain("explain", &error, r);
	r = read_dict(reply, &o);
	if (r < 0) {
		fprintf(stderr, "molly: explain: cannot read the answer: %s\n", strerror(-r));
		return 1;
	}
	if (arg_json) {
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
								     JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
		return 0;
	}
	printf("Class: %s\n", jstr(o, "class"));
	printf("Permitted tiers:");
	if (json_object_object_get_ex(o, "permitted_tiers", &v))
		for (size_t i = 0; i < json_object_array_length(v); i++)
			printf(" %s", json_object_get_string(json_object_array_get_idx(v, i)));
	printf("%s\n", jbool(o, "redact_for_t3") ? " (T3 only after redaction)" : "");
	if (json_object_object_get_ex(o, "findings", &v) && json_object_array_length(v) > 0) {
		printf("Findings (%zu; character offsets; class, layer, score):\n",
		       json_object_array_length(v));
		for (size_t i = 0; i < json_object_array_length(v); i++) {
			struct json_object *f = json_object_array_get_idx(v, i);
			char span[48];
			snprintf(span, sizeof(span), "[%.0f, %.0f)", jnum(f, "start"),
				 jnum(f, "end"));
			printf("  %-18s %-14s %-8s %-10s %.2f\n", jstr(f, "kind"), span,
			       jstr(f, "class"), jstr(f, "layer")[0] ? jstr(f, "layer") : "-",
			       jnum(f, "score"));
		}
	} else
		printf("Findings: none\n");
	if (jnum(o, "special_score") > 0)
		printf("Special-category score: %.2f\n", jnum(o, "special_score"));
	if (json_object_object_get_ex(o, "route", &route)) {
		printf("Routing: %s\n", jstr(route, "action"));
		if (jstr(route, "domain")[0])
			printf("Domain: %s (p=%.2f, normalised entropy %.2f)\n",
			       jstr(route, "domain"), jnum(route, "domain_p"),
			       jnum(route, "entropy"));
		if (json_object_object_get_ex(route, "candidates", &v) &&
		    json_object_array_length(v) > 0) {
			printf("Candidates:\n  %-32s %-4s %8s %8s %9s %8s  %s\n", "TARGET", "TIER",
			       "QUALITY", "COST", "LATENCY", "SCORE", "NOTE");
			for (size_t i = 0; i < json_object_array_length(v); i++) {
				struct json_object *c = json_object_array_get_idx(v, i);
				const char *ex = jstr(c, "excluded"), *un = jstr(c, "unusable_because");
				printf("  %-32s %-4s %8.3f %8.4f %8.3fs %8.3f  %s%s%s\n",
				       jstr(c, "name"), jstr(c, "tier"), jnum(c, "quality"),
				       jnum(c, "cost"), jnum(c, "latency"), jnum(c, "score"),
				       jbool(c, "chosen") ? "chosen" : "",
				       ex[0] ? "excluded: " : (un[0] ? "ranked last: " : ""),
				       ex[0] ? ex : un);
			}
		}
	}
	json_object_put(o);
	return 0;
}

/*
 * Whether an argument of `molly explain` is an option word rather than the text: "--NAME" or
 * "--NAME=VALUE" (NAME: an ASCII letter, then letters, digits and '-') or "-X" (one ASCII
 * letter). Everything else is text, whatever it starts with: "-----BEGIN PRIVATE KEY-----",
 * "---", "-5 degrees", "- item", "--no such thing" (a space before any '='). So a prompt
 * that starts with dashes needs no "--", and a mistyped option ("--jsno", "-j") is still
 * reported instead of being explained as text. "-" alone is standard input; after "--"
 * every argument is text.
 */
static bool explain_is_option(const char *a)
{
	const char *p;

	if (a[0] != '-')
		return false;
	if (a[1] != '-')
		return ((a[1] | 32) >= 'a' && (a[1] | 32) <= 'z') && a[2] == 0;
	p = a + 2;
	if (!((*p | 32) >= 'a' && (*p | 32) <= 'z'))
		return false; /* "--", "---...", "--5", "-- x" */
	while (*p && *p != '=') {
		if (!(((*p | 32) >= 'a' && (*p | 32) <= 'z') || (*p >= '0' && *p <= '9') ||
		      *p == '-'))
			return false;
		p++;
	}
	return true;
}

#define EXPLAIN_USAGE                                                                             \
	"Usage: molly explain [--config FILE | --daemon] [--json] [--] PROMPT\n"                 \
	"  PROMPT '-': standard input. A PROMPT that starts with '-' needs no '--' unless it\n"   \
	"  looks like an option (--WORD, --WORD=VALUE or -LETTER).\n"

static int cmd_explain(int argc, char **argv)
{
	_cleanup_(config_unrefp) struct config *cfg = NULL;
	_cleanup_(policy_freep) struct policy *p = NULL;
	bool daemon = false;
	_cleanup_free_ char *input = NULL;
	struct policy_decision d = { 0 };
	struct errmsg e = { { 0 } };
	const char *file = NULL, *text, *prompt = NULL;
	size_t len;
	char tiers[32];
	int r, n_prompts = 0;
	bool options_end = false;

	/* Our own walk rather than getopt: options may come before or after the prompt, and a
	 * prompt may start with '-' (explain_is_option()). */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!options_end && strcmp(a, "--") == 0) {
			options_end = true;
			continue;
		}
		if (options_end || !explain_is_option(a)) {
			prompt = a;
			n_prompts++;
			continue;
		}
		if (strcmp(a, "--json") == 0)
			arg_json = true;
		else if (strcmp(a, "--daemon") == 0)
			daemon = true;
		else if (strcmp(a, "--config") == 0) {
			if (i + 1 >= argc) {
				fprintf(stderr,
					"molly explain: --config needs a FILE\n" EXPLAIN_USAGE);
				return 2;
			}
			file = argv[++i];
		} else if (strncmp(a, "--config=", 9) == 0)
			file = a + 9;
		else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			printf(EXPLAIN_USAGE);
			return 0;
		} else {
			fprintf(stderr,
				"molly explain: unknown option '%s' (a prompt that looks like an "
				"option goes after '--')\n" EXPLAIN_USAGE,
				a);
			return 2;
		}
	}
	if (n_prompts != 1 || (daemon && file)) {
		if (n_prompts > 1)
			fprintf(stderr, "molly explain: one PROMPT only (quote it)\n");
		fprintf(stderr, EXPLAIN_USAGE);
		return 2;
	}
	if (strcmp(prompt, "-") == 0 && !options_end) {
		r = read_stdin(&input, &len);
		if (r < 0) {
			fprintf(stderr, "molly: reading standard input: %s\n", strerror(-r));
			return 1;
		}
		text = input;
	} else {
		text = prompt;
		len = strlen(text);
	}
	if (daemon)
		return explain_daemon(text);
	/* Without --config: the daemon's configuration when there is one, else the defaults. */
	r = config_load(file, &cfg, &e);
	if (r >= 0)
		r = policy_new(cfg, &p, &e);
	if (r < 0) {
		fprintf(stderr, "molly: %s\n", e.text[0] ? e.text : strerror(-r));
		return 1;
	}
	r = policy_evaluate(p, &(struct policy_request){ .text = text, .len = len }, &d);
	if (r < 0) {
		fprintf(stderr, "molly: cannot evaluate the policy: %s\n", strerror(-r));
		return 1;
	}
	if (arg_json) {
		struct json_object *o = json_object_new_object(), *fa = json_object_new_array(),
				   *ta = json_object_new_array();
		for (size_t i = 0; i < d.n_findings; i++) {
			const struct policy_finding *x = &d.findings[i];
			struct json_object *f = json_object_new_object();
			json_object_object_add(f, "kind", json_object_new_string(d.findings[i].kind));
			json_object_object_add(f, "start",
					       json_object_new_int64((int64_t) d.findings[i].start));
			json_object_object_add(f, "end",
					       json_object_new_int64((int64_t) d.findings[i].end));
			json_object_object_add(f, "rule", json_object_new_string(d.findings[i].rule));
			json_object_object_add(f, "class",
					       json_object_new_string(policy_class_name(x->class)));
			json_object_object_add(f, "layer",
					       json_object_new_string(x->layer ? x->layer : ""));
			json_object_object_add(f, "score", json_object_new_double(x->score));
			json_object_array_add(fa, f);
		}
		tiers_json(ta, d.permitted_tiers);
		json_object_object_add(o, "class", json_object_new_string(policy_class_name(d.class)));
		json_object_object_add(o, "findings", fa);
		json_object_object_add(o, "permitted_tiers", ta);
		json_object_object_add(o, "redact_for_t3",
				       json_object_new_boolean(d.redact_for_t3));
		json_object_object_add(o, "special_score", json_object_new_double(d.special_score));
		printf("%s\n", json_object_to_json_string_ext(
				       o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
	} else {
		printf("Class: %s\n", policy_class_name(d.class));
		policy_tiers_format(d.permitted_tiers, tiers, sizeof(tiers));
		printf("Permitted tiers: %s%s\n", tiers[0] ? tiers : "none",
		       d.redact_for_t3 ? " (T3 only after redaction)" : "");
		if (d.n_findings == 0)
			printf("Findings: none\n");
		else
			printf("Findings (%zu; character offsets; class, layer, score):\n",
			       d.n_findings);
		for (size_t i = 0; i < d.n_findings; i++) {
			const struct policy_finding *f = &d.findings[i];
			char span[48];
			snprintf(span, sizeof(span), "[%zu, %zu)", f->start, f->end);
			printf("  %-18s %-14s %-8s %-10s %.2f%s%s%s\n", f->kind, span,
			       policy_class_name(f->class), f->layer ? f->layer : "-", f->score,
			       strcmp(f->kind, "rule") == 0 ? "  [Rule " : "",
			       strcmp(f->kind, "rule") == 0 ? f->rule : "",
			       strcmp(f->kind, "rule") == 0 ? "]" : "");
		}
		if (d.special_score > 0)
			printf("Special-category score: %.2f\n", d.special_score);
	}
	policy_decision_done(&d);
	return 0;
}

/* ---- molly key new ---- */

static bool member_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 64 || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || strchr("._-", s[i])))
			return false;
	return true;
}

static int cmd_key(int argc, char **argv)
{
	char key[KEYS_KEY_SIZE], hash[KEYS_HASH_STRING_SIZE];
	int r;

	if (argc != 3 || strcmp(argv[1], "new") != 0) {
		fprintf(stderr, "Usage: molly key new NAME\n");
		return 2;
	}
	if (!member_name_ok(argv[2])) {
		fprintf(stderr, "molly: '%s' is not a member name (letters, digits, '.', '_', '-'; "
				"at most 64)\n",
			argv[2]);
		return 2;
	}
	r = keys_generate(key);
	if (r < 0) {
		fprintf(stderr, "molly: cannot generate a key: %s\n", strerror(-r));
		return 1;
	}
	keys_hash_string(key, strlen(key), hash);
	if (arg_json) {
		struct json_object *o = json_object_new_object();
		json_object_object_add(o, "name", json_object_new_string(argv[2]));
		json_object_object_add(o, "key", json_object_new_string(key));
		json_object_object_add(o, "key_hash", json_object_new_string(hash));
		printf("%s\n", json_object_to_json_string_ext(
				       o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
	} else {
		printf("API key for %s (shown only now; store it):\n\n    %s\n\n", argv[2], key);
		printf("Add these lines to %s.d/member-%s.conf (or to %s),\n"
		       "adjust Models= (names, base:adapter, or *) and Admin=, then reload mollyd\n"
		       "(systemctl reload mollyd):\n\n",
		       CONFIG_DEFAULT_PATH, argv[2], CONFIG_DEFAULT_PATH);
		printf("[Member %s]\nKeyHash=%s\nModels=*\nAdmin=no\n", argv[2], hash);
	}
	explicit_bzero(key, sizeof(key));
	return 0;
}

/* ---- main ---- */

/* ---- audit (reads the daemon's LMDB store read-only; no daemon needed) ---- */

static int print_audit_record(const struct audit_record *r, void *userdata)
{
	_cleanup_free_ char *line = NULL;
	int k = arg_json ? audit_record_to_json(r, &line) : audit_record_format(r, &line);

	if (k < 0)
		return k;
	puts(line);
	return 0;
}

/* ---- molly priors: the router's capability priors (EWMA per domain and target) ---- */

static int print_prior(const struct priors_entry *en, void *userdata)
{
	(void) userdata;
	if (arg_json) {
		printf("{\"domain\":\"%s\",\"target\":\"%s\",\"mean\":%.6g,\"count\":%" PRIu64, en->domain,
		       en->target, en->mean, en->count);
		if (en->seeded)
			printf(",\"seed\":%.6g", en->seed);
		printf(",\"updated_ns\":%" PRIu64 "}\n", en->updated_ns);
	} else {
		printf("%-20s %-40s mean %.3f  scores %" PRIu64 "%s\n", en->domain, en->target, en->mean,
		       en->count, en->seeded ? "  (seeded)" : "");
	}
	return 0;
}

/* molly priors record --domain D --target T --score S | list, on <StateDirectory>/priors. */
static int cmd_priors(int argc, char **argv)
{
	static const struct option options[] = {
		{ "domain", required_argument, NULL, 'D' },
		{ "target", required_argument, NULL, 'T' },
		{ "score", required_argument, NULL, 's' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "config", required_argument, NULL, 'f' },
		{},
	};
	_cleanup_(config_unrefp) struct config *cfg = NULL;
	_cleanup_(priors_closep) struct priors *p = NULL;
	_cleanup_free_ char *dir = NULL;
	const char *state_dir = NULL, *config_file = NULL, *domain = NULL, *target = NULL;
	const char *verb = argc > 1 ? argv[1] : NULL;
	struct errmsg e = { { 0 } };
	double score = NAN, mean;
	bool record;
	int c, r;

	if (!verb || (strcmp(verb, "record") != 0 && strcmp(verb, "list") != 0)) {
		fprintf(stderr, "Usage: molly priors record --domain D --target T --score S\n"
				"       molly priors list [--json]\n"
				"       (both take [--state-dir DIR | --config FILE])\n");
		return 2;
	}
	record = strcmp(verb, "record") == 0;
	optind = 2;
	while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0) {
		switch (c) {
		case 'D':
			domain = optarg;
			break;
		case 'T':
			target = optarg;
			break;
		case 's': {
			char *end;

			errno = 0;
			score = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(score >= 0 && score <= 1)) {
				fprintf(stderr, "molly priors: --score %s: give a number from 0 to 1\n",
					optarg);
				return 2;
			}
			break;
		}
		case 'd':
			state_dir = optarg;
			break;
		case 'f':
			config_file = optarg;
			break;
		default:
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "molly priors: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (record && (!domain || !target || isnan(score))) {
		fprintf(stderr, "molly priors record: give --domain, --target and --score\n");
		return 2;
	}
	if (store_dir("molly priors", state_dir, config_file, "priors", &cfg, &dir) < 0)
		return 1;
	r = priors_open(dir, &(struct priors_options){ .read_only = !record }, &p, &e);
	if (r == -ENOENT && !record)
		return 0; /* nothing recorded yet: an empty list */
	if (r < 0) {
		fprintf(stderr, "molly priors: %s\n", e.text[0] ? e.text : strerror(-r));
		return 1;
	}
	if (record) {
		r = priors_record(p, domain, target, score, &mean, &e);
		if (r < 0) {
			fprintf(stderr, "molly priors record: %s\n", e.text[0] ? e.text : strerror(-r));
			return 1;
		}
		if (arg_json)
			printf("{\"domain\":\"%s\",\"target\":\"%s\",\"mean\":%.6g}\n", domain, target, mean);
		else
			printf("%s on %s: mean now %.3f\n", target, domain, mean);
		return 0;
	}
	r = priors_foreach(p, print_prior, NULL, &e);
	if (r < 0) {
		fprintf(stderr, "molly priors list: %s\n", e.text[0] ? e.text : strerror(-r));
		return 1;
	}
	return 0;
}

static int cmd_audit(int argc, char **argv)
{
	static const struct option options[] = {
		{ "since", required_argument, NULL, 's' },
		{ "tier", required_argument, NULL, 't' },
		{ "class", required_argument, NULL, 'c' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "config", required_argument, NULL, 'f' },
		{},
	};
	_cleanup_(config_unrefp) struct config *cfg = NULL;
	_cleanup_(audit_closep) struct audit *a = NULL;
	_cleanup_free_ char *dir = NULL;
	struct audit_filter f = { .tier = -1 };
	const char *state_dir = NULL, *config_file = NULL;
	struct errmsg e = { { 0 } };
	struct timespec now;
	uint64_t since = 0;
	bool has_since = false;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0) {
		switch (c) {
		case 's':
			has_since = true;
			r = audit_parse_duration(optarg, &since);
			if (r < 0) {
				fprintf(stderr,
					"molly audit: --since %s: not a duration; write a number and "
					"a unit: 30d, 12h, 15m, 3600s (or 2w, 1d12h)\n",
					optarg);
				return 2;
			}
			break;
		case 't':
			if (audit_parse_tier(optarg, &f.tier) < 0) {
				fprintf(stderr, "molly audit: --tier %s: give one of T0, T1, T2, T3\n",
					optarg);
				return 2;
			}
			break;
		case 'c':
			if (strcmp(optarg, "public") != 0 && strcmp(optarg, "personal") != 0 &&
			    strcmp(optarg, "secret") != 0) {
				fprintf(stderr,
					"molly audit: --class %s: give one of public, personal, "
					"secret\n",
					optarg);
				return 2;
			}
			f.class_name = optarg;
			break;
		case 'd':
			state_dir = optarg;
			break;
		case 'f':
			config_file = optarg;
			break;
		default:
			fprintf(stderr, "Usage: molly audit [--since DURATION] [--tier T] [--class C] "
					"[--json] [--state-dir DIR | --config FILE]\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "molly audit: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (store_dir("molly audit", state_dir, config_file, "audit", &cfg, &dir) < 0)
		return 1;
	r = audit_open(dir, &(struct audit_options){ .read_only = true }, &a, &e);
	if (r < 0) {
		fprintf(stderr, "molly audit: %s\n", e.text);
		return 1;
	}
	if (has_since) {
		clock_gettime(CLOCK_REALTIME, &now);
		uint64_t t = (uint64_t) now.tv_sec * 1000000000ull + (uint64_t) now.tv_nsec;
		f.since_ns = t > since ? t - since : 0;
	}
	r = audit_scan(a, &f, print_audit_record, NULL, &e);
	if (r < 0) {
		fprintf(stderr, "molly audit: %s\n", e.text[0] ? e.text : strerror(-r));
		return 1;
	}
	return fflush(stdout) == 0 ? 0 : 1;
}

static void usage(void)
{
	printf("Usage: molly [--json] [--bus-address ADDRESS | --session] COMMAND ...\n"
	       "\n"
	       "Commands:\n"
	       "  ask \"PROMPT\" [--adapter NAME] [--chat] [--max-tokens N] [--temperature T]\n"
	       "      [--transport dev|dbus|http|auto] [--url URL | --unix-socket PATH]\n"
	       "      [--seed S] [--stop STR]...     stream an answer\n"
	       "  adapters list                       the adapters the daemon knows\n"
	       "  adapters import PATH [--name N] [--load]\n"
	       "  adapters load|unload|pin|unpin|remove NAME\n"
	       "  adapters prefetch NAME              read a loaded adapter toward the hot tier now\n"
	       "  adapters history NAME               the versions of NAME\n"
	       "  adapters rollback NAME VERSION      makes an earlier version the active one\n"
	       "  adapters gc                         prunes old versions, unreferenced blobs\n"
	       "  adapters fsck [--state-dir DIR] [--repair]\n"
	       "                                      checks the registry (no daemon needed)\n"
	       "  status                              the daemon's state and counters\n"
	       "  config check [FILE]                 check a configuration (default "
	       CONFIG_DEFAULT_PATH ")\n"
	       "  config apply [--config FILE] [--out DIR]\n"
	       "                                      write the systemd drop-in that lets\n"
	       "                                      mollyd.service reach only its targets\n"
	       "  key new NAME                        a new HTTP API key for member NAME\n"
	       "  explain [--config FILE] [--] PROMPT the policy's class, findings and permitted\n"
	       "                                      tiers for PROMPT (no daemon needed; '-':\n"
	       "                                      stdin; see 'molly explain --help')\n"
	       "  explain --daemon PROMPT             the running daemon's decision, with the\n"
	       "                                      router's candidate targets and scores\n"
	       "  audit [--since DURATION] [--tier T] [--class C] [--state-dir DIR]\n"
	       "                                      the audit records (no daemon needed)\n"
	       "  priors record --domain D --target T --score S | priors list\n"
	       "                                      the router's quality priors (no daemon)\n"
	       "\n"
	       "Options:\n"
	       "  --json                 machine-readable output\n"
	       "  --bus-address ADDRESS  talk to mollyd on this bus (default: the system bus,\n"
	       "                         or $DBUS_SYSTEM_BUS_ADDRESS)\n"
	       "  --session              the session bus (a mollyd started with Bus=session)\n"
	       "  --version, -h/--help\n");
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "bus-address", required_argument, NULL, 'b' },
		{ "session", no_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{},
	};
	int c;

	/* Options before the command only; the command parses the rest. */
	while ((c = getopt_long(argc, argv, "+h", options, NULL)) >= 0) {
		switch (c) {
		case 'j':
			arg_json = true;
			break;
		case 'b':
			arg_bus_address = optarg;
			break;
		case 's':
			arg_session = true;
			break;
		case 'h':
			usage();
			return 0;
		case 'V':
			printf("molly %s\n", MOLLY_VERSION);
			return 0;
		default:
			fprintf(stderr, "Try 'molly --help'.\n");
			return 2;
		}
	}
	if (optind >= argc) {
		usage();
		return 2;
	}
	argc -= optind;
	argv += optind;
	/* --json may also follow the command. */
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (strcmp(argv[i], "--json") == 0) {
			arg_json = true;
			memmove(argv + i, argv + i + 1, (size_t) (argc - i) * sizeof(char *));
			argc--;
			i--;
		}
	if (strcmp(argv[0], "ask") == 0)
		return cmd_ask(argc, argv);
	if (strcmp(argv[0], "adapters") == 0)
		return cmd_adapters(argc, argv);
	if (strcmp(argv[0], "status") == 0)
		return cmd_status(argc, argv);
	if (strcmp(argv[0], "config") == 0)
		return cmd_config(argc, argv);
	if (strcmp(argv[0], "key") == 0)
		return cmd_key(argc, argv);
	if (strcmp(argv[0], "explain") == 0)
		return cmd_explain(argc, argv);
	if (strcmp(argv[0], "audit") == 0)
		return cmd_audit(argc, argv);
	if (strcmp(argv[0], "priors") == 0)
		return cmd_priors(argc, argv);
	fprintf(stderr, "molly: unknown command '%s'. Try 'molly --help'.\n", argv[0]);
	return 2;
}
