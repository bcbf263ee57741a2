/* SPDX-License-Identifier: MIT */
/*
 * test-tiers: the adapter tiers (cold blob → warm copy → hot pages) through the real
 * scheduler, real Molly blobs on disk and real io_uring.
 *
 *  - eviction policy (evict.h): GDSF keeps the frequently used and the costly per byte, LRU
 *    the recent; inflation ages entries out;
 *  - NUMA placement on topologies given as data (two and four nodes, SLIT distances, full
 *    nodes); warm memory on the real node, locked, and unlocked when mlock is refused;
 *  - a working set of 8 adapters larger than the hot and the warm budgets, both policies:
 *    every request's ids and log-probabilities equal its solo run (the adapter read straight
 *    from its file), a pinned adapter stays hot, budgets checked after every step;
 *  - a request on a cold adapter waits alone: with loads held, requests on hot adapters run
 *    to the end while it has no token; then it completes with its solo output;
 *  - a blob changed on disk: its requests end with "corrupt", the bad callback names it, the
 *    others are unaffected; prefetch makes an adapter hot without a request.
 */
#include <fcntl.h>
#include <numaif.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "test.h"

#include "basic/sha256.h"
#include "engine/model.h"
#include "engine/vocab.h"
#include "loader/numa-place.h"
#include "loader/warm.h"
#include "lora/adapter.h"
#include "lora/lora-file.h"
#include "lora/lora-gen.h"
#include "lora/resident.h"
#include "sched/evict.h"
#include "sched/sched.h"
#include "sched/tier-sim.h"

int sched_check_pool(struct sched *s);

/* ---- eviction policy ---- */

TEST(gdsf_and_lru_order)
{
	struct evict_clock cg = { 0 }, cl = { 0 };
	struct evict_meta g[3] = { { .bytes = 1000, .cost = 1.0 }, { .bytes = 1000, .cost = 1.0 },
				   { .bytes = 4000, .cost = 1.0 } };
	struct evict_meta l[3];

	for (int i = 0; i < 3; i++)
		evict_insert(EVICT_GDSF, &cg, &g[i]);
	memcpy(l, g, sizeof(l));
	for (int i = 0; i < 3; i++)
		evict_insert(EVICT_LRU, &cl, &l[i]);
	/* 0 used often long ago; 1 once; 2 big, used last */
	for (int k = 0; k < 5; k++)
		evict_hit(EVICT_GDSF, &cg, &g[0]), evict_hit(EVICT_LRU, &cl, &l[0]);
	evict_hit(EVICT_GDSF, &cg, &g[2]), evict_hit(EVICT_LRU, &cl, &l[2]);
	/* LRU: 1 is the oldest; then 0 */
	ASSERT_TRUE(evict_before(&l[1], &l[0]) && evict_before(&l[0], &l[2]));
	/* GDSF: 2 (freq 2, 4× the size: 2/4000) before 1 (1/1000) before 0 (6/1000) */
	ASSERT_TRUE(evict_before(&g[2], &g[1]) && evict_before(&g[1], &g[0]));
	/* inflation: after evicting 2 and 1, a new entry starts at L and outranks nothing
	 * stale only once used; 0 must age out eventually if no longer used */
	evict_removed(EVICT_GDSF, &cg, &g[2]);
	evict_removed(EVICT_GDSF, &cg, &g[1]);
	ASSERT_NEAR(cg.inflation, 1.0 / 1000, 1e-12);
	{
		struct evict_meta n = { .bytes = 1000, .cost = 1.0 };

		evict_insert(EVICT_GDSF, &cg, &n);
		for (int k = 0; k < 100 && evict_before(&g[0], &n) == false; k++) {
			evict_removed(EVICT_GDSF, &cg, &n);
			evict_insert(EVICT_GDSF, &cg, &n);
		}
		ASSERT_TRUE(evict_before(&g[0], &n));
	}
	/* cost matters: same size and use, twice the reload time ranks higher */
	{
		struct evict_clock c = { 0 };
		struct evict_meta cheap = { .bytes = 1000, .cost = 1.0 },
				  dear = { .bytes = 1000, .cost = 2.0 };

		evict_insert(EVICT_GDSF, &c, &dear);
		evict_insert(EVICT_GDSF, &c, &cheap);
		ASSERT_TRUE(evict_before(&cheap, &dear));
	}
	return 0;
}

/* Belady's farthest-next-use is optimal for the miss count when sizes are equal: the
 * scheduler's policies (the same code, through the simulator) can only miss as often or more. */
TEST(trace_sim_belady_bounds_the_policies)
{
	struct tier_sim_params p = { .n_adapters = 200, .hot_slots = 16, .n_requests = 20000,
				     .zipf_s = 1.0, .seed = 7, .bytes_per_rank = 1e6,
				     .bandwidth = 1e9, .latency_s = 1e-4, .equal_rank = 8 };
	struct tier_sim_result g, l, b;

	ASSERT_OK(tier_sim_run(&p, TIER_SIM_GDSF, &g));
	ASSERT_OK(tier_sim_run(&p, TIER_SIM_LRU, &l));
	ASSERT_OK(tier_sim_run(&p, TIER_SIM_BELADY, &b));
	printf("  equal sizes: misses gdsf %llu lru %llu belady %llu\n",
	       (unsigned long long) g.misses, (unsigned long long) l.misses,
	       (unsigned long long) b.misses);
	ASSERT_TRUE(b.misses <= g.misses && b.misses <= l.misses);
	ASSERT_EQ(g.hits + g.misses, p.n_requests);
	/* cold misses alone: at least one per distinct adapter requested */
	ASSERT_TRUE(b.misses >= 16);
	return 0;
}

