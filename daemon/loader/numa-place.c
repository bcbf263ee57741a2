/* SPDX-License-Identifier: MIT */
/* numa-place.c: the placement rule (see numa-place.h) and the system's topology via libnuma. */
#include <errno.h>
#include <numa.h>
#include <string.h>

#include "../basic/macro.h"
#include "numa-place.h"

int numa_place(const struct numa_topology *t, const uint32_t *cpus, size_t n_cpus,
	       uint64_t bytes)
{
	uint64_t readers[NUMA_PLACE_MAX_NODES] = { 0 };
	uint64_t best_cost = UINT64_MAX;
	int best = -ENOMEM;

	if (t->n_nodes == 0 || t->n_nodes > NUMA_PLACE_MAX_NODES || t->n_cpus > NUMA_PLACE_MAX_CPUS)
		return -EINVAL;
	/* how many reading CPUs sit on each node */
	for (size_t i = 0; i < (n_cpus ? n_cpus : t->n_cpus); i++) {
		uint32_t cpu = n_cpus ? cpus[i] : (uint32_t) i;
		int node;

		if (cpu >= t->n_cpus)
			return -EINVAL;
		node = t->cpu_node[cpu];
		if (node < 0) {
			if (n_cpus)
				return -EINVAL;
			continue;
		}
		if ((uint32_t) node >= t->n_nodes)
			return -EINVAL;
		readers[node]++;
	}
	for (uint32_t n = 0; n < t->n_nodes; n++) {
		uint64_t cost = 0;

		if (t->free_bytes[n] < bytes)
			continue;
		for (uint32_t k = 0; k < t->n_nodes; k++)
			cost += readers[k] * t->distance[k][n];
		if (cost < best_cost) {
			best_cost = cost;
			best = (int) n;
		}
	}
	return best;
}

int numa_topology_read(struct numa_topology *t)
{
	int max_node, n_cpus;

	memset(t, 0, sizeof(*t));
	if (numa_available() < 0)
		return -EOPNOTSUPP;
	max_node = numa_max_node();
	n_cpus = numa_num_configured_cpus();
	if (max_node < 0 || max_node >= NUMA_PLACE_MAX_NODES || n_cpus <= 0)
		return -EOPNOTSUPP;
	t->n_nodes = (uint32_t) max_node + 1;
	t->n_cpus = (uint32_t) MIN(n_cpus, NUMA_PLACE_MAX_CPUS);
	for (uint32_t a = 0; a < t->n_nodes; a++) {
		long long free_b = 0;

		/* the node's own view of free memory (it can be far below MemFree on VMs) */
		if (numa_node_size64((int) a, &free_b) > 0 && free_b > 0)
			t->free_bytes[a] = (uint64_t) free_b;
		for (uint32_t b = 0; b < t->n_nodes; b++)
			t->distance[a][b] = (uint8_t) MIN(numa_distance((int) a, (int) b), 255);
	}
	for (uint32_t c = 0; c < t->n_cpus; c++)
		t->cpu_node[c] = (int16_t) numa_node_of_cpu((int) c);
	return 0;
}
