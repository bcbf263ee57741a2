/* SPDX-License-Identifier: MIT */
/*
 * matcher.c: parse stacks, advancing by code points, and the trie walk behind the mask
 * (see matcher.h).
 *
 * Stacks are persistent linked lists in an arena (a node: the next element to match and the
 * node below it), so advancing shares the untouched part of every stack. Each node carries a
 * hash of its whole chain: equal stacks met twice in one advance are expanded once, which
 * keeps ambiguous grammars (nullable repetitions) polynomial. The committed state's nodes are
 * copied into a fresh arena after every accepted token; the mask's trie walk allocates past
 * them and rewinds as it backtracks.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "basic/array.h"
#include "engine/vocab.h"
#include "grammar/matcher.h"

#define NONE UINT32_MAX /* the empty stack, or no node */

struct trie_node {
	uint32_t first_child;
	uint32_t next_sibling;
	int32_t token; /* a token whose bytes end here, -1 none; more in same_next[] */
	uint8_t byte;
};

/*
 * The walks every matcher of a vocabulary has made, by grammar (its content hash) and state:
 * the sequences of a batch that share a schema meet the same states (inside a string, after
 * a key), and a first visit walks the whole trie (~10 ms for a 32k vocabulary) on the
 * scheduler's thread, so one sequence's walk serves the others. A matcher copies an entry
 * into its own cache (matcher.cache) under the lock and uses its copy, so an entry may be
 * replaced at any time. Bounded to SHARED_BYTES of walks (at least SHARED_MIN entries).
 */
#define SHARED_BYTES (16u << 20)
#define SHARED_MIN   8

struct shared_entry {
	uint8_t grammar[32];
	uint32_t *key; /* owned: state_key() */
	uint32_t n_key;
	uint64_t hash;
	uint16_t *minb; /* owned [n_tokens] */
	uint64_t used;
};

struct shared_walks {
	pthread_mutex_t lock;
	struct shared_entry *e; /* owned [n] */
	uint32_t n;
	uint64_t clock;
	uint64_t hits, misses; /* tests, benchmarks */
};

struct grammar_vocab {
	uint32_t n_tokens;
	struct shared_walks *shared; /* owned; mutable although the table is not */
	char **piece;          /* owned [n_tokens], NULL for never-offered tokens */
	uint32_t *piece_len;   /* owned */
	struct trie_node *trie; /* owned: node 0 is the root */
	uint32_t n_trie, cap_trie;
	int32_t *same_next;    /* owned [n_tokens]: next token with the same bytes, -1 */
};

#define MATCHER_CACHE 8
#define MINB_NONE     UINT16_MAX       /* not allowed */
#define MINB_MAX      (UINT16_MAX - 1) /* at least this many bytes to complete */

struct mask_entry {
	uint32_t *key;  /* owned: state_key() */
	uint32_t n_key;
	uint64_t hash;
	uint16_t *minb; /* owned [n_tokens]: fewest bytes to complete after each token */
	uint64_t used;
};

struct node {
	uint32_t elem;
	uint32_t parent;
	uint64_t hash;
};

struct matcher {
	struct grammar *g; /* owned reference */
	const struct grammar_vocab *tv; /* borrowed */
	const struct grammar_elem *elems;
	struct node *nodes; /* arena */
	uint32_t n_nodes, cap_nodes;
	uint32_t *set;      /* committed state: set[0 .. n_set) */
	uint32_t n_set;
	uint32_t part_cp;   /* an unfinished UTF-8 character: its bits so far */
	uint8_t part_left;  /* continuation bytes still expected (0: none) */
	uint8_t part_len;   /* its length in bytes */
	/* scratch */
	uint32_t *buf;      /* sets of the walk, stacked */
	uint32_t n_buf, cap_buf;
	uint32_t *work;
	uint32_t n_work, cap_work;
	uint32_t *seen;     /* open addressing over node ids (NONE empty) for one advance */
	uint32_t cap_seen, n_seen;
	bool seen_empty;    /* the empty stack was met in this advance */
	bool too_many;
	/* the walks of recent states: inside a long string, or any loop, the state after a
	 * token is one seen before, and its mask is a lookup */
	struct mask_entry cache[MATCHER_CACHE];
	uint64_t clock;
};

/* ---- token table ---- */