/* ---- NUMA placement on topologies as data ---- */

static void topo_init(struct numa_topology *t, uint32_t n_nodes, uint32_t cpus_per_node,
		      const uint8_t *dist, uint64_t free_each)
{
	memset(t, 0, sizeof(*t));
	t->n_nodes = n_nodes;
	t->n_cpus = n_nodes * cpus_per_node;
	for (uint32_t a = 0; a < n_nodes; a++) {
		t->free_bytes[a] = free_each;
		for (uint32_t b = 0; b < n_nodes; b++)
			t->distance[a][b] = dist[a * n_nodes + b];
	}
	for (uint32_t c = 0; c < t->n_cpus; c++)
		t->cpu_node[c] = (int16_t) (c / cpus_per_node);
}

TEST(numa_place_two_nodes)
{
	static const uint8_t d[] = { 10, 21, 21, 10 };
	struct numa_topology t;
	const uint32_t on1[] = { 4, 5, 6 }, mostly0[] = { 0, 1, 2, 5 };

	topo_init(&t, 2, 4, d, 8ull << 30);
	ASSERT_EQ(numa_place(&t, on1, 3, 1 << 20), 1);
	ASSERT_EQ(numa_place(&t, mostly0, 4, 1 << 20), 0);
	/* every CPU: equal cost, the lower node */
	ASSERT_EQ(numa_place(&t, NULL, 0, 1 << 20), 0);
	/* node 1 full: the copy goes to node 0 */
	t.free_bytes[1] = 1 << 19;
	ASSERT_EQ(numa_place(&t, on1, 3, 1 << 20), 0);
	/* nowhere: -ENOMEM; a CPU outside the topology: -EINVAL */
	t.free_bytes[0] = 0;
	ASSERT_ERR(numa_place(&t, on1, 3, 1 << 20), -ENOMEM);
	{
		const uint32_t bad[] = { 99 };

		ASSERT_ERR(numa_place(&t, bad, 1, 1), -EINVAL);
	}
	return 0;
}

TEST(numa_place_four_nodes)
{
	/* a ring 0-1-3-2-0: neighbours 16, across 22 (two sockets of two dies) */
	static const uint8_t d[] = { 10, 16, 16, 22, 16, 10, 22, 16, 16, 22, 10, 16, 22, 16, 16, 10 };
	struct numa_topology t;
	const uint32_t on2and3[] = { 4, 5, 6, 7 }, on3[] = { 6 }, on0and3[] = { 0, 6 };

	topo_init(&t, 4, 2, d, 4ull << 30);
	/* readers on 2 and 3 (cost: node2 10+16, node3 16+10): the lower, 2 */
	ASSERT_EQ(numa_place(&t, on2and3, 4, 1 << 20), 2);
	ASSERT_EQ(numa_place(&t, on3, 1, 1 << 20), 3);
	/* node 3 full: its nearest are 1 and 2 (16 each): 1 */
	t.free_bytes[3] = 0;
	ASSERT_EQ(numa_place(&t, on3, 1, 1 << 20), 1);
	/* readers on 0 and 3 (far apart): 0 costs 10+22, 1 costs 16+16=32 too, 2 16+16:
	 * ties go to the lowest id */
	t.free_bytes[3] = 4ull << 30;
	ASSERT_EQ(numa_place(&t, on0and3, 2, 1 << 20), 0);
	t.free_bytes[0] = 0;
	ASSERT_EQ(numa_place(&t, on0and3, 2, 1 << 20), 1);
	return 0;
}

TEST(numa_topology_of_this_machine)
{
	struct numa_topology t;
	int node;

	if (numa_topology_read(&t) < 0) {
		printf("  (no NUMA support here)\n");
		return TEST_SKIP;
	}
	printf("  %u node(s), %u CPUs, node 0 free %llu MiB\n", t.n_nodes, t.n_cpus,
	       (unsigned long long) (t.free_bytes[0] >> 20));
	ASSERT_TRUE(t.distance[0][0] == 10);
	node = numa_place(&t, NULL, 0, 1 << 20);
	ASSERT_TRUE(node >= 0 && (uint32_t) node < t.n_nodes);
	return 0;
}

/* The two-node qemu guest (tests/guest/run.sh boots it with -numa and sets
 * MOLLY_GUEST_NUMA_NODES=2): these machines have one node, so only there does the placement
 * meet a real second node. Readers on node 1 get their copy on node 1, and the kernel puts
 * the warm pages there. */
