/* SPDX-License-Identifier: MIT */
/*
 * dbus-tiers.c: the adapter tiers on D-Bus — entries of Daemon1.Status and the Daemon1
 * properties Adapter* (residency per tier, hits, misses, evictions, bytes read per loader
 * path, the path that runs and why, the hashing rate). Read them; they change all the time
 * and send no signals.
 */
#include <string.h>

#include "dbus-internal.h"

static uint64_t bytes_read(const struct tiers_stats *t)
{
	uint64_t n = 0;

	for (int p = 0; p < _BLOB_PATH_MAX; p++)
		n += t->bytes_read[p];
	return n;
}

double dbus_tiers_hash_rate(const struct tiers_stats *t)
{
	return t->hash_ns ? (double) bytes_read(t) / ((double) t->hash_ns * 1e-9) : 0.0;
}

int dbus_tiers_append_status(sd_bus_message *reply, const struct manager_stats *st)
{
	const struct sched_stats *s = &st->sched;
	const struct tiers_stats *t = &s->tiers;

	return sd_bus_message_append(
		reply,
		"{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}",
		"adapter_eviction", "s", s->eviction ?: "gdsf",
		"adapter_load_path", "s", blob_path_name(t->last_path),
		"adapter_tiers_note", "s", t->note,
		"adapter_hash", "s", t->hash_impl ?: "",
		"adapter_hash_bytes_per_second", "d", dbus_tiers_hash_rate(t),
		"adapter_hot_bytes", "t", s->hot_bytes,
		"adapter_hot_budget_bytes", "t", s->hot_budget_bytes,
		"adapter_warm_bytes", "t", t->warm_bytes,
		"adapter_warm_budget_bytes", "t", t->warm_budget,
		"adapter_warm_locked_bytes", "t", t->warm_locked,
		"adapter_hot_hits", "t", s->hot_hits,
		"adapter_hot_misses", "t", s->hot_misses,
		"adapter_warm_hits", "t", t->hits,
		"adapter_warm_misses", "t", t->misses,
		"adapter_evictions_hot", "t", s->adapter_evictions,
		"adapter_evictions_warm", "t", t->evictions,
		"adapter_promotions", "t", s->promotions,
		"adapter_loads", "t", t->loads,
		"adapter_load_failures", "t", t->load_failures,
		"adapter_bytes_read", "t", bytes_read(t),
		"adapters_bad", "t", st->adapters_bad);
}

int dbus_tiers_property(const char *property, sd_bus_message *reply,
			const struct manager_stats *st)
{
	const struct sched_stats *s = &st->sched;
	const struct tiers_stats *t = &s->tiers;

	if (strcmp(property, "AdapterEviction") == 0)
		return sd_bus_message_append(reply, "s", s->eviction ?: "gdsf");
	if (strcmp(property, "AdapterLoadPath") == 0)
		return sd_bus_message_append(reply, "s", blob_path_name(t->last_path));
	if (strcmp(property, "AdapterTiersNote") == 0)
		return sd_bus_message_append(reply, "s", t->note);
	if (strcmp(property, "AdapterHotBytes") == 0)
		return sd_bus_message_append(reply, "t", s->hot_bytes);
	if (strcmp(property, "AdapterWarmBytes") == 0)
		return sd_bus_message_append(reply, "t", t->warm_bytes);
	if (strcmp(property, "AdapterHits") == 0)
		return sd_bus_message_append(reply, "(tt)", s->hot_hits, t->hits);
	if (strcmp(property, "AdapterMisses") == 0)
		return sd_bus_message_append(reply, "(tt)", s->hot_misses, t->misses);
	if (strcmp(property, "AdapterEvictions") == 0)
		return sd_bus_message_append(reply, "(tt)", s->adapter_evictions, t->evictions);
	if (strcmp(property, "AdapterBytesRead") == 0)
		return sd_bus_message_append(reply, "a{st}", 3, "uring",
					     t->bytes_read[BLOB_PATH_URING], "uring-buffered",
					     t->bytes_read[BLOB_PATH_URING_BUFFERED], "pread",
					     t->bytes_read[BLOB_PATH_PREAD]);
	return -ENOENT;
}