struct grammar_vocab *grammar_vocab_free(struct grammar_vocab *tv)
{
	if (!tv)
		return NULL;
	for (uint32_t i = 0; tv->piece && i < tv->n_tokens; i++)
		free(tv->piece[i]);
	free(tv->piece);
	free(tv->piece_len);
	free(tv->trie);
	free(tv->same_next);
	if (tv->shared) {
		for (uint32_t i = 0; i < tv->shared->n; i++) {
			free(tv->shared->e[i].key);
			free(tv->shared->e[i].minb);
		}
		free(tv->shared->e);
		pthread_mutex_destroy(&tv->shared->lock);
		free(tv->shared);
	}
	free(tv);
	return NULL;
}

uint32_t grammar_vocab_n_tokens(const struct grammar_vocab *tv)
{
	return tv->n_tokens;
}

static int trie_insert(struct grammar_vocab *tv, const char *s, uint32_t n, int32_t token)
{
	uint32_t at = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint8_t b = (uint8_t) s[i];
		uint32_t c = tv->trie[at].first_child, prev = NONE;

		while (c != NONE && tv->trie[c].byte < b)
			prev = c, c = tv->trie[c].next_sibling;
		if (c == NONE || tv->trie[c].byte != b) {
			uint32_t k = tv->n_trie;

			if (ARRAY_RESERVE(tv->trie, tv->cap_trie, (uint64_t) k + 1, 64) < 0)
				return -ENOMEM;
			tv->trie[k] = (struct trie_node){ .first_child = NONE, .next_sibling = c,
							  .token = -1, .byte = b };
			if (prev == NONE)
				tv->trie[at].first_child = k;
			else
				tv->trie[prev].next_sibling = k;
			tv->n_trie++;
			c = k;
		}
		at = c;
	}
	tv->same_next[token] = tv->trie[at].token;
	tv->trie[at].token = token;
	return 0;
}

static int vocab_table_new(uint32_t n_tokens, struct grammar_vocab **ret)
{
	_cleanup_(grammar_vocab_freep) struct grammar_vocab *tv = calloc(1, sizeof(*tv));

	if (!tv)
		return -ENOMEM;
	tv->n_tokens = n_tokens;
	tv->shared = calloc(1, sizeof(*tv->shared));
	if (!tv->shared)
		return -ENOMEM;
	tv->shared->n = MAX((uint32_t) (SHARED_BYTES / (sizeof(uint16_t) * MAX(n_tokens, 1u))),
			    (uint32_t) SHARED_MIN);
	tv->shared->e = calloc(tv->shared->n, sizeof(*tv->shared->e));
	if (!tv->shared->e) {
		free(tv->shared);
		tv->shared = NULL;
		return -ENOMEM;
	}
	pthread_mutex_init(&tv->shared->lock, NULL);
	tv->piece = calloc(n_tokens, sizeof(*tv->piece));
	tv->piece_len = calloc(n_tokens, sizeof(*tv->piece_len));
	tv->same_next = malloc(sizeof(*tv->same_next) * n_tokens);
	if (!tv->piece || !tv->piece_len || !tv->same_next)
		return -ENOMEM;
	if (ARRAY_RESERVE(tv->trie, tv->cap_trie, 1, 64) < 0)
		return -ENOMEM;
	tv->trie[0] = (struct trie_node){ .first_child = NONE, .next_sibling = NONE, .token = -1 };
	tv->n_trie = 1;
	*ret = TAKE_PTR(tv);
	return 0;
}

static int vocab_table_add(struct grammar_vocab *tv, uint32_t id, const char *s, size_t n)
{
	if (n == 0 || n > 4096)
		return 0; /* never offered: it would not advance the text */
	tv->piece[id] = malloc(n);
	if (!tv->piece[id])
		return -ENOMEM;
	memcpy(tv->piece[id], s, n);
	tv->piece_len[id] = (uint32_t) n;
	return trie_insert(tv, s, (uint32_t) n, (int32_t) id);
}

int grammar_vocab_new(const struct vocab *v, struct grammar_vocab **ret)
{
	_cleanup_(grammar_vocab_freep) struct grammar_vocab *tv = NULL;
	uint32_t n = vocab_n_tokens(v);
	char buf[512];
	int k;

	k = vocab_table_new(n, &tv);
	if (k < 0)
		return k;
	for (uint32_t i = 0; i < n; i++) {
		int64_t len;

		if (vocab_is_control(v, (int32_t) i) || vocab_is_eog(v, (int32_t) i))
			continue;
		len = vocab_token_to_piece(v, (int32_t) i, false, buf, sizeof(buf));
		if (len < 0 || (size_t) len > sizeof(buf))
			continue;
		k = vocab_table_add(tv, i, buf, (size_t) len);
		if (k < 0)
			return k;
	}
	*ret = TAKE_PTR(tv);
	return 0;
}