TEST(numa_two_node_guest)
{
	_cleanup_(warm_freep) struct warm *w = NULL;
	const char *want = getenv("MOLLY_GUEST_NUMA_NODES");
	uint32_t on1[NUMA_PLACE_MAX_CPUS];
	struct numa_topology t;
	struct warm_buf b;
	size_t n = 0;
	int node = -1;

	if (!want) {
		printf("  (only in the two-node guest of tests/guest/run.sh)\n");
		return TEST_SKIP;
	}
	ASSERT_OK(numa_topology_read(&t));
	ASSERT_EQ(t.n_nodes, (uint32_t) atoi(want));
	for (uint32_t c = 0; c < t.n_cpus; c++)
		if (t.cpu_node[c] == 1)
			on1[n++] = c;
	ASSERT_TRUE(n > 0);
	printf("  %u nodes, distance 0-1 %u, %zu CPU(s) on node 1\n", t.n_nodes, t.distance[0][1],
	       n);
	ASSERT_EQ(numa_place(&t, on1, n, 1 << 20), 1);
	ASSERT_OK(warm_new(4 << 20, &w));
	ASSERT_OK(warm_alloc(w, 1 << 20, 1, &b));
	memset(b.data, 1, b.bytes);
	ASSERT_EQ(b.node, 1);
	/* where the kernel really put the first page */
	ASSERT_OK(get_mempolicy(&node, NULL, 0, b.data, MPOL_F_NODE | MPOL_F_ADDR));
	ASSERT_EQ(node, 1);
	warm_release(w, &b);
	return 0;
}

/* ---- warm memory ---- */

TEST(warm_memory_locked_within_budget)
{
	_cleanup_(warm_freep) struct warm *w = NULL;
	struct warm_buf a, b;
	char note[160];

	ASSERT_OK(warm_new(3 << 20, &w));
	ASSERT_OK(warm_alloc(w, (2 << 20) + 1, 0, &a));
	ASSERT_OK(warm_alloc(w, 1 << 20, -1, &b));
	ASSERT_TRUE(((uintptr_t) a.data % 4096) == 0 && a.bytes == (2 << 20) + 4096);
	memset(a.data, 1, a.bytes);
	memset(b.data, 2, b.bytes);
	warm_note(w, note, sizeof(note));
	printf("  a: node %d locked %d; b: node %d locked %d; note '%s'\n", a.node, a.locked,
	       b.node, b.locked, note);
	/* the lock budget (3 MiB) holds a but not a + b */
	ASSERT_TRUE(!(a.locked && b.locked));
	ASSERT_TRUE(warm_locked_bytes(w) <= (3 << 20));
	warm_release(w, &a);
	warm_release(w, &b);
	ASSERT_EQ(warm_bytes(w), 0);
	ASSERT_EQ(warm_locked_bytes(w), 0);
	return 0;
}

TEST(warm_memory_unlocked_when_mlock_refused)
{
	int status;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = { 0, 0 };
		struct warm *w = NULL;
		struct warm_buf a;
		char note[160];

		/* RLIMIT_MEMLOCK 0 and no CAP_IPC_LOCK (an unprivileged uid, as the daemon runs):
		 * mlock fails with EPERM */
		if (setrlimit(RLIMIT_MEMLOCK, &rl) < 0)
			_exit(77);
		if (geteuid() == 0 && setresuid(65534, 65534, 65534) < 0)
			_exit(77);
		if (warm_new(64 << 20, &w) < 0 || warm_alloc(w, 1 << 20, 0, &a) < 0)
			_exit(2);
		warm_note(w, note, sizeof(note));
		printf("  child: locked %d, note '%s'\n", a.locked, note);
		fflush(stdout);
		if (a.locked || !strstr(note, "mlock refused"))
			_exit(3);
		memset(a.data, 7, a.bytes); /* usable all the same */
		warm_release(w, &a);
		warm_free(w);
		_exit(0);
	}
	ASSERT_TRUE(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
	if (WEXITSTATUS(status) == 77)
		return TEST_SKIP;
	ASSERT_EQ(WEXITSTATUS(status), 0);
	return 0;
}

/* ---- through the scheduler ---- */

#define N_ADAPTERS 8
#define MAX_GEN 24

static char dir_[] = "/tmp/molly-test-tiers-XXXXXX";
static char blob_path[N_ADAPTERS][300];
static uint8_t blob_sha[N_ADAPTERS][32];
static uint32_t blob_rank[N_ADAPTERS];
static bool blobs_made;

static void remove_files(void)
{
	char changed[320];

	snprintf(changed, sizeof(changed), "%s/changed.molly", dir_);
	unlink(changed);
	for (int i = 0; i < N_ADAPTERS; i++)
		if (blob_path[i][0])
			unlink(blob_path[i]);
	rmdir(dir_);
}

static struct model *load_model(void)
{
	struct model *m = NULL;
	struct errmsg e = { { 0 } };

	if (model_load(test_shared_path("models/stories260K.gguf"), &m, &e) < 0) {
		fprintf(stderr, "  %s\n", e.text);
		return NULL;
	}
	return m;
}

static int hash_file(const char *path, uint8_t out[32])
{
	struct sha256_ctx c;
	uint8_t buf[65536];
	ssize_t k;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	sha256_init(&c);
	while ((k = read(fd, buf, sizeof(buf))) > 0)
		sha256_update(&c, buf, (size_t) k);
	close(fd);
	sha256_final(&c, out);
	return k < 0 ? -EIO : 0;
}

