/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <lmdb.h>
#include <time.h>

#include "lmdb-util.h"

int lmdb_errno(int rc)
{
	switch (rc) {
	case MDB_SUCCESS:
		return 0;
	case MDB_KEYEXIST:
		return -EEXIST;
	case MDB_NOTFOUND:
		return -ENOENT;
	case MDB_MAP_FULL:
	case MDB_DBS_FULL:
		return -ENOSPC;
	case MDB_READERS_FULL:
	case MDB_MAP_RESIZED:
		return -EAGAIN;
	case MDB_TXN_FULL:
	case MDB_CURSOR_FULL:
	case MDB_PAGE_FULL:
	case MDB_BAD_VALSIZE:
		return -E2BIG;
	case MDB_INVALID:
	case MDB_VERSION_MISMATCH:
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INCOMPATIBLE:
		return -EBADMSG;
	case MDB_PANIC:
	case MDB_BAD_TXN:
	case MDB_BAD_RSLOT:
	case MDB_BAD_DBI:
	case MDB_TLS_FULL:
		return -EIO;
	default:
		return rc > 0 ? -rc : -EIO;
	}
}

uint64_t lmdb_realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}