int grammar_vocab_new_pieces(const char *const *piece, const size_t *len, uint32_t n_tokens,
			     struct grammar_vocab **ret)
{
	_cleanup_(grammar_vocab_freep) struct grammar_vocab *tv = NULL;
	int k;

	k = vocab_table_new(n_tokens, &tv);
	if (k < 0)
		return k;
	for (uint32_t i = 0; i < n_tokens; i++) {
		k = piece[i] ? vocab_table_add(tv, i, piece[i], len[i]) : 0;
		if (k < 0)
			return k;
	}
	*ret = TAKE_PTR(tv);
	return 0;
}

/* ---- stacks ---- */

static uint64_t mix(uint64_t h, uint32_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	h *= 0xff51afd7ed558ccdull;
	return h ^ (h >> 33);
}

static int push(struct matcher *m, uint32_t elem, uint32_t parent, uint32_t *ret)
{
	if (ARRAY_RESERVE(m->nodes, m->cap_nodes, (uint64_t) m->n_nodes + 1, 64) < 0)
		return -ENOMEM;
	m->nodes[m->n_nodes] = (struct node){
		.elem = elem, .parent = parent,
		.hash = mix(parent == NONE ? 0x1234567 : m->nodes[parent].hash, elem)
	};
	*ret = m->n_nodes++;
	return 0;
}

static bool stacks_equal(const struct matcher *m, uint32_t a, uint32_t b)
{
	while (a != NONE && b != NONE) {
		if (a == b)
			return true;
		if (m->nodes[a].elem != m->nodes[b].elem || m->nodes[a].hash != m->nodes[b].hash)
			return false;
		a = m->nodes[a].parent, b = m->nodes[b].parent;
	}
	return a == b;
}

static void seen_clear(struct matcher *m)
{
	if (m->n_seen)
		memset(m->seen, 0xff, sizeof(*m->seen) * m->cap_seen);
	m->n_seen = 0;
	m->seen_empty = false;
}

/* true if an equal stack was already met in this advance; else records it */
static int seen_add(struct matcher *m, uint32_t st, bool *ret_seen)
{
	uint32_t slot;

	if (st == NONE) {
		*ret_seen = m->seen_empty;
		m->seen_empty = true;
		return 0;
	}
	if (2 * (m->n_seen + 1) > m->cap_seen) {
		uint32_t cap = m->cap_seen ? m->cap_seen * 2 : 64, *t = malloc(sizeof(*t) * cap);

		if (!t)
			return -ENOMEM;
		memset(t, 0xff, sizeof(*t) * cap);
		for (uint32_t i = 0; i < m->cap_seen; i++) {
			uint32_t k = m->seen[i];

			if (k == NONE)
				continue;
			slot = (uint32_t) m->nodes[k].hash & (cap - 1);
			while (t[slot] != NONE)
				slot = (slot + 1) & (cap - 1);
			t[slot] = k;
		}
		free(m->seen);
		m->seen = t;
		m->cap_seen = cap;
	}
	for (slot = (uint32_t) m->nodes[st].hash & (m->cap_seen - 1); m->seen[slot] != NONE;
	     slot = (slot + 1) & (m->cap_seen - 1))
		if (stacks_equal(m, m->seen[slot], st)) {
			*ret_seen = true;
			return 0;
		}
	m->seen[slot] = st;
	m->n_seen++;
	*ret_seen = false;
	return 0;
}

static int buf_add(struct matcher *m, uint32_t st)
{
	if (ARRAY_RESERVE(m->buf, m->cap_buf, (uint64_t) m->n_buf + 1, 64) < 0)
		return -ENOMEM;
	m->buf[m->n_buf++] = st;
	return 0;
}

static int work_add(struct matcher *m, uint32_t st)
{
	if (ARRAY_RESERVE(m->work, m->cap_work, (uint64_t) m->n_work + 1, 64) < 0)
		return -ENOMEM;
	m->work[m->n_work++] = st;
	return 0;
}

/* Expands the stacks on the work list until every top is a character element (or the stack is
 * empty), appending each distinct result to buf. */