/* N_ADAPTERS Molly blobs of mixed ranks (2..16), as the registry would store them. */
static int make_blobs(const struct model *m)
{
	static const uint32_t ranks[N_ADAPTERS] = { 2, 16, 4, 8, 16, 2, 8, 4 };

	if (blobs_made)
		return 0;
	if (!mkdtemp(dir_))
		return -errno;
	atexit(remove_files);
	for (int i = 0; i < N_ADAPTERS; i++) {
		char gguf[300];
		struct lora_gen_opts go = { .base = m, .rank = ranks[i], .seed = 100 + (uint64_t) i,
					    .format = LORA_FORMAT_GGUF, .b_std = 0.05f };
		struct lora_open_opts oo = { .base = m };
		_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;
		struct errmsg e = { { 0 } };

		snprintf(gguf, sizeof(gguf), "%s/gen%d.gguf", dir_, i);
		snprintf(blob_path[i], sizeof(blob_path[i]), "%s/blob%d.molly", dir_, i);
		ASSERT_OK(lora_gen_write(gguf, &go, &e));
		ASSERT_OK(lora_adapter_open(gguf, &oo, &a, NULL, &e));
		ASSERT_OK(lora_file_write(a, blob_path[i], NULL, &e));
		unlink(gguf);
		ASSERT_OK(hash_file(blob_path[i], blob_sha[i]));
		blob_rank[i] = ranks[i];
	}
	blobs_made = true;
	return 0;
}

static int add_adapter(struct sched *s, const struct model *m, int i, bool tiered)
{
	char name[16];
	struct lora_open_opts oo = { .base = m, .name = name };
	struct lora_adapter *a = NULL;
	struct errmsg e = { { 0 } };

	snprintf(name, sizeof(name), "a%d", i);
	ASSERT_OK(lora_adapter_open(blob_path[i], &oo, &a, NULL, &e));
	if (sched_add_adapter(s, a, &e) < 0) {
		lora_adapter_free(a);
		TEST_FAIL_("add %s: %s", name, e.text);
	}
	if (tiered)
		ASSERT_OK(sched_set_adapter_source(s, name, blob_path[i], blob_sha[i]));
	return 0;
}

struct result {
	uint64_t id;
	int32_t ids[MAX_GEN];
	float logprobs[MAX_GEN];
	uint32_t n;
	bool done;
	int error;
	char message[256];
};

static void on_event(const struct sched_event *ev, void *userdata)
{
	struct result *r = userdata;

	if (ev->type == SCHED_EVENT_TOKEN && r->n < MAX_GEN) {
		r->ids[r->n] = ev->token;
		r->logprobs[r->n] = ev->logprob;
		r->n++;
	} else if (ev->type != SCHED_EVENT_TOKEN) {
		r->done = true;
		r->error = ev->error;
		if (ev->message)
			snprintf(r->message, sizeof(r->message), "%s", ev->message);
	}
}

static int submit(struct sched *s, const struct model *m, int adapter, uint32_t n_tokens,
		  uint64_t seed, struct result *res)
{
	static const char *prompts[] = { "Once upon a time", "Lily", "The big red ball was" };
	const char *prompt = prompts[seed % 3];
	char name[16];
	int32_t ids[256];
	int64_t n = vocab_tokenize(m->vocab, prompt, strlen(prompt), true, false, ids, 256);
	struct sched_lora lora = { name, 1.0f };
	struct sched_request req = { .prompt = ids, .n_prompt = (size_t) n, .max_tokens = n_tokens,
				     .loras = &lora, .n_loras = adapter >= 0,
				     .on_event = on_event, .userdata = res, .ignore_eos = true };
	struct errmsg e = { { 0 } };
	int r;

	snprintf(name, sizeof(name), "a%d", adapter);
	sampler_params_default(&req.sampling);
	req.sampling.temperature = seed % 2 ? 0.8f : 0.0f;
	req.sampling.seed = seed;
	memset(res, 0, sizeof(*res));
	r = sched_submit(s, &req, &res->id, &e);
	if (r < 0)
		fprintf(stderr, "  submit: %s\n", e.text);
	return r;
}

/* the hot form the working-set runs and their solo references use */
static enum lora_hot_type hot_type;

/* The request alone, its adapter read straight from the blob (no tiers). */
static int solo(const struct model *m, int adapter, uint32_t n_tokens, uint64_t seed,
		struct result *res)
{
	_cleanup_(sched_freep) struct sched *s = NULL;

	ASSERT_OK(sched_new(m,
			    &(struct sched_params){ .max_sequences = 1, .n_threads = 1,
						    .hot_type = hot_type },
			    &s, NULL));
	if (adapter >= 0)
		ASSERT_OK(add_adapter(s, m, adapter, false));
	ASSERT_OK(submit(s, m, adapter, n_tokens, seed, res));
	while (!res->done)
		ASSERT_TRUE(sched_step(s) >= 0);
	return 0;
}

