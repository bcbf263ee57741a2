/* SPDX-License-Identifier: MIT */
/*
 * detect.h: the built-in detectors of sensitive values. One left-to-right walk over the text;
 * at each word start the byte there picks the few detectors that can begin with it, and each
 * of those is a small hand-written scanner with bounded lookahead (no regex engine), so the
 * cost is linear in the text.
 *
 * Numbers with a check (cards: Luhn; IBAN: mod-97; codice fiscale: check letter; DNI/NIE:
 * check letter) are findings only when the check holds. Numeric detectors look at the few
 * words before a candidate: "order", "ordine", "pedido", "invoice", "ISBN", "#", ... veto a
 * phone or card number; "tel", "phone", "móvil", ... confirm a phone number written without
 * separators.
 *
 * Credentials (credential.h): key phrases in English, Italian and Spanish and their values
 * ("my password is X", "il PIN del bancomat è X", "DB_PASSWORD=X"), passwords in URLs,
 * vendor token formats, private keys (PEM, OpenSSH, PuTTY, SSH2, age) and BIP-39 seed
 * phrases. A credential match covers the value only, not its key phrase.
 *
 * Matches never overlap: after a match the walk resumes at its end. Offsets are bytes.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "policy.h"

enum detect_kind {
	DETECT_EMAIL,
	DETECT_PHONE,
	DETECT_IBAN,
	DETECT_CARD,
	DETECT_US_SSN,
	DETECT_IT_CODICE_FISCALE,
	DETECT_ES_DNI,
	DETECT_ES_NIE,
	DETECT_IP,
	DETECT_ADDRESS,
	DETECT_API_KEY,
	DETECT_JWT,
	DETECT_PRIVATE_KEY,
	DETECT_SECRET,          /* a credential after a key phrase or assignment (credential.h) */
	DETECT_ACCESS_CODE,     /* a PIN, door/alarm/safe code, CVV, OTP, backup codes */
	DETECT_URL_CREDENTIALS, /* the password in scheme://user:password@host */
	DETECT_SEED_PHRASE,     /* 12+ BIP-39 words (English, Italian, Spanish) */
	DETECT_KIND_COUNT_,
};

struct detect_match {
	enum detect_kind kind;
	size_t start; /* bytes, [start, end) */
	size_t end;
};

/* A growable list the scanner appends to; reuse it across scans to avoid allocations. */
struct detect_matches {
	struct detect_match *v;
	size_t n;
	size_t cap;
};

/* "email", "phone", ... as policy_finding.kind names them. */
const char *detect_kind_name(enum detect_kind k);
/* The placeholder's type: "EMAIL", "PHONE", "IBAN", "CARD", "SSN", "CF", "DNI", "NIE", "IP",
 * "ADDRESS", "API_KEY", "JWT", "PRIVATE_KEY", "SECRET", "CODE", "URL_PASSWORD", "SEED_PHRASE".
 * Every kind from DETECT_API_KEY on is of class secret. */
const char *detect_kind_placeholder(enum detect_kind k);
enum policy_class detect_kind_class(enum detect_kind k);
int detect_kind_from_name(const char *name, enum detect_kind *ret);

/* Appends the matches in text to m (m->n is not reset). -ENOMEM only. */
int detect_scan(const char *text, size_t len, struct detect_matches *m);
/* detect_scan() with flags, for tests. DETECT_SCAN_NO_SHORTCUT: every word start is tried
 * with the detectors, none first passed over for beginning a plain word (lower-case letters
 * after the first, then a space or punctuation no detector reads on over); both ways must
 * give the same matches. */
#define DETECT_SCAN_NO_SHORTCUT 1u
int detect_scan_flags(const char *text, size_t len, struct detect_matches *m, unsigned flags);
void detect_matches_done(struct detect_matches *m);

/* The checks, for tests. digits: ASCII digits only. */
bool detect_luhn_ok(const char *digits, size_t n);
/* s: the compact IBAN (no spaces), letters in either case. */
bool detect_iban_ok(const char *s, size_t n);
/* s: 16 characters, either case; omocodia letters accepted in the digit positions. */
bool detect_codice_fiscale_ok(const char *s);
/* s: 8 digits then the letter (DNI) or X/Y/Z, 7 digits, the letter (NIE); 9 characters. */
bool detect_dni_ok(const char *s);
bool detect_nie_ok(const char *s);