static int expand(struct matcher *m, uint32_t *n_out)
{
	const struct grammar_elem *E = m->elems;
	int k;

	while (m->n_work) {
		uint32_t st = m->work[--m->n_work], rest, n_alts;
		const uint32_t *alts;
		bool seen;

		k = seen_add(m, st, &seen);
		if (k < 0)
			return k;
		if (seen)
			continue;
		if (st == NONE || E[m->nodes[st].elem].type == GRAMMAR_CHAR) {
			if (++*n_out > MATCHER_MAX_STACKS) {
				m->too_many = true;
				return -E2BIG;
			}
			k = buf_add(m, st);
			if (k < 0)
				return k;
			continue;
		}
		/* a rule reference: its alternatives on top of what follows it */
		rest = m->nodes[st].parent;
		if (E[m->nodes[st].elem + 1].type != GRAMMAR_END) {
			k = push(m, m->nodes[st].elem + 1, rest, &rest);
			if (k < 0)
				return k;
		}
		alts = grammar_alts(m->g, E[m->nodes[st].elem].value, &n_alts);
		for (uint32_t a = 0; a < n_alts; a++) {
			uint32_t top = rest;

			if (E[alts[a]].type != GRAMMAR_END) {
				k = push(m, alts[a], rest, &top);
				if (k < 0)
					return k;
			}
			k = work_add(m, top);
			if (k < 0)
				return k;
		}
	}
	return 0;
}

/* Advances the set buf[from .. from+n) by code point cp, appending the result to buf; the
 * result's size in *ret_n. */
static int advance(struct matcher *m, uint32_t from, uint32_t n, uint32_t cp, uint32_t *ret_n)
{
	const struct grammar_elem *E = m->elems;
	uint32_t n_out = 0;
	int k;

	seen_clear(m);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t st = m->buf[from + i], rest;

		if (st == NONE || !grammar_char_match(m->g, &E[m->nodes[st].elem], cp))
			continue;
		rest = m->nodes[st].parent;
		if (E[m->nodes[st].elem + 1].type != GRAMMAR_END) {
			k = push(m, m->nodes[st].elem + 1, rest, &rest);
			if (k < 0)
				return k;
		}
		k = work_add(m, rest);
		if (k >= 0)
			k = expand(m, &n_out);
		if (k < 0) {
			m->n_work = 0;
			return k;
		}
	}
	*ret_n = n_out;
	return 0;
}

/* Could some stack's top take a code point in [lo, hi]? (An unfinished UTF-8 character.) */
static bool partial_plausible(const struct matcher *m, uint32_t from, uint32_t n, uint32_t lo,
			      uint32_t hi)
{
	const struct grammar_range *R = grammar_ranges(m->g);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t st = m->buf[from + i];
		const struct grammar_elem *el;

		if (st == NONE)
			continue;
		el = &m->elems[m->nodes[st].elem];
		if (el->negate)
			return true;
		for (uint32_t j = 0; j < el->n; j++)
			if (R[el->value + j].lo <= hi && R[el->value + j].hi >= lo)
				return true;
	}
	return false;
}

struct walk {
	uint32_t from, n;   /* the set in buf */
	uint32_t part_cp;
	uint8_t part_left;
	uint8_t part_len; /* bytes of the unfinished character in all */
};

/* Feeds one byte: *w becomes the state after it. false when nothing survives. */
static int feed_byte(struct matcher *m, struct walk *w, uint8_t b, bool *ret_alive)
{
	uint32_t cp, n_out;
	int k;

	*ret_alive = false;
	if (w->part_left == 0) {
		uint8_t left;

		if (b < 0x80) {
			cp = b;
			goto complete;
		}
		if (b >= 0xC2 && b <= 0xDF)
			cp = b & 0x1F, left = 1;
		else if (b >= 0xE0 && b <= 0xEF)
			cp = b & 0x0F, left = 2;
		else if (b >= 0xF0 && b <= 0xF4)
			cp = b & 0x07, left = 3;
		else
			return 0;
		w->part_cp = cp, w->part_left = left, w->part_len = left + 1;
	} else {
		if ((b & 0xC0) != 0x80)
			return 0;
		w->part_cp = (w->part_cp << 6) | (b & 0x3F);
		if (--w->part_left == 0) {
			static const uint32_t min_len_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };

			cp = w->part_cp;
			if (cp < min_len_cp[w->part_len] || (cp >= 0xD800 && cp <= 0xDFFF) ||
			    cp > 0x10FFFF)
				return 0; /* overlong, a surrogate, or beyond Unicode */
			goto complete;
		}
	}
	{
		static const uint32_t min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
		uint32_t shift = 6u * w->part_left, lo = w->part_cp << shift,
			 hi = lo | ((1u << shift) - 1);

		lo = MAX(lo, min_cp[w->part_len]); /* overlong forms are not UTF-8 */
		hi = MIN(hi, 0x10FFFFu);
		if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF))
			return 0; /* no character can complete these bytes */
		*ret_alive = partial_plausible(m, w->from, w->n, lo, hi);
		return 0;
	}
