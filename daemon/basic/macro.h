/* SPDX-License-Identifier: MIT */
/*
 * macro.h: small helpers shared by every module: scope cleanup (after systemd's
 * cleanup-fundamental.h), ownership hand-off, API entry checks, and array sizes.
 */
#pragma once

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)

/* Defines func##p() for _cleanup_(func##p): calls func() unless *p == empty. */
#define DEFINE_CLEANUP_FUNC(type, func, empty)                                                    \
	static inline void func##p(type *p)                                                        \
	{                                                                                          \
		if (*p != (empty))                                                                 \
			func(*p);                                                                  \
	}

static inline void freep(void *p)
{
	free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline void closep(int *fd)
{
	if (*fd >= 0)
		(void) close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

/* Hand ownership out of a _cleanup_ variable; leaves NULL / -EBADF behind. */
#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _p = (p);                                                            \
		(p) = NULL;                                                                        \
		_p;                                                                                \
	})
#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _fd = (fd);                                                                    \
		(fd) = -EBADF;                                                                     \
		_fd;                                                                               \
	})

/* API entry points only; the name says it returns (cf. kernel coding style §12). */
#define assert_return(expr, r)                                                                     \
	do {                                                                                       \
		if (_unlikely_(!(expr)))                                                           \
			return (r);                                                                \
	} while (0)

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define ALIGN_UP(x, a) ((((x) + (a) -1) / (a)) * (a))
