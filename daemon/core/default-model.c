/* SPDX-License-Identifier: MIT */
/* default-model.c: where the default model is (see default-model.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "default-model.h"

#ifndef MOLLY_DATADIR
#define MOLLY_DATADIR "/usr/share"
#endif

int default_model_find(char **ret)
{
	static const char rel[] = "share/molly/models/" DEFAULT_MODEL_FILE;
	const char *env = getenv("MOLLY_MODEL");
	char self[PATH_MAX], buf[PATH_MAX + sizeof(rel) + 8];
	ssize_t n;

	*ret = NULL;
	if (env && env[0])
		return (*ret = strdup(env)) ? 0 : -ENOMEM;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		char *slash;

		self[n] = 0;
		if ((slash = strrchr(self, '/'))) {
			*slash = 0;
			snprintf(buf, sizeof(buf), "%s/../%s", self, rel);
			/* the canonical path, so that logs and `molly status` name the file itself */
			if (access(buf, R_OK) == 0 && (*ret = realpath(buf, NULL)))
				return 0;
		}
	}
	snprintf(buf, sizeof(buf), "%s/molly/models/%s", MOLLY_DATADIR, DEFAULT_MODEL_FILE);
	if (access(buf, R_OK) == 0)
		return (*ret = strdup(buf)) ? 0 : -ENOMEM;
	return 0;
}
