/* SPDX-License-Identifier: MIT */
/*
 * numa-place.h: on which NUMA node a warm adapter copy should live — the node nearest the
 * threads that will read it (the scheduler's compute threads; later a GPU's node), among the
 * nodes with room for it.
 *
 * The topology is plain data (nodes, SLIT distances, free bytes, the node of each CPU), read
 * from the system with libnuma by numa_topology_read(), or written out by tests for machines
 * we do not have (two and four nodes).
 *
 * Rule: a node's cost is the sum over the reading CPUs of distance(cpu's node, node); the
 * cheapest node whose free bytes hold the copy wins, ties to the lower node id. No node with
 * room: -ENOMEM (the caller then lets the kernel choose: unbound memory).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define NUMA_PLACE_MAX_NODES 64
#define NUMA_PLACE_MAX_CPUS 1024

struct numa_topology {
	uint32_t n_nodes;
	uint8_t distance[NUMA_PLACE_MAX_NODES][NUMA_PLACE_MAX_NODES]; /* SLIT: 10 = local */
	uint64_t free_bytes[NUMA_PLACE_MAX_NODES];
	uint32_t n_cpus;
	int16_t cpu_node[NUMA_PLACE_MAX_CPUS]; /* -1: CPU absent */
};

/* The running system's topology; -EOPNOTSUPP where libnuma says NUMA is unavailable. */
int numa_topology_read(struct numa_topology *t);

/* The node for `bytes` read by cpus[0..n_cpus); n_cpus = 0 means every CPU. -EINVAL for a
 * CPU outside the topology, -ENOMEM when no node has room. */
int numa_place(const struct numa_topology *t, const uint32_t *cpus, size_t n_cpus,
	       uint64_t bytes);
