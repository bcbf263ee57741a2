/* SPDX-License-Identifier: MIT */
/*
 * molly.h: libmolly, the client library of the Molly inference service (libmolly.so.1,
 * pkg-config molly).
 *
 * One API over two transports: /dev/molly (kmod-shim or mollyd's CUSE server; the kernel
 * tells the daemon who you are) and, where that device is absent, D-Bus (org.molly.Daemon1
 * Stream on the system bus, or $DBUS_SYSTEM_BUS_ADDRESS). An application links one library
 * and works either way.
 *
 *	struct molly *h;
 *	struct molly_params p;
 *	struct molly_output out;
 *	uint64_t id;
 *
 *	if (molly_open(MOLLY_TRANSPORT_AUTO, &h) < 0) ...
 *	molly_params_init(&p);
 *	p.prompt = "Once upon a time";
 *	p.max_tokens = 32;
 *	molly_submit(h, &p, &id);
 *	while (molly_next_event(h, &out, -1) > 0) {
 *		if (out.type == MOLLY_OUTPUT_TEXT)
 *			fwrite(out.text, 1, out.text_len, stdout);
 *		else
 *			break; // DONE or ERROR: the request's last event
 *	}
 *	molly_close(h);
 *
 * Several requests may be in flight on one handle; events carry their request's id. For an
 * event loop, poll molly_fd() for POLLIN and call molly_next_event(h, &out, 0) until it
 * returns 0. Errors are -errno; a handle is used by one thread at a time.
 */
#ifndef MOLLY_MOLLY_H
#define MOLLY_MOLLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum molly_transport {
	MOLLY_TRANSPORT_AUTO, /* /dev/molly when it opens, else D-Bus */
	MOLLY_TRANSPORT_DEV,  /* /dev/molly (or $MOLLY_DEVICE) only */
	MOLLY_TRANSPORT_DBUS, /* D-Bus only */
};

struct molly;

struct molly_params {
	const char *prompt;        /* a completion; or: */
	const char *messages_json; /* a chat: JSON array of {"role": ..., "content": ...} */
	const char *model;         /* NULL or "": the base; an adapter name; "base:adapter" */
	uint32_t max_tokens;       /* 0: until end of generation */
	double temperature;        /* 0: greedy; default 1 */
	double top_p;              /* >= 1: off (default) */
	bool has_seed;
	uint64_t seed;
	bool ignore_eos;
	const char *declared_class; /* NULL, "public", "personal" or "secret" */
};

/* Sets the defaults (temperature 1, top_p 1, the rest zero). */
void molly_params_init(struct molly_params *p);

enum molly_output_type {
	MOLLY_OUTPUT_TEXT = 1,
	MOLLY_OUTPUT_DONE = 2,
	MOLLY_OUTPUT_ERROR = 3,
};

/* One event. Its pointers stay valid until the next call on the handle. */
struct molly_output {
	enum molly_output_type type;
	uint64_t id;
	const char *text;          /* TEXT: whole UTF-8 characters (not NUL-terminated) */
	size_t text_len;
	const char *finish_reason; /* DONE: "stop", "length", "cancelled" */
	uint32_t prompt_tokens, completion_tokens;
	const char *model;         /* DONE: the resolved model */
	const char *target;        /* DONE: the routing target, or "" */
	const char *error_name;    /* ERROR: the D-Bus error name, e.g. org.molly.Error.QueueFull */
	const char *error_message; /* ERROR: human-readable */
};

/* 0 and a handle, or -errno (-ENOENT: no device and no bus for AUTO). */
int molly_open(enum molly_transport transport, struct molly **ret);
/* "dev" or "dbus". */
const char *molly_transport_name(const struct molly *h);
/* 0 and the request's id, or -errno: -EINVAL (bad parameters), -EAGAIN (too many in flight),
 * -ENOTCONN (no daemon behind the device), or a D-Bus error mapped to -errno (the name is
 * in molly_last_error()). */
int molly_submit(struct molly *h, const struct molly_params *p, uint64_t *ret_id);
/* 1 and an event, 0 when none came within timeout_ms (-1: wait), or -errno. */
int molly_next_event(struct molly *h, struct molly_output *ret, int timeout_ms);
/* Ends a request early: its DONE says "cancelled". -ENOENT when unknown or finished. */
int molly_cancel(struct molly *h, uint64_t id);
/* A file descriptor that polls readable when molly_next_event() has something. */
int molly_fd(const struct molly *h);
/* The last error's text (a D-Bus error name and message, or a reason), or "". */
const char *molly_last_error(const struct molly *h);
/* Closes the handle; requests still in flight are cancelled. Returns NULL. */
struct molly *molly_close(struct molly *h);

#ifdef __cplusplus
}
#endif

#endif /* MOLLY_MOLLY_H */
