/* SPDX-License-Identifier: MIT */
/*
 * vault.h: reversible redaction, one vault per request.
 *
 * Before a request leaves for a tier that requires it (policy_tier_needs_redaction()), every
 * redactable finding's span (policy_finding_redactable(): identifiers, credentials, user
 * rules' matches; not the special-category layers, whose spans are the question itself)
 * becomes a typed placeholder "⟨TYPE_N⟩" (U+27E8, U+27E9): ⟨EMAIL_1⟩, ⟨IBAN_1⟩, ⟨PHONE_2⟩,
 * ... TYPE is detect_kind_placeholder() of a built-in detector's kind, REDACTED for user
 * rules, and for any other kind the kind's name upper-cased (letters and '_' only:
 * "connection_string" → ⟨CONNECTION_STRING_1⟩); N counts per type from 1. The same value
 * gets the same placeholder within the vault (all the messages of one request share it).
 *
 * The mapping lives only in the vault's memory and is overwritten with zeros
 * (explicit_bzero) when the vault is freed: free it when the request ends.
 *
 * Restoring: placeholders in the answer become the original values again. Remote models
 * rewrite placeholders, so these variants are accepted (and only these):
 *   - brackets: ⟨ ⟩, 〈 〉 (U+2329/U+232A), 〈 〉 (U+3008/U+3009), ‹ ›, « », < >, [ ], and the
 *     HTML escapes &lt; &gt;; the opening and closing bracket need not be the same style;
 *   - up to 4 spaces or tabs after the opening and before the closing bracket;
 *   - TYPE in any case; '_', '-' or spaces (up to 4) between the words of TYPE and between
 *     TYPE and N, or nothing between TYPE and N ("EMAIL1");
 *   - N without leading zeros changes nothing: "EMAIL_01" is index 1.
 * So "⟨ email_1 ⟩", "<EMAIL_1>", "⟨Email 1⟩", "[api key-2]" are restored. A placeholder that
 * parses but names no value of this vault (unknown TYPE or N) is left as it is and reported
 * (vault_n_unrestorable(), vault_unrestorable()), never guessed. With ASCII or guillemet
 * brackets only the TYPEs the vault knows count as placeholders ("<h1>" and "[x2]" are text);
 * with the angle brackets every TYPE does.
 *
 * Streaming: a vault_stream restores chunk by chunk and holds back a tail that may be the
 * start of a placeholder (at most VAULT_MAX_PLACEHOLDER bytes) until the next chunk decides.
 *
 * Threading: a vault belongs to one request; no locking.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "../basic/macro.h"
#include "policy.h"

/* The longest text accepted as one placeholder (brackets, spaces, TYPE, N). */
#define VAULT_MAX_PLACEHOLDER 64

struct vault;

int vault_new(struct vault **ret);
/* Zeroes the mapping and the reports, then frees. */
struct vault *vault_free(struct vault *v);
DEFINE_CLEANUP_FUNC(struct vault *, vault_free, NULL)

/*
 * Writes text with every redactable finding of class >= min_class replaced by its
 * placeholder into *ret (malloc'd, NUL-terminated; *ret_len without the NUL). Overlapping
 * spans are merged into one placeholder (the type of the first). Findings must lie within
 * [0, len); byte offsets are used.
 */
int vault_redact(struct vault *v, const char *text, size_t len, const struct policy_finding *f,
		 size_t n_findings, enum policy_class min_class, char **ret, size_t *ret_len);

/* Placeholders handed out so far. */
size_t vault_size(const struct vault *v);
/* The i-th mapping: "⟨TYPE_N⟩" into buf, and the original value (not NUL-terminated). */
int vault_entry(const struct vault *v, size_t i, char *buf, size_t size, const char **ret_value,
		size_t *ret_len);

/* Restores a whole answer into *ret (malloc'd, NUL-terminated). */
int vault_restore(struct vault *v, const char *text, size_t len, char **ret, size_t *ret_len);

/* Placeholders seen in answers that could not be restored, as they appeared (the first 64
 * are kept; the count goes on). */
size_t vault_n_unrestorable(const struct vault *v);
const char *vault_unrestorable(const struct vault *v, size_t i);
/* Placeholders restored so far. */
size_t vault_n_restored(const struct vault *v);

struct vault_stream;
int vault_stream_new(struct vault *v, struct vault_stream **ret);
/* Restores what can be decided; *out (malloc'd, may be empty) is to be sent now. */
int vault_stream_feed(struct vault_stream *s, const char *chunk, size_t len, char **out,
		      size_t *out_len);
/* The end of the answer: flushes what was held back. */
int vault_stream_finish(struct vault_stream *s, char **out, size_t *out_len);
struct vault_stream *vault_stream_free(struct vault_stream *s);
DEFINE_CLEANUP_FUNC(struct vault_stream *, vault_stream_free, NULL)
