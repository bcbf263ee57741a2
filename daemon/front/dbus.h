/* SPDX-License-Identifier: MIT */
/*
 * dbus.h: mollyd's D-Bus front (sd-bus): bus name org.molly.Daemon1, object
 * /org/molly/Daemon1, interfaces org.molly.Inference1 (Generate, Stream, Cancel),
 * org.molly.Adapters1 (List, Import, Load, Unload, Pin, Unpin) and org.molly.Daemon1 (Status,
 * Reload; properties Version, Model, QueueDepth, RunningSequences). docs/dbus.md has the
 * introspection XML and every key.
 *
 * Threading: everything runs on the sd-event loop the front is attached to (the main thread).
 * The manager's events arrive on the scheduler's thread; they are copied into a queue and an
 * eventfd wakes the loop, which replies to Generate calls and writes Stream lines. Slow
 * administrative work (Import, Load) runs on short-lived worker threads that post their result
 * back the same way; the bus is never blocked by generation or file copies.
 *
 * Authorization: the bus policy (packaging/dbus/org.molly.Daemon1.conf) decides who may talk
 * to the daemon at all; administrative methods are then checked here: root, a member of
 * [Daemon] AdminGroup=, a [Member] with Admin=yes whose UIDs= has the caller, or polkit action
 * org.molly.admin (asked asynchronously; when polkit is not on the bus only the others pass).
 */
#pragma once

#include <stdbool.h>

#include <systemd/sd-event.h>

#include "../basic/errmsg.h"
#include "../basic/macro.h"

struct manager;
struct dbus_front;

struct dbus_front_hooks {
	/* Reload(): re-reads the configuration and applies it (main.c); 0, 1 (applied with
	 * warnings in e) or -errno with e. */
	int (*reload)(void *userdata, struct errmsg *e);
	void *userdata;
};

/*
 * Connects to the bus [DBus] Bus= names (system: $DBUS_SYSTEM_BUS_ADDRESS honoured; session:
 * $DBUS_SESSION_BUS_ADDRESS), registers the objects, attaches to event and takes the name.
 * *ret = NULL and 0 when Bus=none. The manager must outlive the front.
 */
int dbus_front_new(sd_event *event, struct manager *m, const struct dbus_front_hooks *hooks,
		   struct dbus_front **ret, struct errmsg *e);
/* Closes every stream (clients see EOF), drops pending calls, leaves the bus. NULL-safe. */
struct dbus_front *dbus_front_free(struct dbus_front *f);
DEFINE_CLEANUP_FUNC(struct dbus_front *, dbus_front_free, NULL)

/* SIGTERM: Generate and Stream now fail with org.molly.Error.Unavailable; work in flight
 * continues until the manager drains it. */
void dbus_front_stop_accepting(struct dbus_front *f);
/* No request in flight, no stream with unwritten output, no admin job running. */
bool dbus_front_idle(struct dbus_front *f);
/* The unique name of the daemon's connection (for logs); NULL without a bus. */
const char *dbus_front_unique_name(struct dbus_front *f);
