/* SPDX-License-Identifier: MIT */
/*
 * credential.h: the detectors of credentials (anything that grants access), called from
 * detect.c's walk at word starts. All of them are hand-written scanners with bounded
 * lookahead; none allocates. See docs/policy-secrets.md for what is and is not found.
 *
 *   phrase:  a key phrase, up to six words, a copula or separator, a value, in English,
 *            Italian and Spanish: "my database password is: X", "la password del wifi è X",
 *            "el PIN de la tarjeta es 1234", "door code 4471", "DB_PASSWORD=X",
 *            "\"apiKey\": \"X\"", "Authorization: Basic X", "login: admin / X". The match is
 *            the value alone, so that redaction keeps the sentence.
 *   url:     user:password@ in a URL or connection string (postgres, mysql, mongodb+srv,
 *            redis, amqp, ftp, smtp, https, ...): the password; Slack/Discord webhook URLs.
 *   token:   vendor token formats (GitHub, GitLab, Slack, Stripe, OpenAI, Anthropic, AWS,
 *            Google, Hugging Face, npm, PyPI, SendGrid, Twilio, ...), age secret keys and
 *            PuTTY / SSH2 private key files.
 *   seed:    12+ words of one BIP-39 list (English, Italian, Spanish) in a row.
 *
 * Thread safety: credential_init() once (detect.c calls it under pthread_once); the scanners
 * then only read.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "detect.h"

void credential_init(void);

/* The head words of key phrases ("password", "pin", "code", "clave", ...), lower-case. A
 * plain word (lower-case ASCII letters) that is one must reach credential_scan_phrase(). */
size_t credential_n_heads(void);
const char *credential_head(size_t k);
bool credential_is_head(const char *w, size_t n);

/* Another detector that may know a value better (an e-mail, a JWT, a vendor token): returns
 * the end of its match at i and sets *kind and *ret_start, or returns 0. */
typedef size_t (*credential_inner_fn)(const char *t, size_t len, size_t i, enum detect_kind *kind,
				      size_t *ret_start);

/* At a word start i: a key phrase or assignment and its value. Returns the value's end and
 * sets *ret_start and *kind (DETECT_SECRET, DETECT_ACCESS_CODE, or what inner found), or 0. */
size_t credential_scan_phrase(const char *t, size_t len, size_t i, credential_inner_fn inner,
			      enum detect_kind *kind, size_t *ret_start);

/* At a word start i: "scheme://user:password@host". Returns the password's end with
 * *ret_start at its start (DETECT_URL_CREDENTIALS, or DETECT_API_KEY for a vendor token in
 * the password or a webhook URL), or 0. */
size_t credential_scan_url(const char *t, size_t len, size_t i, enum detect_kind *kind,
			   size_t *ret_start);

/* At a word start i: a vendor token (DETECT_API_KEY) or a private key in a non-PEM format
 * (DETECT_PRIVATE_KEY). Returns the end, the match starting at i, or 0. */
size_t credential_scan_token(const char *t, size_t len, size_t i, enum detect_kind *kind);

/* Right after an AWS access key id that ends at e: " / <40 characters>", its secret access
 * key (DETECT_SECRET). Returns its end and its start in *ret_start, or 0. */
size_t credential_scan_aws_secret(const char *t, size_t len, size_t e, size_t *ret_start);

/* At '-': "-u user:password", "--user user:password" (curl), "-p password" (docker, mysql;
 * a strong value only): the password (DETECT_SECRET),
 * its end returned and its start in *ret_start, or 0. */
size_t credential_scan_cli(const char *t, size_t len, size_t i, size_t *ret_start);

/* A run of 12 or more BIP-39 words of one language, separated by spaces, newlines, commas or
 * numbering ("1. abandon 2. ability ..."), that holds the word starting at i. The caller
 * tries one lower-case word start in four (so the run may start up to three words before i,
 * but not before lo). Returns the run's end with its start in *ret_start, or 0; in *ret_next
 * the first byte where a run may still start (a failed run is not tried again from its inner
 * words: linear). */
size_t credential_scan_seed(const char *t, size_t len, size_t lo, size_t i, size_t *ret_start,
			    size_t *ret_next);

/* The context pass, after the walk (credential-context.c): a value some words after its key
 * word or before it, a table's password column, .pgpass lines, define('DB_PASSWORD', 'x'),
 * password hashes ("$2y$10$..."), lists of recovery codes and seed words after their name,
 * "root / X". Adds matches with add() that overlap none of class secret in
 * m->v[first ..]; one of another class inside a new match takes its kind and span. Returns
 * 0 or add()'s error. */
typedef int (*credential_add_fn)(struct detect_matches *m, enum detect_kind k, size_t s,
				 size_t e);
int credential_scan_context(const char *t, size_t len, struct detect_matches *m, size_t first,
			    credential_add_fn add);

/* For tests: is the word (UTF-8, n bytes) in a BIP-39 list? Bit 0 English, 1 Italian,
 * 2 Spanish. */
unsigned credential_bip39_langs(const char *w, size_t n);