static int same(const struct result *a, const struct result *b, int idx)
{
	if (a->n != b->n || a->error != b->error)
		TEST_FAIL_("request %d: %u tokens (error %d '%s') vs %u alone", idx, a->n, a->error,
			   a->message, b->n);
	for (uint32_t i = 0; i < a->n; i++)
		if (a->ids[i] != b->ids[i] || a->logprobs[i] != b->logprobs[i])
			TEST_FAIL_("request %d step %u: %d %.9g vs %d %.9g alone", idx, i, a->ids[i],
				   a->logprobs[i], b->ids[i], b->logprobs[i]);
	return 0;
}

static size_t blob_bytes(int i)
{
	struct stat st;

	return stat(blob_path[i], &st) == 0 ? (size_t) st.st_size : 0;
}

static void a0_resident(const struct sched_adapter_info *info, void *ud)
{
	if (strcmp(info->name, "a0") == 0)
		*(bool *) ud = info->resident;
}

static int working_set(enum evict_policy pol)
{
	_cleanup_(model_freep) struct model *m = load_model();
	_cleanup_(sched_freep) struct sched *s = NULL;
	enum { N_REQ = 40 };
	static struct result res[N_REQ], alone;
	int adapter_of[N_REQ];
	size_t page_bytes, hot_pages = 0, warm = 0;
	struct sched_stats st;
	uint64_t rng = 0x1234567;
	int submitted = 0, steps = 0;

	if (!m)
		return TEST_SKIP;
	ASSERT_OK(make_blobs(m));
	page_bytes = sched_page_bytes(m);
	/* hot: room for about three of the eight; warm: about half of the blobs */
	for (int i = 0; i < N_ADAPTERS; i++) {
		struct lora_open_opts oo = { .base = m };
		_cleanup_(lora_adapter_freep) struct lora_adapter *a = NULL;

		ASSERT_OK(lora_adapter_open(blob_path[i], &oo, &a, NULL, NULL));
		hot_pages = MAX(hot_pages,
				(size_t) lora_resident_pages_needed(a, hot_type, page_bytes));
		warm += ALIGN_UP(blob_bytes(i), 4096);
	}
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 4, .n_threads = 2,
						       .max_context = 128,
						       .pool_bytes = (3 * hot_pages + 40) * page_bytes,
						       .hot_bytes = 3 * hot_pages * page_bytes,
						       .warm_bytes = warm / 2,
						       .eviction = pol,
						       .hot_type = hot_type,
						       /* GDSF: hot builds on the builder thread,
							* hashing on the hashing thread; LRU: both
							* inline (the defaults for blobs this small) */
						       .build_thread_min_bytes = pol == EVICT_GDSF ? 1 : 0,
						       .loader = { .chunk_bytes = 16384,
								   .queue_depth = 4,
								   .hash_thread_min_bytes =
									   pol == EVICT_GDSF ? 1 : 0 } },
			    &s, NULL));
	for (int i = 0; i < N_ADAPTERS; i++)
		ASSERT_OK(add_adapter(s, m, i, true));
	/* a0 pinned: hot from now to the end, whatever the pressure */
	ASSERT_OK(sched_pin_adapter(s, "a0", true));
	while (submitted < N_REQ || !({
		bool all = true;
		for (int i = 0; i < submitted; i++)
			all = all && res[i].done;
		all;
	})) {
		if (submitted < N_REQ && (rng = rng * 6364136223846793005ull + 1) >> 62 != 0) {
			/* skewed: low ids more often */
			int a = (int) ((rng >> 33) % N_ADAPTERS);

			a = (int) ((rng >> 40) % 2) ? a / 2 : a;
			adapter_of[submitted] = a;
			int r = submit(s, m, a, 4 + (uint32_t) ((rng >> 20) % 12),
				       (uint64_t) submitted, &res[submitted]);
			if (r == 0)
				submitted++;
			else
				ASSERT_ERR(r, -EAGAIN);
		}
		ASSERT_TRUE(sched_step(s) >= 0);
		ASSERT_OK(sched_check_pool(s)); /* hot and warm budgets, every step */
		{
			bool a0_hot = false;

			sched_foreach_adapter(s, a0_resident, &a0_hot);
			ASSERT_TRUE(a0_hot);
		}
		steps++;
		ASSERT_TRUE(steps < 200000);
	}
	sched_get_stats(s, &st);
	printf("  %s: %d steps; hot %llu hits %llu misses, %llu evictions, %llu promotions; "
	       "warm %llu hits %llu misses %llu evictions, %llu loads (%s, %llu bytes), "
	       "hash %s; budgets hot %llu warm %llu\n",
	       evict_policy_name(pol), steps, (unsigned long long) st.hot_hits,
	       (unsigned long long) st.hot_misses, (unsigned long long) st.adapter_evictions,
	       (unsigned long long) st.promotions, (unsigned long long) st.tiers.hits,
	       (unsigned long long) st.tiers.misses, (unsigned long long) st.tiers.evictions,
	       (unsigned long long) st.tiers.loads, blob_path_name(st.tiers.last_path),
	       (unsigned long long) (st.tiers.bytes_read[BLOB_PATH_URING] +
				     st.tiers.bytes_read[BLOB_PATH_URING_BUFFERED] +
				     st.tiers.bytes_read[BLOB_PATH_PREAD]),
	       st.tiers.hash_impl, (unsigned long long) st.hot_budget_bytes,
	       (unsigned long long) st.tiers.warm_budget);
	ASSERT_TRUE(st.adapter_evictions > 0);
	ASSERT_TRUE(st.tiers.evictions > 0);
	ASSERT_TRUE(st.tiers.loads > N_ADAPTERS / 2);
	for (int i = 0; i < N_REQ; i++) {
		ASSERT_OK(solo(m, adapter_of[i], res[i].n ? res[i].n : 1, (uint64_t) i, &alone));
		if (same(&res[i], &alone, i))
			return 1;
	}
	return 0;
}

