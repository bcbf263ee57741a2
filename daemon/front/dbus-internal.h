/* SPDX-License-Identifier: MIT */
/*
 * dbus-internal.h: what dbus.c (connection, Inference1, Daemon1) and dbus-admin.c
 * (authorization, Adapters1, Reload, worker jobs) share. Not an API.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "../manager.h"
#include "dbus.h"

#define DBUS_NAME "org.molly.Daemon1"
#define DBUS_PATH "/org/molly/Daemon1"
#define DBUS_REQUEST_PREFIX "/org/molly/Daemon1/request/"
#define DBUS_IFACE_INFERENCE "org.molly.Inference1"
#define DBUS_IFACE_ADAPTERS "org.molly.Adapters1"
#define DBUS_IFACE_DAEMON "org.molly.Daemon1"
#define DBUS_IFACE_POLICY "org.molly.Policy1"

/* An item posted from another thread (scheduler events, finished jobs) to the loop. */
struct dbus_post {
	struct dbus_post *next;
	void (*run)(struct dbus_front *f, struct dbus_post *p); /* on the loop; frees p */
};

struct dbus_front {
	sd_event *event;           /* borrowed reference (ref'd) */
	sd_bus *bus;               /* owned */
	struct manager *manager;   /* borrowed */
	struct dbus_front_hooks hooks;
	bool accepting;

	/* Cross-thread queue: scheduler events and job results. */
	pthread_mutex_t lock;
	struct dbus_post *post_head, *post_tail;
	int post_fd;               /* eventfd */
	sd_event_source *post_source;

	struct dreq *requests;     /* in flight, and streams still flushing */
	unsigned n_requests;
	unsigned n_jobs;           /* admin worker threads running */
	unsigned n_auth;           /* polkit checks in flight */
};

/* Posts p to the loop (any thread). */
void dbus_front_post(struct dbus_front *f, struct dbus_post *p);

/* The interfaces (dbus-admin.c) */
extern const sd_bus_vtable dbus_adapters_vtable[];
int dbus_method_reload(sd_bus_message *m, void *userdata, sd_bus_error *error);
/* Answers the polkit checks still waiting with an error (at shutdown). */
void dbus_admin_cancel_auths(struct dbus_front *f);

/* The caller's identity: uid, and whether it is an administrator without polkit. */
int dbus_caller_uid(sd_bus_message *m, uid_t *ret);

/* Policy1 (dbus-policy.c) */
extern const sd_bus_vtable dbus_policy_vtable[];

/* A Generate request dictionary, read (dbus.c): the strings point into the message. */
struct dbus_parsed_request;
int dbus_read_request(sd_bus_message *m, struct dbus_parsed_request **ret, sd_bus_error *error);
const struct manager_request *dbus_parsed_request_get(const struct dbus_parsed_request *p);
struct dbus_parsed_request *dbus_parsed_request_free(struct dbus_parsed_request *p);
DEFINE_CLEANUP_FUNC(struct dbus_parsed_request *, dbus_parsed_request_free, NULL)

/* dbus-tiers.c: the adapter tiers in Daemon1.Status and the Daemon1 Adapter* properties. */
int dbus_tiers_append_status(sd_bus_message *reply, const struct manager_stats *st);
/* -ENOENT when property is not one of the tiers'. */
int dbus_tiers_property(const char *property, sd_bus_message *reply,
			const struct manager_stats *st);
double dbus_tiers_hash_rate(const struct tiers_stats *t);
#define DBUS_TIERS_PROPERTIES(getter)                                                              \
	SD_BUS_PROPERTY("AdapterEviction", "s", getter, 0, 0),                                     \
	SD_BUS_PROPERTY("AdapterLoadPath", "s", getter, 0, 0),                                     \
	SD_BUS_PROPERTY("AdapterTiersNote", "s", getter, 0, 0),                                    \
	SD_BUS_PROPERTY("AdapterHotBytes", "t", getter, 0, 0),                                     \
	SD_BUS_PROPERTY("AdapterWarmBytes", "t", getter, 0, 0),                                    \
	SD_BUS_PROPERTY("AdapterHits", "(tt)", getter, 0, 0),                                      \
	SD_BUS_PROPERTY("AdapterMisses", "(tt)", getter, 0, 0),                                    \
	SD_BUS_PROPERTY("AdapterEvictions", "(tt)", getter, 0, 0),                                 \
	SD_BUS_PROPERTY("AdapterBytesRead", "a{st}", getter, 0, 0)