complete:
	w->part_cp = 0, w->part_left = 0, w->part_len = 0;
	{
		uint32_t from = m->n_buf;

		k = advance(m, w->from, w->n, cp, &n_out);
		if (k < 0)
			return k;
		w->from = from, w->n = n_out;
		*ret_alive = n_out > 0;
		return 0;
	}
}

static uint32_t set_min_bytes(const struct matcher *m, const struct walk *w)
{
	uint32_t best = GRAMMAR_MIN_INF;

	for (uint32_t i = 0; i < w->n; i++) {
		uint64_t sum = 0;

		for (uint32_t st = m->buf[w->from + i]; st != NONE; st = m->nodes[st].parent) {
			uint32_t v = grammar_min_bytes(m->g, m->nodes[st].elem);

			if (v == GRAMMAR_MIN_INF) {
				sum = GRAMMAR_MIN_INF;
				break;
			}
			sum += v;
		}
		if (sum < best)
			best = (uint32_t) sum;
	}
	return best == GRAMMAR_MIN_INF ? best : best + w->part_left;
}

/* ---- the matcher ---- */

struct matcher *matcher_free(struct matcher *m)
{
	if (!m)
		return NULL;
	grammar_unref(m->g);
	for (uint32_t i = 0; i < MATCHER_CACHE; i++) {
		free(m->cache[i].key);
		free(m->cache[i].minb);
	}
	free(m->nodes);
	free(m->set);
	free(m->buf);
	free(m->work);
	free(m->seen);
	free(m);
	return NULL;
}

/* Makes buf[from .. from+n) the committed state, copying its stacks into a fresh arena. */
static int commit(struct matcher *m, uint32_t from, uint32_t n, const struct walk *w)
{
	struct node *old = m->nodes;
	uint32_t n_old = m->n_nodes, *set, *chain = NULL, cap_chain = 0;
	int k = 0;

	(void) n_old;
	set = malloc(sizeof(*set) * (n ? n : 1));
	if (!set)
		return -ENOMEM;
	m->nodes = NULL, m->n_nodes = 0, m->cap_nodes = 0;
	for (uint32_t i = 0; i < n && k >= 0; i++) {
		uint32_t depth = 0, top = NONE;

		for (uint32_t st = m->buf[from + i]; st != NONE; st = old[st].parent) {
			k = ARRAY_RESERVE(chain, cap_chain, (uint64_t) depth + 1, 64);
			if (k < 0)
				break;
			chain[depth++] = old[st].elem;
		}
		while (k >= 0 && depth > 0)
			k = push(m, chain[--depth], top, &top);
		set[i] = top;
	}
	free(chain);
	free(old);
	if (k < 0) {
		free(set);
		return k;
	}
	free(m->set);
	m->set = set;
	m->n_set = n;
	m->part_cp = w ? w->part_cp : 0;
	m->part_left = w ? w->part_left : 0;
	m->part_len = w ? w->part_len : 0;
	return 0;
}

int matcher_new(struct grammar *g, const struct grammar_vocab *tv, struct matcher **ret)
{
	_cleanup_(matcher_freep) struct matcher *m = NULL;
	const uint32_t *alts;
	uint32_t n_alts, n_out = 0;
	int k;

	assert_return(g && ret, -EINVAL);
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->g = grammar_ref(g);
	m->tv = tv;
	m->elems = grammar_elems(g, NULL);
	seen_clear(m);
	alts = grammar_alts(g, grammar_root(g), &n_alts);
	for (uint32_t a = 0; a < n_alts; a++) {
		uint32_t top = NONE;

		if (m->elems[alts[a]].type != GRAMMAR_END) {
			k = push(m, alts[a], NONE, &top);
			if (k < 0)
				return k;
		}
		k = work_add(m, top);
		if (k < 0)
			return k;
	}
	k = expand(m, &n_out);
	if (k < 0)
		return k;
	k = commit(m, 0, n_out, NULL);
	if (k < 0)
		return k;
	m->n_buf = 0;
	*ret = TAKE_PTR(m);
	return 0;
}