TEST(working_set_larger_than_hot_gdsf)
{
	return working_set(EVICT_GDSF);
}

TEST(working_set_larger_than_hot_lru)
{
	return working_set(EVICT_LRU);
}

/* [Adapters] HotType=q8_0: the same, each output equal to its solo run's with Q8_0 too */
TEST(working_set_larger_than_hot_q8_0)
{
	int r;

	hot_type = LORA_HOT_Q8_0;
	r = working_set(EVICT_GDSF);
	hot_type = LORA_HOT_STORED;
	return r;
}

TEST(cold_adapter_waits_alone)
{
	_cleanup_(model_freep) struct model *m = load_model();
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct result hot1, none, cold, alone;
	struct sched_stats st;

	if (!m)
		return TEST_SKIP;
	ASSERT_OK(make_blobs(m));
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 4, .n_threads = 2,
						       .max_context = 128,
						       .build_thread_min_bytes = 1 },
			    &s, NULL));
	ASSERT_OK(add_adapter(s, m, 1, true));
	ASSERT_OK(add_adapter(s, m, 2, true));
	ASSERT_OK(sched_pin_adapter(s, "a1", true)); /* hot */
	sched_test_hold_loads(s, true);
	ASSERT_OK(submit(s, m, 2, 8, 5, &cold));
	ASSERT_OK(submit(s, m, 1, 16, 6, &hot1));
	ASSERT_OK(submit(s, m, -1, 16, 7, &none));
	/* with loads held, the cold request cannot start: the others run to the end */
	while (!hot1.done || !none.done) {
		ASSERT_TRUE(sched_step(s) >= 0);
		ASSERT_EQ(cold.n, 0);
	}
	ASSERT_EQ(hot1.n, 16);
	ASSERT_EQ(none.n, 16);
	ASSERT_TRUE(!cold.done);
	sched_test_hold_loads(s, false);
	ASSERT_TRUE(TEST_WAIT_UNTIL((sched_step(s), cold.done)));
	ASSERT_OK(solo(m, 2, 8, 5, &alone));
	if (same(&cold, &alone, 0))
		return 1;
	sched_get_stats(s, &st);
	ASSERT_TRUE(st.promotions >= 2);
	{
		uint64_t n = 0;

		for (int b = 0; b < SCHED_PROMOTE_BUCKETS; b++)
			n += st.promote_hist[b];
		ASSERT_TRUE(n >= 1); /* the cold request's wait was observed */
	}
	return 0;
}

static int bad_calls;
static char bad_name[128];

static void on_bad(const char *name, int error, const char *message, void *userdata)
{
	(void) userdata;
	__atomic_add_fetch(&bad_calls, 1, __ATOMIC_SEQ_CST);
	snprintf(bad_name, sizeof(bad_name), "%s %d %s", name, error, message);
}

TEST(blob_changed_on_disk_is_bad_alone)
{
	_cleanup_(model_freep) struct model *m = load_model();
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct result bad, good, again, alone;
	char copy[320];
	int in, out;
	char buf[65536];
	ssize_t k;
	uint8_t x;

	if (!m)
		return TEST_SKIP;
	ASSERT_OK(make_blobs(m));
	/* a private copy of blob 3, then one byte of its weights flipped */
	snprintf(copy, sizeof(copy), "%s/changed.molly", dir_);
	in = open(blob_path[3], O_RDONLY | O_CLOEXEC);
	out = open(copy, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ASSERT_TRUE(in >= 0 && out >= 0);
	while ((k = read(in, buf, sizeof(buf))) > 0)
		ASSERT_TRUE(write(out, buf, (size_t) k) == k);
	close(in);
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 4, .n_threads = 2,
						       .max_context = 128, .on_adapter_bad = on_bad },
			    &s, NULL));
	{
		struct lora_open_opts oo = { .base = m, .name = "a3" };
		struct lora_adapter *a = NULL;

		ASSERT_OK(lora_adapter_open(copy, &oo, &a, NULL, NULL));
		ASSERT_OK(sched_add_adapter(s, a, NULL));
		ASSERT_OK(sched_set_adapter_source(s, "a3", copy, blob_sha[3]));
	}
	ASSERT_OK(add_adapter(s, m, 4, true));
	/* behind the daemon's back: the last byte of the file changes */
	{
		struct stat st;

		ASSERT_OK(fstat(out, &st));
		ASSERT_TRUE(pread(out, &x, 1, st.st_size - 1) == 1);
		x ^= 0xff;
		ASSERT_TRUE(pwrite(out, &x, 1, st.st_size - 1) == 1);
		close(out);
	}
	ASSERT_OK(submit(s, m, 3, 8, 1, &bad));
	ASSERT_OK(submit(s, m, 4, 8, 2, &good));
	ASSERT_TRUE(TEST_WAIT_UNTIL((sched_step(s), bad.done && good.done)));
	printf("  bad: %d '%s'\n", bad.error, bad.message);
	ASSERT_ERR(bad.error, -EBADMSG);
	ASSERT_TRUE(strstr(bad.message, "corrupt") && strstr(bad.message, "a3"));
	ASSERT_EQ(good.error, 0);
	ASSERT_OK(solo(m, 4, 8, 2, &alone));
	if (same(&good, &alone, 0))
		return 1;
	ASSERT_TRUE(TEST_WAIT_UNTIL(__atomic_load_n(&bad_calls, __ATOMIC_SEQ_CST) == 1));
	ASSERT_TRUE(strstr(bad_name, "a3 -74") != NULL);
	/* marked bad: the next request fails at once, without another read */
	ASSERT_OK(submit(s, m, 3, 8, 1, &again));
	ASSERT_TRUE(TEST_WAIT_UNTIL((sched_step(s), again.done)));
	ASSERT_ERR(again.error, -EBADMSG);
	ASSERT_EQ(bad_calls, 1);
	unlink(copy);
	return 0;
}

