/* SPDX-License-Identifier: MIT */
/*
 * fuzz-egress-proto: proto_decode() on arbitrary bytes (a worker or a core that lies), and
 * for what it accepts, encode → decode again must succeed (what one side accepts, the other
 * can say).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "egress/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proto_msg m = { 0 }, m2 = { 0 };
	struct errmsg e;
	char *s = NULL;
	size_t n = 0;

	if (size > 1 << 20)
		return 0;
	if (proto_decode((const char *) data, size, &m, &e) < 0)
		return 0;
	if (proto_encode(&m, &s, &n) >= 0) {
		if (proto_decode(s, n, &m2, &e) < 0)
			abort();
		proto_msg_done(&m2);
		free(s);
	}
	proto_msg_done(&m);
	return 0;
}
