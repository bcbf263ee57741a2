/* SPDX-License-Identifier: MIT */
/* test-strbuf: the growable string of daemon/basic/strbuf.h. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "basic/strbuf.h"

TEST(strbuf_appends_and_terminates)
{
	struct strbuf b = {};
	char big[300];

	ASSERT_TRUE(b.s == NULL);
	ASSERT_OK(strbuf_add(&b, "", 0)); /* an empty append still makes a string */
	ASSERT_STREQ(b.s, "");
	ASSERT_OK(strbuf_adds(&b, "ab"));
	ASSERT_OK(strbuf_add(&b, "cdef", 2));
	ASSERT_OK(strbuf_cat(&b, "-", "x", "y"));
	ASSERT_STREQ(b.s, "abcd-xy");
	ASSERT_EQ(b.len, (size_t) 7);
	/* growth across several doublings keeps every byte, NULs inside included */
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char) (i % 251);
	for (int k = 0; k < 20; k++)
		ASSERT_OK(strbuf_add(&b, big, sizeof(big)));
	ASSERT_EQ(b.len, (size_t) 7 + 20 * sizeof(big));
	ASSERT_TRUE(b.cap > b.len && b.s[b.len] == '\0');
	for (int k = 0; k < 20; k++)
		ASSERT_TRUE(memcmp(b.s + 7 + k * sizeof(big), big, sizeof(big)) == 0);
	strbuf_done(&b);
	ASSERT_TRUE(b.s == NULL && b.len == 0 && b.cap == 0);
	return 0;
}

TEST(strbuf_printf_grows)
{
	struct strbuf b = {};
	char *s;

	ASSERT_OK(strbuf_addf(&b, "%d-%s", 42, "x"));
	ASSERT_STREQ(b.s, "42-x");
	/* longer than any capacity so far: vsnprintf's second pass must get the room */
	ASSERT_OK(strbuf_addf(&b, "%0200d|%s", 7, "end"));
	ASSERT_EQ(b.len, (size_t) 4 + 200 + 4);
	ASSERT_TRUE(strcmp(b.s + b.len - 4, "|end") == 0 && b.s[4] == '0' && b.s[203] == '7');
	s = strbuf_steal(&b);
	ASSERT_TRUE(s && b.s == NULL && b.len == 0);
	ASSERT_EQ(strlen(s), (size_t) 208);
	free(s);
	ASSERT_TRUE(strbuf_steal(&b) == NULL);
	return 0;
}

TEST(strbuf_refuses_impossible_lengths)
{
	struct strbuf b = {};

	ASSERT_OK(strbuf_adds(&b, "keep"));
	ASSERT_ERR(strbuf_add(&b, "x", SIZE_MAX - 2), -ENOMEM);
	ASSERT_ERR(strbuf_add(&b, "x", SIZE_MAX / 2), -ENOMEM);
	ASSERT_STREQ(b.s, "keep");
	ASSERT_EQ(b.len, (size_t) 4);
	strbuf_done(&b);
	return 0;
}
