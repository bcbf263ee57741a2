/* SPDX-License-Identifier: MIT */
/*
 * dbus-policy.c: org.molly.Policy1 on /org/molly/Daemon1.
 *
 *   Explain(a{sv} request) -> a{sv} decision: the request dictionary of Inference1.Generate
 *     (prompt or messages, optional "class"; generation keys are accepted and ignored) is
 *     evaluated by the sovereignty policy exactly as a Generate would be, for the same caller
 *     (uid from the bus credentials, the member whose UIDs= has it), without generating and
 *     without an audit record. The answer (docs/dbus.md):
 *       "class" s, "permitted_tiers" as, "redact_for_t3" b, "special_score" d,
 *       "findings" aa{sv}: {"kind" s, "rule" s, "class" s, "start" t, "end" t, "layer" s,
 *         "score" d} with start/end
 *         character offsets into the text the policy sees (the prompt, or the messages'
 *         contents joined by "\n"), never the matched text itself,
 *       "member" s (only when the caller is a member),
 *       "route" a{sv}: what the router would do — "action" s ("single", "cascade",
 *         "mixture of N", or "none (...)"), "domain" s and "domain_p" d (the classifier's top
 *         domain; "" without one), "entropy" d (normalised), "candidates" aa{sv}: every
 *         target with "name" s, "tier" s, "quality" d, "cost" d, "latency" d (s), "score"
 *         d, "usable" b, "unusable_because" s, "excluded" s ("" : ranked), "chosen" b.
 *   Reload(): re-reads the configuration, rules included (administrators, as Daemon1.Reload).
 */
#include <errno.h>
#include <string.h>

#include "../core/config.h"
#include "dbus-internal.h"

static int append_findings(sd_bus_message *reply, const struct policy_decision *d)
{
	int r;

	r = sd_bus_message_open_container(reply, 'v', "aa{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && i < d->n_findings; i++) {
		const struct policy_finding *f = &d->findings[i];
		r = sd_bus_message_append(reply, "a{sv}", 7, "kind", "s", f->kind ? f->kind : "",
					  "rule", "s", f->rule ? f->rule : "", "class", "s",
					  policy_class_name(f->class), "start", "t",
					  (uint64_t) f->start, "end", "t", (uint64_t) f->end,
					  "layer", "s", f->layer ? f->layer : "", "score", "d",
					  (double) f->score);
	}
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	return r;
}

/* "route": {"action" s, "domain" s, "domain_p" d, "entropy" d, "candidates" aa{sv}} */
static int append_route(sd_bus_message *reply, const struct manager_route_explain *x)
{
	int r;

	r = sd_bus_message_open_container(reply, 'e', "sv");
	if (r >= 0)
		r = sd_bus_message_append(reply, "s", "route");
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'v', "a{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'a', "{sv}");
	if (r >= 0)
		r = sd_bus_message_append(reply, "{sv}{sv}{sv}{sv}", "action", "s", x->action,
					  "domain", "s", x->top_domain, "domain_p", "d", x->top_p,
					  "entropy", "d", x->entropy);
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'e', "sv");
	if (r >= 0)
		r = sd_bus_message_append(reply, "s", "candidates");
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'v', "aa{sv}");
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'a', "a{sv}");
	for (size_t i = 0; r >= 0 && i < x->n; i++) {
		const struct manager_route_candidate *c = &x->c[i];
		char tier[4];
		snprintf(tier, sizeof(tier), "T%u", c->tier & 3);
		r = sd_bus_message_append(
			reply, "a{sv}", 10, "name", "s", c->name, "tier", "s", tier, "quality", "d",
			c->quality, "cost", "d", c->cost, "latency", "d", c->latency_s, "score", "d",
			c->score, "usable", "b", (int) c->usable, "unusable_because", "s",
			c->why_unusable ? c->why_unusable : "", "excluded", "s",
			c->excluded ? c->excluded : "", "chosen", "b", (int) c->chosen);
	}
	/* a{sv}, v, the "candidates" entry, a{sv}, v, the "route" entry */
	for (int k = 0; r >= 0 && k < 6; k++)
		r = sd_bus_message_close_container(reply);
	return r;
}