static void get_tier(const struct sched_adapter_info *info, void *ud)
{
	if (strcmp(info->name, "a5") == 0)
		*(const char **) ud = info->tier;
}

TEST(prefetch_makes_hot_without_a_request)
{
	_cleanup_(model_freep) struct model *m = load_model();
	_cleanup_(sched_freep) struct sched *s = NULL;
	const char *tier = NULL;

	if (!m)
		return TEST_SKIP;
	ASSERT_OK(make_blobs(m));
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 2, .n_threads = 1,
						       .max_context = 64 },
			    &s, NULL));
	ASSERT_OK(add_adapter(s, m, 5, true));
	sched_foreach_adapter(s, get_tier, &tier);
	ASSERT_STREQ(tier, "cold");
	ASSERT_OK(sched_start(s));
	ASSERT_OK(sched_prefetch_adapter(s, "a5"));
	ASSERT_TRUE(TEST_WAIT_UNTIL(({
		sched_foreach_adapter(s, get_tier, &tier);
		strcmp(tier, "hot") == 0;
	})));
	return 0;
}

/* An adapter bigger than the hot budget: its request ends with -E2BIG (it used to read the
 * freed request), the next request runs. */
TEST(adapter_larger_than_hot_budget_fails_alone)
{
	_cleanup_(model_freep) struct model *m = load_model();
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct result big, none;

	if (!m)
		return TEST_SKIP;
	ASSERT_OK(make_blobs(m));
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 2, .n_threads = 1,
						       .max_context = 64,
						       .hot_bytes = sched_page_bytes(m) },
			    &s, NULL));
	ASSERT_OK(add_adapter(s, m, 1, true)); /* rank 16: several pages */
	ASSERT_OK(submit(s, m, 1, 4, 1, &big));
	ASSERT_OK(submit(s, m, -1, 4, 2, &none));
	ASSERT_TRUE(TEST_WAIT_UNTIL((sched_step(s), big.done && none.done)));
	ASSERT_ERR(big.error, -E2BIG);
	ASSERT_EQ(none.error, 0);
	ASSERT_EQ(none.n, 4);
	return 0;
}

/* Freeing the scheduler while a request waits for a cold adapter (its load held): the request
 * ends CANCELLED, nothing is touched after the tiers are gone. */
TEST(free_while_waiting_for_a_load)
{
	_cleanup_(model_freep) struct model *m = load_model();
	struct sched *s = NULL;
	struct result r1;

	if (!m)
		return TEST_SKIP;
	ASSERT_OK(make_blobs(m));
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 2, .n_threads = 1,
						       .max_context = 64 },
			    &s, NULL));
	ASSERT_OK(add_adapter(s, m, 6, true));
	sched_test_hold_loads(s, true);
	ASSERT_OK(submit(s, m, 6, 4, 1, &r1));
	ASSERT_TRUE(sched_step(s) >= 0); /* asks for the blob: it now needs it warm */
	ASSERT_TRUE(!r1.done);
	sched_free(s);
	ASSERT_TRUE(r1.done);
	ASSERT_EQ(r1.error, 0);
	ASSERT_EQ(r1.n, 0);
	return 0;
}

static void get_tier_a2(const struct sched_adapter_info *info, void *ud)
{
	if (strcmp(info->name, "a2") == 0)
		*(const char **) ud = info->tier;
}

/* A warm adapter's hot build runs on the builder thread: with builds held, requests on other
 * adapters run to the end while the one that needs the build has no token; then it completes
 * with its solo output. */
