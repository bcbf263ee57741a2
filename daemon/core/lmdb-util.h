/* SPDX-License-Identifier: MIT */
/*
 * lmdb-util.h: what every LMDB store of the daemon (audit, priors) shares. LMDB returns
 * positive errno values and negative MDB_* codes; lmdb_errno() turns both into -errno so
 * neither leaves the store modules.
 */
#pragma once

#include <stdint.h>

int lmdb_errno(int rc);

/* CLOCK_REALTIME in nanoseconds: the stores' record times. */
uint64_t lmdb_realtime_ns(void);
