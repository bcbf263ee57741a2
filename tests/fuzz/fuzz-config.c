/* SPDX-License-Identifier: MIT */
/*
 * fuzz-config: mollyd's configuration parser on arbitrary file contents. It must return an
 * error or a configuration that config_verify() accepts or rejects cleanly: no crash, no leak,
 * no read past the input.
 *
 * The parser belongs to the daemon, not the engine library, so it is compiled into the harness
 * (which also gives it the harness's coverage instrumentation).
 */
#include <stddef.h>
#include <stdint.h>

#include "../../daemon/core/config.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config *c = NULL;
	struct errmsg e;

	if (config_new(&c) < 0)
		return 0;
	if (config_parse_text(c, (const char *) data, size, "fuzz.conf", &e) >= 0) {
		(void) config_verify(c, &e);
		free(config_model_name(c));
		(void) config_find_member_by_key(c, "molly-key");
		for (size_t i = 0; i < c->n_members; i++)
			(void) config_member_may_use(&c->members[i], c->model_name, "a:b");
	}
	config_unref(c);
	return 0;
}