/* Loads the committed state into buf (as the walk's start). */
static int load_state(struct matcher *m, struct walk *w)
{
	m->n_buf = 0;
	for (uint32_t i = 0; i < m->n_set; i++) {
		int k = buf_add(m, m->set[i]);

		if (k < 0)
			return k;
	}
	*w = (struct walk){ .from = 0, .n = m->n_set, .part_cp = m->part_cp,
			    .part_left = m->part_left, .part_len = m->part_len };
	return 0;
}

/* Feeds s[0..n) from the committed state; commits when it is allowed and (tokens_left not
 * UINT32_MAX) the shortest completion after it fits in tokens_left - 1 bytes. */
static int accept_within(struct matcher *m, const char *s, size_t n, uint32_t tokens_left)
{
	uint32_t nodes_mark = m->n_nodes;
	struct walk w;
	int k;

	k = load_state(m, &w);
	if (k < 0)
		return k;
	for (size_t i = 0; i < n; i++) {
		bool alive;

		k = feed_byte(m, &w, (uint8_t) s[i], &alive);
		if (k < 0 || !alive)
			goto refuse;
	}
	if (tokens_left != UINT32_MAX && set_min_bytes(m, &w) > tokens_left - 1) {
		k = 0;
		goto refuse;
	}
	k = commit(m, w.from, w.n, &w);
	m->n_buf = 0;
	return k;
refuse:
	m->n_nodes = nodes_mark;
	m->n_buf = 0;
	m->n_work = 0;
	return k < 0 ? k : -EINVAL;
}

int matcher_accept_bytes(struct matcher *m, const char *s, size_t n)
{
	return accept_within(m, s, n, UINT32_MAX);
}

int matcher_accept_token(struct matcher *m, int32_t id)
{
	return matcher_try_token(m, id, UINT32_MAX);
}

int matcher_try_token(struct matcher *m, int32_t id, uint32_t tokens_left)
{
	assert_return(tokens_left >= 1, -EINVAL);
	if (id < 0 || (uint32_t) id >= m->tv->n_tokens || !m->tv->piece[id])
		return -EINVAL;
	return accept_within(m, m->tv->piece[id], m->tv->piece_len[id], tokens_left);
}

bool matcher_accepting(const struct matcher *m)
{
	if (m->part_left)
		return false;
	for (uint32_t i = 0; i < m->n_set; i++)
		if (m->set[i] == NONE)
			return true;
	return false;
}

bool matcher_done(const struct matcher *m)
{
	return matcher_accepting(m) && m->n_set == 1;
}

uint32_t matcher_min_bytes(const struct matcher *m)
{
	struct matcher *mm = (struct matcher *) m; /* buf is scratch */
	struct walk w;

	if (load_state(mm, &w) < 0)
		return GRAMMAR_MIN_INF;
	return set_min_bytes(m, &w);
}

struct frame {
	uint32_t trie;       /* the trie node reached */
	uint32_t child;      /* the next child to try */
	struct walk w;       /* the state at this node */
	uint32_t buf_mark, nodes_mark; /* scratch to rewind to when leaving it */
};

/* One walk over the trie from the committed state: for every token the grammar allows, the
 * fewest bytes that complete the grammar after it (MINB_NONE: not allowed). */