static int method_explain(sd_bus_message *m, void *userdata, sd_bus_error *error)
{
	struct dbus_front *f = userdata;
	_cleanup_(config_unrefp) struct config *cfg = manager_get_config(f->manager);
	_cleanup_(dbus_parsed_request_freep) struct dbus_parsed_request *p = NULL;
	_cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
	struct manager_caller caller = { .uid = (uid_t) -1, .front = "dbus" };
	struct policy_decision d = { 0 };
	struct manager_route_explain route = { 0 };
	struct manager_error err = { 0 };
	const struct config_member *mem;
	char tiers[32];
	int r;

	r = dbus_read_request(m, &p, error);
	if (r < 0) {
		if (!sd_bus_error_is_set(error))
			sd_bus_error_set_errnof(error, -r, "cannot read the request: %s",
						strerror(-r));
		return -EINVAL;
	}
	/* The same caller identity as Generate: the member comes from the bus credentials. */
	(void) dbus_caller_uid(m, &caller.uid);
	mem = caller.uid != (uid_t) -1 ? config_find_member_by_uid(cfg, caller.uid) : NULL;
	caller.member = mem ? mem->name : NULL;

	r = manager_explain(f->manager, dbus_parsed_request_get(p), &caller, &d, &err);
	if (r < 0)
		return sd_bus_error_set(error, manager_err_dbus_name(err.kind), err.message);
	r = manager_explain_route(f->manager, dbus_parsed_request_get(p), &caller, &d, &route);
	if (r < 0) {
		policy_decision_done(&d);
		return sd_bus_error_set_errnof(error, -r, "routing: %s", strerror(-r));
	}

	r = sd_bus_message_new_method_return(m, &reply);
	if (r >= 0)
		r = sd_bus_message_open_container(reply, 'a', "{sv}");
	if (r >= 0)
		r = sd_bus_message_append(reply, "{sv}", "class", "s", policy_class_name(d.class));
	if (r >= 0) {
		r = sd_bus_message_open_container(reply, 'e', "sv");
		if (r >= 0)
			r = sd_bus_message_append(reply, "s", "permitted_tiers");
		if (r >= 0)
			r = sd_bus_message_open_container(reply, 'v', "as");
		if (r >= 0)
			r = sd_bus_message_open_container(reply, 'a', "s");
		for (int t = 0; r >= 0 && t < 4; t++)
			if (d.permitted_tiers & POLICY_TIER(t)) {
				snprintf(tiers, sizeof(tiers), "T%d", t);
				r = sd_bus_message_append(reply, "s", tiers);
			}
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
	}
	if (r >= 0)
		r = sd_bus_message_append(reply, "{sv}", "redact_for_t3", "b", (int) d.redact_for_t3);
	if (r >= 0)
		r = sd_bus_message_append(reply, "{sv}", "special_score", "d",
					  (double) d.special_score);
	if (r >= 0) {
		r = sd_bus_message_open_container(reply, 'e', "sv");
		if (r >= 0)
			r = sd_bus_message_append(reply, "s", "findings");
		if (r >= 0)
			r = append_findings(reply, &d);
		if (r >= 0)
			r = sd_bus_message_close_container(reply);
	}
	if (r >= 0 && caller.member)
		r = sd_bus_message_append(reply, "{sv}", "member", "s", caller.member);
	if (r >= 0)
		r = append_route(reply, &route);
	if (r >= 0)
		r = sd_bus_message_close_container(reply);
	policy_decision_done(&d);
	manager_route_explain_done(&route);
	if (r < 0)
		return sd_bus_error_set_errnof(error, -r, "building the answer: %s", strerror(-r));
	return sd_bus_send(NULL, reply, NULL);
}

const sd_bus_vtable dbus_policy_vtable[] = {
	SD_BUS_VTABLE_START(0),
	SD_BUS_METHOD_WITH_NAMES("Explain", "a{sv}", SD_BUS_PARAM(request), "a{sv}",
				 SD_BUS_PARAM(decision), method_explain,
				 SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_METHOD("Reload", "", "", dbus_method_reload, SD_BUS_VTABLE_UNPRIVILEGED),
	SD_BUS_VTABLE_END,
};