TEST(hot_build_waits_alone)
{
	_cleanup_(model_freep) struct model *m = load_model();
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct result building, none, alone;
	const char *tier = NULL;

	if (!m)
		return TEST_SKIP;
	ASSERT_OK(make_blobs(m));
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 4, .n_threads = 2,
						       .max_context = 128,
						       .build_thread_min_bytes = 1 },
			    &s, NULL));
	ASSERT_OK(add_adapter(s, m, 2, true));
	sched_test_hold_builds(s, true);
	ASSERT_OK(submit(s, m, 2, 8, 3, &building));
	ASSERT_OK(submit(s, m, -1, 16, 4, &none));
	/* the blob is read (warm), its build waits */
	ASSERT_TRUE(TEST_WAIT_UNTIL(({
		sched_step(s);
		sched_foreach_adapter(s, get_tier_a2, &tier);
		strcmp(tier, "warm") == 0;
	})));
	while (!none.done) {
		ASSERT_TRUE(sched_step(s) >= 0);
		ASSERT_EQ(building.n, 0);
	}
	ASSERT_EQ(none.n, 16);
	ASSERT_TRUE(!building.done);
	ASSERT_OK(sched_check_pool(s)); /* the reserved pages count as adapter pages */
	sched_test_hold_builds(s, false);
	ASSERT_TRUE(TEST_WAIT_UNTIL((sched_step(s), building.done)));
	ASSERT_OK(solo(m, 2, 8, 3, &alone));
	return same(&building, &alone, 0);
}

/* A blob bigger than the whole warm tier is not refused: the adapter is read from its file
 * into the pool as before the tiers, and its output is the solo one. */
TEST(blob_larger_than_warm_tier_is_read_directly)
{
	_cleanup_(model_freep) struct model *m = load_model();
	_cleanup_(sched_freep) struct sched *s = NULL;
	struct result big, alone;
	const char *tier = NULL;

	if (!m)
		return TEST_SKIP;
	ASSERT_OK(make_blobs(m));
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 2, .n_threads = 1,
						       .max_context = 64, .warm_bytes = 4096 },
			    &s, NULL));
	ASSERT_OK(add_adapter(s, m, 2, true));
	ASSERT_OK(submit(s, m, 2, 6, 9, &big));
	ASSERT_TRUE(TEST_WAIT_UNTIL((sched_step(s), big.done)));
	ASSERT_EQ(big.error, 0);
	sched_foreach_adapter(s, get_tier_a2, &tier);
	ASSERT_STREQ(tier, "hot");
	ASSERT_OK(solo(m, 2, 6, 9, &alone));
	return same(&big, &alone, 0);
}

/*
 * One request on two cold adapters whose blobs fit the warm tier one at a time but not
 * together: the first copy is made hot and let go before the second is read, so the request
 * runs (no wait for room that only its own adapter holds), and its output equals the same
 * request with both adapters read straight from their blobs.
 */
static int run_two(struct sched *s, const struct model *m, struct result *res)
{
	static const char prompt[] = "Once upon a time";
	int32_t ids[64];
	int64_t n = vocab_tokenize(m->vocab, prompt, strlen(prompt), true, false, ids, 64);
	struct sched_lora loras[2] = { { "a1", 1.0f }, { "a4", 0.5f } };
	struct sched_request req = { .prompt = ids, .n_prompt = (size_t) n, .max_tokens = 8,
				     .loras = loras, .n_loras = 2, .on_event = on_event,
				     .userdata = res, .ignore_eos = true };
	struct errmsg e = { { 0 } };

	sampler_params_default(&req.sampling);
	req.sampling.temperature = 0.0f;
	memset(res, 0, sizeof(*res));
	if (sched_submit(s, &req, &res->id, &e) < 0)
		TEST_FAIL_("submit: %s", e.text);
	ASSERT_TRUE(TEST_WAIT_UNTIL((sched_step(s), res->done)));
	if (res->error)
		TEST_FAIL_("two adapters: %s", res->message);
	return 0;
}

TEST(two_adapters_wider_than_warm_tier_together)
{
	_cleanup_(model_freep) struct model *m = load_model();
	_cleanup_(sched_freep) struct sched *s = NULL, *direct = NULL;
	struct result two, ref;
	size_t warm;

	if (!m)
		return TEST_SKIP;
	ASSERT_OK(make_blobs(m));
	/* a1 and a4 are rank 16: room for one copy, not two */
	warm = MAX(ALIGN_UP(blob_bytes(1), 4096), ALIGN_UP(blob_bytes(4), 4096)) + 4096;
	ASSERT_TRUE(warm < ALIGN_UP(blob_bytes(1), 4096) + ALIGN_UP(blob_bytes(4), 4096));
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 2, .n_threads = 2,
						       .max_context = 128, .warm_bytes = warm },
			    &s, NULL));
	ASSERT_OK(add_adapter(s, m, 1, true));
	ASSERT_OK(add_adapter(s, m, 4, true));
	if (run_two(s, m, &two))
		return 1;
	ASSERT_OK(sched_new(m, &(struct sched_params){ .max_sequences = 1, .n_threads = 1 },
			    &direct, NULL));
	ASSERT_OK(add_adapter(direct, m, 1, false));
	ASSERT_OK(add_adapter(direct, m, 4, false));
	if (run_two(direct, m, &ref))
		return 1;
	return same(&two, &ref, 0);
}