static int mask_walk(struct matcher *m, uint16_t *minb)
{
	const struct grammar_vocab *tv = m->tv;
	_cleanup_free_ struct frame *fr = NULL;
	uint32_t cap_fr = 0, sp = 0, nodes_base = m->n_nodes;
	int k;

	for (uint32_t t = 0; t < tv->n_tokens; t++)
		minb[t] = MINB_NONE;
	if (ARRAY_RESERVE(fr, cap_fr, 1, 64) < 0)
		return -ENOMEM;
	k = load_state(m, &fr[0].w);
	if (k < 0)
		return k;
	fr[0].trie = 0;
	fr[0].child = tv->trie[0].first_child;
	fr[0].buf_mark = m->n_buf;
	fr[0].nodes_mark = m->n_nodes;
	sp = 1;
	while (sp) {
		struct frame *f = &fr[sp - 1];
		uint32_t c = f->child;
		struct walk w;
		bool alive;

		if (c == NONE) {
			m->n_buf = f->buf_mark;
			m->n_nodes = f->nodes_mark;
			sp--;
			continue;
		}
		f->child = tv->trie[c].next_sibling;
		m->n_buf = f->buf_mark;
		m->n_nodes = f->nodes_mark;
		w = f->w;
		k = feed_byte(m, &w, tv->trie[c].byte, &alive);
		if (k < 0)
			goto fail;
		if (!alive)
			continue;
		if (tv->trie[c].token >= 0) {
			uint32_t mb = set_min_bytes(m, &w);
			uint16_t v = mb >= MINB_MAX ? MINB_MAX : (uint16_t) mb;

			for (int32_t t = tv->trie[c].token; t >= 0; t = tv->same_next[t])
				minb[t] = v;
		}
		if (tv->trie[c].first_child == NONE)
			continue;
		k = ARRAY_RESERVE(fr, cap_fr, (uint64_t) sp + 1, 64);
		if (k < 0)
			goto fail;
		fr[sp] = (struct frame){ .trie = c, .child = tv->trie[c].first_child, .w = w,
					 .buf_mark = m->n_buf, .nodes_mark = m->n_nodes };
		sp++;
	}
	m->n_nodes = nodes_base;
	m->n_buf = 0;
	return 0;
fail:
	m->n_nodes = nodes_base;
	m->n_buf = 0;
	m->n_work = 0;
	return k;
}

/* The committed state in a canonical form (stacks sorted by their chain's hash, each as its
 * elements top to bottom, then the unfinished character): equal forms, equal masks. */
static int state_key(struct matcher *m, uint32_t **ret, uint32_t *ret_n)
{
	uint32_t n = 4, at = 0, *key, *order;

	for (uint32_t i = 0; i < m->n_set; i++) {
		n += 1;
		for (uint32_t st = m->set[i]; st != NONE; st = m->nodes[st].parent)
			n++;
	}
	key = malloc(sizeof(*key) * n);
	order = malloc(sizeof(*order) * (m->n_set ? m->n_set : 1));
	if (!key || !order) {
		free(key);
		free(order);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < m->n_set; i++)
		order[i] = m->set[i];
	/* insertion sort by hash: sets are small */
	for (uint32_t i = 1; i < m->n_set; i++)
		for (uint32_t j = i; j > 0; j--) {
			uint64_t a = order[j - 1] == NONE ? 0 : m->nodes[order[j - 1]].hash,
				 b = order[j] == NONE ? 0 : m->nodes[order[j]].hash;

			if (a <= b)
				break;
			uint32_t t = order[j - 1];
			order[j - 1] = order[j], order[j] = t;
		}
	key[at++] = m->part_cp;
	key[at++] = m->part_left | ((uint32_t) m->part_len << 8);
	key[at++] = m->n_set;
	key[at++] = 0;
	for (uint32_t i = 0; i < m->n_set; i++) {
		uint32_t mark = at++, depth = 0;

		for (uint32_t st = order[i]; st != NONE; st = m->nodes[st].parent)
			key[at++] = m->nodes[st].elem, depth++;
		key[mark] = depth;
	}
	free(order);
	*ret = key;
	*ret_n = n;
	return 0;
}

/* The vocabulary's shared walk for this grammar and state, copied into minb: true if found. */
static bool shared_lookup(struct matcher *m, const uint32_t *key, uint32_t n_key, uint64_t h,
			  uint16_t *minb)
{
	struct shared_walks *sw = m->tv ? m->tv->shared : NULL;
	const uint8_t *gh = grammar_hash(m->g);
	bool found = false;

	if (!sw)
		return false;
	pthread_mutex_lock(&sw->lock);
	for (uint32_t i = 0; i < sw->n; i++) {
		struct shared_entry *se = &sw->e[i];

		if (se->minb && se->hash == h && se->n_key == n_key &&
		    memcmp(se->grammar, gh, sizeof(se->grammar)) == 0 &&
		    memcmp(se->key, key, sizeof(*key) * n_key) == 0) {
			memcpy(minb, se->minb, sizeof(*minb) * m->tv->n_tokens);
			se->used = ++sw->clock;
			found = true;
			break;
		}
	}
	if (found)
		sw->hits++;
	else
		sw->misses++;
	pthread_mutex_unlock(&sw->lock);
	return found;
}

/* Offers a fresh walk to the other matchers of the vocabulary (least recently used out; on
 * no memory it is simply not shared). */
static void shared_insert(struct matcher *m, const uint32_t *key, uint32_t n_key, uint64_t h,
			  const uint16_t *minb)
{
	struct shared_walks *sw = m->tv ? m->tv->shared : NULL;
	struct shared_entry *se;
	uint32_t victim = 0;

	if (!sw)
		return;
	pthread_mutex_lock(&sw->lock);
	for (uint32_t i = 0; i < sw->n; i++)
		if (!sw->e[i].minb || sw->e[i].used < sw->e[victim].used) {
			victim = i;
			if (!sw->e[i].minb)
				break;
		}
	se = &sw->e[victim];
	free(se->key);
	se->key = malloc(sizeof(*key) * n_key);
	if (!se->minb)
		se->minb = malloc(sizeof(*se->minb) * m->tv->n_tokens);
	if (!se->key || !se->minb) {
		free(se->key);
		free(se->minb);
		*se = (struct shared_entry){ 0 };
	} else {
		memcpy(se->grammar, grammar_hash(m->g), sizeof(se->grammar));
		memcpy(se->key, key, sizeof(*key) * n_key);
		memcpy(se->minb, minb, sizeof(*minb) * m->tv->n_tokens);
		se->n_key = n_key;
		se->hash = h;
		se->used = ++sw->clock;
	}
	pthread_mutex_unlock(&sw->lock);
}

void grammar_vocab_shared_stats(const struct grammar_vocab *tv, uint64_t *hits,
				uint64_t *misses)
{
	pthread_mutex_lock(&tv->shared->lock);
	*hits = tv->shared->hits;
	*misses = tv->shared->misses;
	pthread_mutex_unlock(&tv->shared->lock);
}

/* The cached walk of the committed state, computed on a miss (least recently used out): the
 * matcher's own recent states first, then the vocabulary's shared walks. */
static int cached_minb(struct matcher *m, const uint16_t **ret)
{
	_cleanup_free_ uint32_t *key = NULL;
	uint32_t n_key, victim = 0;
	uint64_t h = 0xcbf29ce484222325ull;
	struct mask_entry *en;
	int k;

	k = state_key(m, &key, &n_key);
	if (k < 0)
		return k;
	for (uint32_t i = 0; i < n_key; i++)
		h = (h ^ key[i]) * 0x100000001b3ull;
	for (uint32_t i = 0; i < MATCHER_CACHE; i++) {
		en = &m->cache[i];
		if (en->minb && en->hash == h && en->n_key == n_key &&
		    memcmp(en->key, key, sizeof(*key) * n_key) == 0) {
			en->used = ++m->clock;
			*ret = en->minb;
			return 0;
		}
		if (!en->minb || en->used < m->cache[victim].used)
			victim = i;
	}
	en = &m->cache[victim];
	if (!en->minb) {
		en->minb = malloc(sizeof(*en->minb) * m->tv->n_tokens);
		if (!en->minb)
			return -ENOMEM;
	}
	free(en->key);
	en->key = NULL;
	en->used = 0;
	if (!shared_lookup(m, key, n_key, h, en->minb)) {
		k = mask_walk(m, en->minb);
		if (k < 0) {
			free(en->minb);
			en->minb = NULL;
			return k;
		}
		shared_insert(m, key, n_key, h, en->minb);
	}
	en->key = TAKE_PTR(key);
	en->n_key = n_key;
	en->hash = h;
	en->used = ++m->clock;
	*ret = en->minb;
	return 0;
}

int64_t matcher_mask(struct matcher *m, uint32_t tokens_left, uint8_t *allowed)
{
	uint32_t n_tokens, after;
	const uint16_t *minb;
	int64_t n = 0, n_any = 0;
	int k;

	assert_return(m && allowed && tokens_left >= 1, -EINVAL);
	k = cached_minb(m, &minb);
	if (k < 0)
		return k;
	n_tokens = m->tv->n_tokens;
	after = tokens_left == UINT32_MAX || tokens_left - 1 >= MINB_MAX ? MINB_MAX : tokens_left - 1;
	for (uint32_t t = 0; t < n_tokens; t++) {
		allowed[t] = minb[t] <= after;
		n += allowed[t];
		n_any += minb[t] != MINB_NONE;
	}
	if (n == 0 && n_any > 0 && !matcher_accepting(m)) {
		/* it cannot close in time: any allowed token, a valid prefix */
		for (uint32_t t = 0; t < n_tokens; t++)
			allowed[t] = minb[t] != MINB_NONE;
		n = n_any;
	}
	return n;
}
