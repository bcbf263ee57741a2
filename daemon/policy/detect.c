/* SPDX-License-Identifier: MIT */
/*
 * detect.c: see detect.h. Every scanner takes (text, len, position) and returns the end of
 * its match or 0; none reads past len. Character classes are ASCII only on purpose: locale
 * independent, and bytes >= 0x80 (UTF-8) count as letters where a name may hold them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../basic/byte-class.h"
#include "credential.h"
#include "ascii-class.h"
#include "detect.h"

static const struct {
	const char *name;
	const char *placeholder;
	enum policy_class class;
} kinds[DETECT_KIND_COUNT_] = {
	[DETECT_EMAIL] = { "email", "EMAIL", POLICY_CLASS_PERSONAL },
	[DETECT_PHONE] = { "phone", "PHONE", POLICY_CLASS_PERSONAL },
	[DETECT_IBAN] = { "iban", "IBAN", POLICY_CLASS_PERSONAL },
	[DETECT_CARD] = { "card", "CARD", POLICY_CLASS_PERSONAL },
	[DETECT_US_SSN] = { "us_ssn", "SSN", POLICY_CLASS_PERSONAL },
	[DETECT_IT_CODICE_FISCALE] = { "it_codice_fiscale", "CF", POLICY_CLASS_PERSONAL },
	[DETECT_ES_DNI] = { "es_dni", "DNI", POLICY_CLASS_PERSONAL },
	[DETECT_ES_NIE] = { "es_nie", "NIE", POLICY_CLASS_PERSONAL },
	[DETECT_IP] = { "ip", "IP", POLICY_CLASS_PERSONAL },
	[DETECT_ADDRESS] = { "address", "ADDRESS", POLICY_CLASS_PERSONAL },
	[DETECT_API_KEY] = { "api_key", "API_KEY", POLICY_CLASS_SECRET },
	[DETECT_JWT] = { "jwt", "JWT", POLICY_CLASS_SECRET },
	[DETECT_PRIVATE_KEY] = { "private_key", "PRIVATE_KEY", POLICY_CLASS_SECRET },
	[DETECT_SECRET] = { "secret", "SECRET", POLICY_CLASS_SECRET },
	[DETECT_ACCESS_CODE] = { "access_code", "CODE", POLICY_CLASS_SECRET },
	[DETECT_URL_CREDENTIALS] = { "url_credentials", "URL_PASSWORD", POLICY_CLASS_SECRET },
	[DETECT_SEED_PHRASE] = { "seed_phrase", "SEED_PHRASE", POLICY_CLASS_SECRET },
};

const char *detect_kind_name(enum detect_kind k)
{
	return k < DETECT_KIND_COUNT_ ? kinds[k].name : NULL;
}

const char *detect_kind_placeholder(enum detect_kind k)
{
	return k < DETECT_KIND_COUNT_ ? kinds[k].placeholder : NULL;
}

enum policy_class detect_kind_class(enum detect_kind k)
{
	return k < DETECT_KIND_COUNT_ ? kinds[k].class : POLICY_CLASS_SECRET;
}

int detect_kind_from_name(const char *name, enum detect_kind *ret)
{
	for (int k = 0; k < DETECT_KIND_COUNT_; k++)
		if (name && strcmp(name, kinds[k].name) == 0) {
			*ret = (enum detect_kind) k;
			return 0;
		}
	return -EINVAL;
}

/* ---- character classes (the byte tests are in ascii-class.h) ---- */

#define AT(i) ((i) < len ? (unsigned char) t[i] : 0)

/* The walk's byte classes, one table load each (the walk tests every byte of the text):
 * DC_WORD is_word(), DC_ALPHA is_alpha(), DC_LOWER is_lower(), DC_START a byte a detector may
 * start at (is_alnum() or one of + ( - :), DC_GOES_ON a byte after a word that some detector
 * reads on over (plain_word_end(): a word byte, - @ % + : / ' or a 0 byte in the text). */
#define DC_WORD 1u
#define DC_ALPHA 2u
#define DC_LOWER 4u
#define DC_START 8u
#define DC_GOES_ON 16u
static const uint8_t dclass[256] = {
	['0' ... '9'] = DC_WORD | DC_START | DC_GOES_ON,
	['A' ... 'Z'] = DC_WORD | DC_ALPHA | DC_START | DC_GOES_ON,
	['a' ... 'z'] = DC_WORD | DC_ALPHA | DC_LOWER | DC_START | DC_GOES_ON,
	['_'] = DC_WORD | DC_GOES_ON,
	[0x80 ... 0xff] = DC_WORD | DC_GOES_ON,
	['+'] = DC_START | DC_GOES_ON, ['('] = DC_START, ['-'] = DC_START | DC_GOES_ON,
	[':'] = DC_START | DC_GOES_ON,
	['@'] = DC_GOES_ON, ['%'] = DC_GOES_ON, ['/'] = DC_GOES_ON, ['\''] = DC_GOES_ON,
	[0] = DC_GOES_ON,
};

/* The match ends at a word end: what follows is not a letter or digit. */
static bool right_ok(const char *t, size_t len, size_t e)
{
	return e >= len || !is_word((unsigned char) t[e]);
}

/* A number ends here and does not go on as "12.5", "12-34", "12/3". */
static bool right_ok_num(const char *t, size_t len, size_t e)
{
	if (!right_ok(t, len, e))
		return false;
	if (e + 1 < len && strchr(".-/", t[e]) && is_alnum((unsigned char) t[e + 1]))
		return false;
	return true;
}

/* Does a number start here, not in the middle of "v1.2.3" or "AB-1234"? */
static bool left_ok_num(const char *t, size_t i)
{
	if (i == 0)
		return true;
	if (is_word((unsigned char) t[i - 1]))
		return false;
	if (i >= 2 && strchr(".-/", t[i - 1]) && is_alnum((unsigned char) t[i - 2]))
		return false;
	return true;
}

/* Byte by byte: most calls fail on the first byte, which strlen + memcmp would not know. */
static bool prefix_at(const char *t, size_t len, size_t i, const char *p)
{
	for (size_t k = 0; p[k]; k++)
		if (i + k >= len || t[i + k] != p[k])
			return false;
	return true;
}

static bool prefix_at_ci(const char *t, size_t len, size_t i, const char *p)
{
	for (size_t k = 0; p[k]; k++)
		if (i + k >= len || to_lower((unsigned char) t[i + k]) != to_lower((unsigned char) p[k]))
			return false;
	return true;
}

/* ---- context: the words before a number ---- */

enum ctx { CTX_NONE, CTX_POSITIVE, CTX_NEGATIVE, CTX_SSN, CTX_VERSION };

static const char *const ctx_filler[] = {
	"is",  "was", "the", "my",  "our",  "your",  "il",  "lo",  "la",     "mio",  "mia",
	"mi",  "el",  "de",  "di",  "del",  "al",    "a",   "to",  "at",     "on",   "number",
	"numero", "n\xc3\xbamero", "es", "\xc3\xa8", "e",  "y",  "and", "or",  "o", "su", "en",
	"per", "por", "para", "of", "nummer", "num", "new", "nuevo", "nuovo", "this", "que",
	"che", "me", "us", "her", "his", "him", "it", "mobile_number", "this",
};
static const char *const ctx_positive[] = {
	"tel", "tel\xc3\xa9"/* telé... */, "phone", "telephone", "telefono", "teléfono",
	"cell", "cellulare", "cellphone", "mobile", "m\xc3\xb3vil", "movil", "fax", "call",
	"chiama", "chiamami", "chiamare", "llama", "ll\xc3\xa1mame", "llamar", "whatsapp",
	"contact", "contatto", "contacto", "reach", "text", "sms", "ring", "dial", "cel", "tlf",
	"tfno", "phones", "telefonico", "telef\xc3\xb3nico",
};
static const char *const ctx_negative[] = {
	"order",     "orders",   "ordine",     "ordini",   "pedido",     "pedidos",
	"invoice",   "fattura",  "factura",    "ref",      "reference",  "riferimento",
	"referencia", "ticket",  "tracking",   "isbn",     "sku",        "serial",
	"lot",       "batch",    "build",      "version",  "versione",   "versi\xc3\xb3n",
	"release",   "pratica",  "expediente", "id",       "nr",         "n\xc2\xba",
	"po",        "rma",      "case",       "caso",     "protocollo", "prot",
	"transaction", "transazione", "transacci\xc3\xb3n", "receipt", "ricevuta", "recibo",
	"shipment",  "spedizione", "env\xc3\xado", "booking", "prenotazione", "reserva",
	"item",      "part",     "model",      "modello",  "code",       "codice", "código",
	"account",   "conto",    "cuenta",     "customer", "cliente",    "ean",    "upc",
	"issn",      "doi",      "patent",     "licence",  "license",    "ver", "rev",
	"commit",    "hash",     "uuid",       "guid",     "no",
	"seguimiento", "tracciamento", "parcel", "package", "pacco", "paquete", "env\xc3\xado",
};
static const char *const ctx_version[] = {
	"version", "versione", "versi\xc3\xb3n", "ver", "build", "release", "rev",
};

/*
 * A word list bucketed by first byte: a lookup compares only the few entries that start like
 * the word (walking a whole list per word was most of number_context's cost). Filled once, by
 * word_sets_init(), before the first scan.
 */
struct word_set {
	const char *const *list;
	size_t n;
	unsigned char order[128];  /* entry indices sorted by first byte */
	unsigned char start[257];  /* entries with first byte c: order[start[c] .. start[c + 1]) */
};

#define WORD_SET(l) { .list = (l), .n = ELEMENTSOF(l) }

/* Defined with their lists' addresses below the lists. */
static struct word_set ws_ctx_filler, ws_ctx_positive, ws_ctx_negative, ws_ctx_version,
	ws_it_es_street, ws_name_particles, ws_en_suffix;

static void word_set_init(struct word_set *ws)
{
	unsigned count[256] = { 0 }, at[256];
	unsigned sum = 0;

	for (size_t i = 0; i < ws->n; i++)
		count[(unsigned char) ws->list[i][0]]++;
	for (int c = 0; c < 256; c++) {
		ws->start[c] = (unsigned char) sum;
		at[c] = sum;
		sum += count[c];
	}
	ws->start[256] = (unsigned char) sum;
	for (size_t i = 0; i < ws->n; i++)
		ws->order[at[(unsigned char) ws->list[i][0]]++] = (unsigned char) i;
}

static bool word_in(const char *w, size_t n, const struct word_set *ws)
{
	unsigned char c = (unsigned char) w[0];

	for (unsigned j = ws->start[c]; j < ws->start[c + 1]; j++) {
		const char *s = ws->list[ws->order[j]];
		size_t k = 1;

		while (k < n && s[k] && s[k] == w[k])
			k++;
		if (k >= n && s[n] == 0)
			return true;
	}
	return false;
}

/*
 * Looks back from i over at most 48 bytes of the same line for the nearest word that is not
 * a filler ("is", "my", "number", ...). '#' right before the number counts as negative.
 */
static enum ctx number_context(const char *t, size_t i, bool want_version)
{
	size_t lim = i > 48 ? i - 48 : 0, p = i;
	char w[24];

	/* "#123", "# 123", "n. 123", "No. 123" */
	{
		size_t q = p;
		while (q > lim && (t[q - 1] == ' ' || t[q - 1] == ':'))
			q--;
		if (q > lim && t[q - 1] == '#')
			return CTX_NEGATIVE;
		if (q > lim + 1 && t[q - 1] == '.' && (to_lower(t[q - 2]) == 'n' || to_lower(t[q - 2]) == 'o') &&
		    (q - 2 == lim || !is_word((unsigned char) t[q - 3]) ||
		     (to_lower(t[q - 3]) == 'n' && (q - 3 == lim || !is_word((unsigned char) t[q - 4])))))
			return CTX_NEGATIVE;
	}
	while (p > lim) {
		size_t end, n = 0;

		while (p > lim && !is_word((unsigned char) t[p - 1])) {
			if (t[p - 1] == '\n')
				return CTX_NONE;
			p--;
		}
		end = p;
		while (p > lim && (is_word((unsigned char) t[p - 1])))
			p--;
		if (end == p)
			break;
		if (p == lim && lim > 0)
			break; /* cut off: not a whole word */
		if (end - p >= sizeof(w))
			continue;
		for (size_t k = p; k < end; k++)
			w[n++] = (char) to_lower((unsigned char) t[k]);
		w[n] = 0;
		/* a word with digits in it (another number) ends the search */
		if (strpbrk(w, "0123456789"))
			return CTX_NONE;
		if (want_version)
			return word_in(w, n, &ws_ctx_version) ? CTX_VERSION
										   : CTX_NONE;
		if (strcmp(w, "ssn") == 0 || strcmp(w, "security") == 0 || strcmp(w, "social") == 0)
			return CTX_SSN;
		if (word_in(w, n, &ws_ctx_positive))
			return CTX_POSITIVE;
		if (word_in(w, n, &ws_ctx_negative))
			return CTX_NEGATIVE;
		if (!word_in(w, n, &ws_ctx_filler))
			return CTX_NONE;
	}
	return CTX_NONE;
}

/* ---- checks ---- */

bool detect_luhn_ok(const char *d, size_t n)
{
	unsigned sum = 0;

	for (size_t k = 0; k < n; k++) {
		unsigned v = (unsigned) (d[n - 1 - k] - '0');
		if (v > 9)
			return false;
		if (k & 1) {
			v *= 2;
			if (v > 9)
				v -= 9;
		}
		sum += v;
	}
	return n > 0 && sum % 10 == 0;
}

/* The IBAN length by country (ISO 13616 registry); 0: not an IBAN country. */
static unsigned iban_country_length(int a, int b)
{
	static const struct {
		char cc[3];
		unsigned char len;
	} t[] = {
		{ "AD", 24 }, { "AE", 23 }, { "AL", 28 }, { "AT", 20 }, { "AZ", 28 }, { "BA", 20 },
		{ "BE", 16 }, { "BG", 22 }, { "BH", 22 }, { "BI", 27 }, { "BR", 29 }, { "BY", 28 },
		{ "CH", 21 }, { "CR", 22 }, { "CY", 28 }, { "CZ", 24 }, { "DE", 22 }, { "DJ", 27 },
		{ "DK", 18 }, { "DO", 28 }, { "EE", 20 }, { "EG", 29 }, { "ES", 24 }, { "FI", 18 },
		{ "FK", 18 }, { "FO", 18 }, { "FR", 27 }, { "GB", 22 }, { "GE", 22 }, { "GI", 23 },
		{ "GL", 18 }, { "GR", 27 }, { "GT", 28 }, { "HR", 21 }, { "HU", 28 }, { "IE", 22 },
		{ "IL", 23 }, { "IQ", 23 }, { "IS", 26 }, { "IT", 27 }, { "JO", 30 }, { "KW", 30 },
		{ "KZ", 20 }, { "LB", 28 }, { "LC", 32 }, { "LI", 21 }, { "LT", 20 }, { "LU", 20 },
		{ "LV", 21 }, { "LY", 25 }, { "MC", 27 }, { "MD", 24 }, { "ME", 22 }, { "MK", 19 },
		{ "MN", 20 }, { "MR", 27 }, { "MT", 31 }, { "MU", 30 }, { "NI", 28 }, { "NL", 18 },
		{ "NO", 15 }, { "OM", 23 }, { "PK", 24 }, { "PL", 28 }, { "PS", 29 }, { "PT", 25 },
		{ "QA", 29 }, { "RO", 24 }, { "RS", 22 }, { "RU", 33 }, { "SA", 24 }, { "SC", 31 },
		{ "SD", 18 }, { "SE", 24 }, { "SI", 19 }, { "SK", 24 }, { "SM", 27 }, { "SO", 23 },
		{ "ST", 25 }, { "SV", 28 }, { "TL", 23 }, { "TN", 24 }, { "TR", 26 }, { "UA", 29 },
		{ "VA", 22 }, { "VG", 24 }, { "XK", 20 },
	};
	a = to_upper(a);
	b = to_upper(b);
	for (size_t i = 0; i < ELEMENTSOF(t); i++)
		if (t[i].cc[0] == a && t[i].cc[1] == b)
			return t[i].len;
	return 0;
}

bool detect_iban_ok(const char *s, size_t n)
{
	unsigned rem = 0;

	if (n < 15 || n > 34 || !is_alpha(s[0]) || !is_alpha(s[1]) || !is_digit(s[2]) ||
	    !is_digit(s[3]))
		return false;
	/* Move the first four characters to the end, letters become 10..35, then mod 97. */
	for (size_t k = 0; k < n; k++) {
		int c = (unsigned char) s[(k + 4) % n];
		if (is_digit(c))
			rem = (rem * 10 + (unsigned) (c - '0')) % 97;
		else if (is_alpha(c))
			rem = (rem * 100 + (unsigned) (to_upper(c) - 'A' + 10)) % 97;
		else
			return false;
	}
	return rem == 1;
}

/* Codice fiscale: positions that hold digits, which omocodia may replace with LMNPQRSTUV. */
static bool cf_digit_pos(int k)
{
	return k == 6 || k == 7 || k == 9 || k == 10 || k == 12 || k == 13 || k == 14;
}

static int cf_omocodia_digit(int c)
{
	static const char map[] = "LMNPQRSTUV";
	const char *p;

	if (is_digit(c))
		return c - '0';
	p = c ? strchr(map, c) : NULL;
	return p ? (int) (p - map) : -1;
}

bool detect_codice_fiscale_ok(const char *s)
{
	/* Values of odd positions (1st, 3rd, ...) for digits 0-9 and letters A-Z. */
	static const unsigned char odd[26] = { 1,  0,  5,  7,  9,  13, 15, 17, 19, 21, 2,  4,  18,
					       20, 11, 3,  6,  8,  12, 14, 16, 10, 22, 25, 24, 23 };
	unsigned sum = 0;
	char u[16];

	for (int k = 0; k < 16; k++) {
		int c = to_upper((unsigned char) s[k]);
		u[k] = (char) c;
		if (!is_alnum(c))
			return false;
		if (cf_digit_pos(k)) {
			if (cf_omocodia_digit(c) < 0)
				return false;
		} else if (!is_upper(c))
			return false;
	}
	/* month letter */
	if (!strchr("ABCDEHLMPRST", u[8]))
		return false;
	/* day: 1-31 or 41-71 (women) */
	{
		int d = cf_omocodia_digit(u[9]) * 10 + cf_omocodia_digit(u[10]);
		if (!((d >= 1 && d <= 31) || (d >= 41 && d <= 71)))
			return false;
	}
	for (int k = 0; k < 15; k++) {
		int c = u[k];
		int v = is_digit(c) ? c - '0' : c - 'A';
		/* digits and letters share the tables: '0'..'9' map like 'A'..'J' */
		sum += (k % 2 == 0) ? odd[v] : (unsigned) v;
	}
	return u[15] == (char) ('A' + sum % 26);
}

static const char dni_letters[] = "TRWAGMYFPDXBNJZSQVHLCKE";

bool detect_dni_ok(const char *s)
{
	unsigned long n = 0;

	for (int k = 0; k < 8; k++) {
		if (!is_digit(s[k]))
			return false;
		n = n * 10 + (unsigned long) (s[k] - '0');
	}
	return to_upper((unsigned char) s[8]) == dni_letters[n % 23];
}

bool detect_nie_ok(const char *s)
{
	int c = to_upper((unsigned char) s[0]);
	unsigned long n;

	if (c != 'X' && c != 'Y' && c != 'Z')
		return false;
	n = (unsigned long) (c - 'X');
	for (int k = 1; k < 8; k++) {
		if (!is_digit(s[k]))
			return false;
		n = n * 10 + (unsigned long) (s[k] - '0');
	}
	return to_upper((unsigned char) s[8]) == dni_letters[n % 23];
}

/* ---- secrets ---- */

/* PEM private key: "-----BEGIN ... PRIVATE KEY...-----" through the END line (or the end of
 * the text: a truncated key is still a key). */
static size_t scan_pem(const char *t, size_t len, size_t i)
{
	size_t p = i + 11, hdr_end;
	const char *end;

	if (prefix_at(t, len, i, "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----")) {
		/* the SSH.com format: four dashes and spaces */
		end = memmem(t + i, len - i, "---- END SSH2 ENCRYPTED PRIVATE KEY ----", 40);
		return end ? (size_t) (end - t) + 40 : len;
	}
	if (!prefix_at(t, len, i, "-----BEGIN "))
		return 0;
	while (p < len && p - i < 80 && (is_upper(t[p]) || t[p] == ' ' || is_digit(t[p])))
		p++;
	if (!prefix_at(t, len, p, "-----"))
		return 0;
	hdr_end = p + 5;
	if (!memmem(t + i, hdr_end - i, "PRIVATE KEY", 11))
		return 0;
	end = memmem(t + hdr_end, len - hdr_end, "-----END ", 9);
	if (!end)
		return len;
	p = (size_t) (end - t) + 9;
	while (p < len && p - (size_t) (end - t) < 90 && t[p] != '\n') {
		if (prefix_at(t, len, p, "-----"))
			return p + 5;
		p++;
	}
	return p;
}

static size_t span_while(const char *t, size_t len, size_t p, bool (*ok)(int))
{
	while (p < len && ok((unsigned char) t[p]))
		p++;
	return p;
}

static bool is_b64url_fn(int c)
{
	return is_b64url(c);
}
/* A Discord bot token: base64 of the bot's id (24 to 26 characters, starting M, N or O),
 * '.', six characters of time stamp, '.', 27 to 38 of HMAC. */
static size_t scan_discord(const char *t, size_t len, size_t i)
{
	size_t a, b, c;
	bool digit = false;

	if (t[i] != 'M' && t[i] != 'N' && t[i] != 'O')
		return 0;
	a = span_while(t, len, i, is_b64url_fn);
	if (a - i < 24 || a - i > 26 || AT(a) != '.')
		return 0;
	b = span_while(t, len, a + 1, is_b64url_fn);
	if (b - a - 1 != 6 || AT(b) != '.')
		return 0;
	c = span_while(t, len, b + 1, is_b64url_fn);
	if (c - b - 1 < 27 || c - b - 1 > 38 || !right_ok(t, len, c))
		return 0;
	for (size_t k = i; k < a; k++)
		digit |= is_digit(t[k]);
	return digit ? c : 0;
}

/* JSON Web Token: eyJ<header>.<payload>.<signature> (base64url; empty signature: alg none). */
static size_t scan_jwt(const char *t, size_t len, size_t i)
{
	size_t a, b, c;

	if (t[i] != 'e' || !prefix_at(t, len, i, "eyJ"))
		return 0;
	a = span_while(t, len, i, is_b64url_fn);
	if (a - i < 10 || AT(a) != '.')
		return 0;
	b = span_while(t, len, a + 1, is_b64url_fn);
	if (b - a - 1 < 4 || AT(b) != '.')
		return 0;
	c = span_while(t, len, b + 1, is_b64url_fn);
	if (c - b - 1 != 0 && c - b - 1 < 8)
		return 0;
	return right_ok(t, len, c) ? c : 0;
}

/* ---- personal data ---- */

static bool is_email_local(int c)
{
	return is_alnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-';
}

/* A role mailbox ("careers@", "rrhh@", "noreply@", "ci-bot@") names a function of an
 * organisation, not a person: a job advert or a commit header that carries one says nothing
 * about anybody. The local part is compared whole (case folded, after dropping one "-bot"/"bot"
 * tail), so "maria.info@" or "supporto.rossi@" stay a person's address. */
static bool is_role_mailbox(const char *local, size_t n)
{
	static const char *const roles[] = {
		"abuse", "accounts", "accounting", "admin", "administracion", "administration",
		"alerts", "amministrazione", "assistenza", "billing", "booking", "bookings",
		"candidature", "careers", "ci", "contabilidad", "contabilita", "contact", "contacto",
		"contatti", "contacts", "cv", "donotreply", "do-not-reply", "dpo", "empleo", "facturacion",
		"facturas", "fatture", "github-actions", "hello", "help", "helpdesk", "hostmaster", "hr",
		"info", "informacion", "informazioni", "invoices", "jobs", "lavora", "lavoraconnoi",
		"legal", "mailer-daemon", "marketing", "newsletter", "no-reply", "noreply",
		"notifications", "office", "oficina", "ordini", "orders", "pedidos", "postmaster",
		"prenotazioni", "press", "prensa", "privacy", "recepcion", "reception", "recruiting",
		"recruitment", "reservas", "rrhh", "sales", "secretaria", "security", "segreteria",
		"soporte", "stampa", "support", "supporto", "talent", "trabaja", "trabajaconnosotros",
		"ufficio", "ventas", "vendite", "webmaster",
	};
	char w[32];

	if (n >= sizeof(w))
		return false;
	for (size_t k = 0; k < n; k++)
		w[k] = (char) to_lower((unsigned char) local[k]);
	w[n] = 0;
	if (n > 4 && strcmp(w + n - 4, "-bot") == 0)
		return true; /* "ci-bot", "release-bot": a program's address */
	if (n > 3 && strcmp(w + n - 3, "bot") == 0 && memchr(w, '-', n) == NULL && n <= 12)
		w[n - 3] = 0;
	for (size_t k = 0; k < ELEMENTSOF(roles); k++)
		if (strcmp(w, roles[k]) == 0)
			return true;
	return false;
}

static size_t scan_email(const char *t, size_t len, size_t i)
{
	size_t p = i, at, labels = 0, last_label = 0, end = 0;

	if (i > 0 && is_email_local((unsigned char) t[i - 1]))
		return 0;
	if (!memchr(t + i, '@', MIN(len - i, (size_t) 66)))
		return 0;
	while (p < len && is_email_local((unsigned char) t[p]) && p - i <= 64)
		p++;
	if (p == i || AT(p) != '@' || t[p - 1] == '.' || t[i] == '.')
		return 0;
	at = p++;
	for (;;) {
		size_t s = p;
		while (p < len && (is_alnum(t[p]) || t[p] == '-') && p - s < 63)
			p++;
		if (p == s || t[s] == '-' || t[p - 1] == '-')
			break;
		labels++;
		last_label = s;
		end = p;
		if (AT(p) == '.' && p + 1 < len && is_alnum(t[p + 1]))
			p++;
		else
			break;
	}
	if (labels < 2 || end - at > 255)
		return 0;
	/* the top-level domain: 2+ letters */
	for (size_t k = last_label; k < end; k++)
		if (!is_alpha(t[k]))
			return 0;
	if (end - last_label < 2 || (end < len && (is_word((unsigned char) t[end]) || t[end] == '@')))
		return 0;
	if (is_role_mailbox(t + i, at - i))
		return 0;
	return end;
}

/* IBAN: CC + 2 check digits + BBAN, compact or in groups of 4 separated by one space. */
static size_t scan_iban(const char *t, size_t len, size_t i)
{
	char c[40];
	size_t ends[40]; /* ends[k]: the byte after the k+1 th character */
	size_t n = 0, p = i;
	unsigned want;

	if (!(is_alpha(AT(i)) && is_alpha(AT(i + 1)) && is_digit(AT(i + 2)) && is_digit(AT(i + 3))))
		return 0;
	/* both letters the same case: "It60" is a word, not a country code */
	if (is_upper(t[i]) != is_upper(t[i + 1]))
		return 0;
	while (p < len && n < 34) {
		int ch = (unsigned char) t[p];
		if (is_alnum(ch)) {
			c[n] = (char) ch;
			ends[n++] = ++p;
		} else if (ch == ' ' && n % 4 == 0 && p + 1 < len && is_alnum(t[p + 1]))
			p++;
		else
			break;
	}
	want = iban_country_length(t[i], t[i + 1]);
	for (size_t l = n; l >= 15; l--) {
		if (want && l != want)
			continue;
		/* a cut must fall at the end of a group: after it a space or the end */
		if (!right_ok(t, len, ends[l - 1]))
			continue;
		if (detect_iban_ok(c, l))
			return ends[l - 1];
	}
	return 0;
}

static size_t scan_codice_fiscale(const char *t, size_t len, size_t i)
{
	size_t e = i;

	while (e < len && is_alnum(t[e]) && e - i <= 16)
		e++;
	if (e - i != 16 || !right_ok(t, len, e))
		return 0;
	/* all letters upper case or all lower case */
	{
		bool up = false, lo = false;
		for (size_t k = i; k < e; k++) {
			up |= is_upper(t[k]);
			lo |= is_lower(t[k]);
		}
		if (up && lo)
			return 0;
	}
	return detect_codice_fiscale_ok(t + i) ? e : 0;
}

/* DNI: 8 digits (or 12.345.678), an optional '-' or ' ', the letter. */
static size_t scan_dni(const char *t, size_t len, size_t i)
{
	char s[9];
	size_t p = i, n = 0;

	while (p < len && n < 8) {
		if (is_digit(t[p]))
			s[n++] = t[p++];
		else if (t[p] == '.' && (n == 2 || n == 5) && p + 1 < len && is_digit(t[p + 1]))
			p++;
		else
			break;
	}
	if (n != 8 || AT(p) == '.' || is_digit(AT(p)))
		return 0;
	if ((AT(p) == '-' || AT(p) == ' ') && is_alpha(AT(p + 1)))
		p++;
	if (!is_alpha(AT(p)) || !right_ok(t, len, p + 1))
		return 0;
	s[8] = t[p];
	return detect_dni_ok(s) ? p + 1 : 0;
}

static size_t scan_nie(const char *t, size_t len, size_t i)
{
	char s[9];
	size_t p = i + 1, n = 1;

	s[0] = (char) to_upper(AT(i));
	if (s[0] != 'X' && s[0] != 'Y' && s[0] != 'Z')
		return 0;
	if (!is_digit(AT(i + 1)) && !(AT(i + 1) == '-' || AT(i + 1) == ' '))
		return 0;
	if (AT(p) == '-' || AT(p) == ' ')
		p++;
	while (p < len && n < 8 && is_digit(t[p]))
		s[n++] = t[p++];
	if (n != 8 || is_digit(AT(p)))
		return 0;
	if ((AT(p) == '-' || AT(p) == ' ') && is_alpha(AT(p + 1)))
		p++;
	if (!is_alpha(AT(p)) || !right_ok(t, len, p + 1))
		return 0;
	s[8] = t[p];
	return detect_nie_ok(s) ? p + 1 : 0;
}

/* Digits in groups: "4111 1111 1111 1111", "3782-822463-10005", "5555555555554444". */
static size_t scan_card(const char *t, size_t len, size_t i)
{
	char d[20];
	unsigned g[8];
	size_t n = 0, p = i, ng = 0, e;
	char sep = 0;

	for (;;) {
		size_t s = p;
		while (p < len && is_digit(t[p]) && n < 19)
			d[n++] = t[p++];
		if (p < len && is_digit(t[p]))
			return 0; /* more than 19 digits */
		g[ng++] = (unsigned) (p - s);
		e = p;
		if (ng < 8 && p + 1 < len && (t[p] == ' ' || t[p] == '-') &&
		    (!sep || sep == t[p]) && is_digit(t[p + 1]) && n < 19) {
			sep = t[p];
			p++;
			continue;
		}
		break;
	}
	if (n < 13 || !right_ok_num(t, len, e))
		return 0;
	if (ng > 1) {
		bool fours = true;
		for (size_t k = 0; k + 1 < ng; k++)
			fours &= g[k] == 4;
		fours &= g[ng - 1] >= 1 && g[ng - 1] <= 4;
		if (!fours && !(ng == 3 && g[0] == 4 && g[1] == 6 && (g[2] == 5 || g[2] == 4)))
			return 0;
	}
	/* issuer prefixes and their lengths */
	{
		int d2 = (d[0] - '0') * 10 + (d[1] - '0');
		int d4 = d2 * 100 + (d[2] - '0') * 10 + (d[3] - '0');
		bool ok = false;
		if (d[0] == '4')
			ok = n == 13 || n == 16 || n == 19;
		else if ((d2 >= 51 && d2 <= 55) || (d4 >= 2221 && d4 <= 2720))
			ok = n == 16;
		else if (d2 == 34 || d2 == 37)
			ok = n == 15;
		else if (d2 == 36 || d2 == 38 || d2 == 39 || (d4 >= 3000 && d4 <= 3059))
			ok = n >= 14 && n <= 19;
		else if (d2 == 35 || d2 == 62 || d2 == 65 || d4 == 6011 || (d4 >= 6440 && d4 <= 6499))
			ok = n >= 16 && n <= 19;
		else if (d2 == 50 || (d2 >= 56 && d2 <= 69))
			ok = n >= 13 && n <= 19; /* Maestro */
		if (!ok)
			return 0;
	}
	if (!detect_luhn_ok(d, n))
		return 0;
	if (number_context(t, i, false) == CTX_NEGATIVE)
		return 0;
	return e;
}

/* US SSN: AAA-GG-SSSS (or spaces; 9 bare digits only after "SSN"/"social security"). */
static size_t scan_ssn(const char *t, size_t len, size_t i)
{
	char d[9];
	size_t p = i, n = 0;
	char sep = 0;

	for (int grp = 0; grp < 3; grp++) {
		static const int gl[3] = { 3, 2, 4 };
		for (int k = 0; k < gl[grp]; k++) {
			if (!is_digit(AT(p)))
				return 0;
			d[n++] = t[p++];
		}
		if (grp < 2) {
			if (AT(p) == '-' || AT(p) == ' ') {
				if (grp == 1 && sep != t[p])
					return 0;
				if (grp == 0)
					sep = t[p];
				p++;
			} else if (sep)
				return 0;
		}
	}
	if (!right_ok_num(t, len, p))
		return 0;
	if (!sep && number_context(t, i, false) != CTX_SSN)
		return 0;
	/* no area 000, 666 or 9xx; no group 00; no serial 0000 */
	if (memcmp(d, "000", 3) == 0 || memcmp(d, "666", 3) == 0 || d[0] == '9' ||
	    memcmp(d + 3, "00", 2) == 0 || memcmp(d + 5, "0000", 4) == 0)
		return 0;
	return p;
}

static size_t scan_ipv4(const char *t, size_t len, size_t i)
{
	size_t p = i;
	unsigned octet[4] = { 0 };

	for (int part = 0; part < 4; part++) {
		unsigned v = 0, nd = 0;
		size_t s = p;
		while (p < len && is_digit(t[p]) && nd < 4) {
			v = v * 10 + (unsigned) (t[p++] - '0');
			nd++;
		}
		if (nd == 0 || nd > 3 || v > 255 || (nd > 1 && t[s] == '0'))
			return 0;
		octet[part] = v;
		if (part < 3) {
			if (AT(p) != '.')
				return 0;
			p++;
		}
	}
	if (!right_ok_num(t, len, p))
		return 0;
	/* CIDR suffix or port */
	if (AT(p) == '/' && is_digit(AT(p + 1))) {
		size_t q = p + 1;
		while (q < len && is_digit(t[q]) && q - p <= 2)
			q++;
		if (right_ok(t, len, q))
			p = q;
	}
	if (number_context(t, i, true) == CTX_VERSION)
		return 0;
	/* RFC 5737's documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) are
	 * nobody's address: examples in docs and logs, not personal data */
	if ((octet[0] == 192 && octet[1] == 0 && octet[2] == 2) ||
	    (octet[0] == 198 && octet[1] == 51 && octet[2] == 100) ||
	    (octet[0] == 203 && octet[1] == 0 && octet[2] == 113))
		return 0;
	/* nor are loopback (127/8), "this host" (0/8) and the broadcast or netmask values
	 * (255.x): every machine has them, so they point at no one */
	if (octet[0] == 127 || octet[0] == 0 || octet[0] == 255)
		return 0;
	/* nor the public resolvers every home network forwards to (1.1.1.1, 8.8.8.8, 9.9.9.9,
	 * OpenDNS): a service's address, no one's */
	{
		static const uint8_t resolvers[][4] = {
			{ 1, 1, 1, 1 },	      { 1, 0, 0, 1 },	    { 8, 8, 8, 8 },
			{ 8, 8, 4, 4 },	      { 9, 9, 9, 9 },	    { 149, 112, 112, 112 },
			{ 208, 67, 222, 222 }, { 208, 67, 220, 220 },
		};
		for (size_t k = 0; k < ELEMENTSOF(resolvers); k++)
			if (octet[0] == resolvers[k][0] && octet[1] == resolvers[k][1] &&
			    octet[2] == resolvers[k][2] && octet[3] == resolvers[k][3])
				return 0;
	}
	return p;
}

static size_t scan_ipv6(const char *t, size_t len, size_t i)
{
	char buf[64];
	struct in6_addr a;
	size_t e = i, colons = 0;
	bool dbl = false, hexletter = false;

	/* an address starts a token: not the tail of a longer one the scan already turned down */
	if (i > 0 && (is_hex((unsigned char) t[i - 1]) || t[i - 1] == ':'))
		return 0;
	while (e < len && (is_hex(t[e]) || t[e] == ':' || t[e] == '.') && e - i < 46) {
		if (t[e] == ':') {
			colons++;
			if (e > i && t[e - 1] == ':')
				dbl = true;
		} else if (is_alpha(t[e]))
			hexletter = true;
		e++;
	}
	/* trailing punctuation is the sentence's */
	while (e > i && (t[e - 1] == '.' || (t[e - 1] == ':' && !(e - i >= 2 && t[e - 2] == ':'))))
		e--;
	if (colons < 2 || (!dbl && colons != 7) || !right_ok(t, len, e) || e - i >= sizeof(buf))
		return 0;
	/* "10::30" is more likely a typo of a time than an address; want a letter or 3+ groups */
	if (!hexletter && colons < 3 && !(e - i == 3 && memcmp(t + i, "::1", 3) == 0))
		return 0;
	memcpy(buf, t + i, e - i);
	buf[e - i] = 0;
	if (inet_pton(AF_INET6, buf, &a) != 1)
		return 0;
	/* loopback and unspecified point at no one (the documentation prefix 2001:db8::/32 is
	 * kept: the identifier corpus writes people's addresses in it) */
	if (IN6_IS_ADDR_LOOPBACK(&a) || IN6_IS_ADDR_UNSPECIFIED(&a))
		return 0;
	return e;
}

/* Phone numbers: "+39 347 123 4567", "+44 (0)20 7946 0958", "(555) 123-4567", "555.123.4567",
 * "06 1234 5678", "612 345 678", "0039 ...", and bare digits that fit a national plan. */
static size_t scan_phone(const char *t, size_t len, size_t i)
{
	char d[20];
	unsigned g[16];
	size_t n = 0, ng = 0, p = i, e = 0;
	char seps[16];
	bool intl = false, paren = false;
	enum ctx ctx;

	if (AT(p) == '+') {
		intl = true;
		p++;
		if (!is_digit(AT(p)) || AT(p) == '0')
			return 0;
	}
	for (;;) {
		size_t s;
		bool par = false;
		size_t group_start = p;
		if (AT(p) == '(') {
			par = paren = true;
			p++;
		}
		s = p;
		while (p < len && is_digit(t[p])) {
			if (n >= 15)
				return 0;
			d[n++] = t[p++];
		}
		if (p == s || ng >= ELEMENTSOF(g) || (par && AT(p) != ')')) {
			if (ng == 0)
				return 0;
			/* "555-1234 (home)": the number ended before */
			n -= p - s;
			p = group_start;
			break;
		}
		g[ng++] = (unsigned) (p - s);
		if (par) {
			if (AT(p) != ')' || p - s > 4)
				return 0;
			p++;
			e = p;
			seps[ng - 1] = ' ';
			if (AT(p) == ' ' || AT(p) == '-')
				p++;
			if (!is_digit(AT(p)) && AT(p) != '(')
				return 0;
			continue;
		}
		e = p;
		if (p + 1 < len && (t[p] == ' ' || t[p] == '-' || t[p] == '.' || t[p] == '/') &&
		    (is_digit(t[p + 1]) || (t[p + 1] == '(' && is_digit(AT(p + 2))))) {
			seps[ng - 1] = t[p];
			p++;
			continue;
		}
		break;
	}
	if (!right_ok_num(t, len, e) || (e < len && t[e] == ','  && e + 1 < len && is_digit(t[e + 1])))
		return 0;
	d[n] = 0;
	if (n < 8)
		return 0;
	ctx = number_context(t, i, false);
	if (intl)
		return n >= 8 && n <= 15 && ctx != CTX_NEGATIVE ? e : 0;
	if (d[0] == '0' && d[1] == '0' && d[2] != '0') /* 00 international prefix */
		return n >= 11 && n <= 15 && ctx != CTX_NEGATIVE ? e : 0;
	if (n < 9 || n > 11 || ctx == CTX_NEGATIVE || ctx == CTX_SSN)
		return 0;
	if (ng >= 3) {
		/* dates: 12/03/2024, 2024-03-12, 12.03.24 */
		if ((g[0] <= 2 && g[1] <= 2 && (g[2] == 2 || g[2] == 4)) ||
		    (g[0] == 4 && g[1] <= 2 && g[2] <= 2))
			return 0;
	}
	if (ng == 3 && g[0] == 3 && g[1] == 2 && g[2] == 4)
		return 0; /* the shape of a US SSN, not a phone plan's */
	if (ng > 1) {
		bool thousands = true, slash = false;
		for (size_t k = 0; k < ng; k++) {
			if (g[k] == 1 && !(k == 0 && d[0] == '1' && n == 11))
				return 0;
			if (k > 0 && (g[k] != 3 || seps[k - 1] != '.'))
				thousands = false;
			if (k + 1 < ng && seps[k] == '/')
				slash = true;
		}
		if (slash && !(ng == 2 && d[0] == '0'))
			return 0; /* only "06/1234567" */
		if (thousands && ctx != CTX_POSITIVE)
			return 0;
	}
	/* the national plans: US NXX-NXX-XXXX (1 prefix), IT 3xx mobile / 0x landline,
	 * ES [6-9] 9 digits, UK 0 + 10 */
	{
		bool ok = false;
		if (n == 10 && d[0] >= '2')
			ok = true; /* US/CA */
		if (n == 11 && d[0] == '1' && d[1] >= '2')
			ok = true;
		if (n == 10 && d[0] == '3')
			ok = true; /* IT mobile */
		if (d[0] == '0' && d[1] != '0')
			ok = true; /* IT landline, UK */
		if (n == 9 && d[0] >= '6' && d[0] <= '9')
			ok = true; /* ES */
		if (!ok)
			return 0;
	}
	if (ng == 1 && !paren && ctx != CTX_POSITIVE) {
		/* a bare number: only the plans that fit it exactly */
		bool ok = (n == 10 && d[0] == '3') || (n == 9 && d[0] >= '6' && d[0] <= '9') ||
			  (n == 11 && d[0] == '0') || (n == 10 && d[0] == '0') ||
			  (n == 10 && d[0] >= '2' && d[3] >= '2');
		if (!ok)
			return 0;
	}
	return e;
}

/* ---- postal addresses ---- */

static const char *const it_es_street[] = {
	"via", "viale", "piazza", "piazzale", "corso", "largo", "vicolo", "strada", "lungomare",
	"calle", "avenida", "avda.", "avda", "av.", "plaza", "paseo", "camino", "ronda",
	"carretera", "glorieta", "rambla", "travesía", "c/",
};
static const char *const name_particles[] = {
	"di", "del", "della", "delle", "dei", "degli", "dello", "de", "la", "las", "los", "el",
	"y", "e", "san", "santa", "d'", "dell'", "of", "the", "al", "alla",
};
static const char *const en_suffix[] = {
	"street", "st", "st.", "avenue", "ave", "ave.", "road", "rd", "rd.", "boulevard", "blvd",
	"blvd.", "lane", "ln", "drive", "dr", "dr.", "court", "ct", "way", "place", "pl",
	"terrace", "close", "crescent", "square", "sq", "parkway", "highway", "hwy", "gardens",
	"grove", "row", "mews", "hill",
};

/* A word that may be part of a street's name: Capitalised (UTF-8 capitals too), a roman
 * numeral (XX Settembre), or an ordinal (5th). Returns its end or 0. */
static size_t name_word(const char *t, size_t len, size_t p)
{
	size_t e = p;
	int c = AT(p);

	if (is_upper(c) || c >= 0xc3) {
		e = p + 1;
		while (e < len && (is_alpha(t[e]) || (unsigned char) t[e] >= 0x80 ||
				   (t[e] == '\'' && is_alpha(AT(e + 1)))))
			e++;
		if (c >= 0xc3 && e - p < 3)
			return 0;
		/* ALLCAPS words: only roman numerals */
		if (e - p > 1 && is_upper(t[p + 1])) {
			for (size_t k = p; k < e; k++)
				if (!strchr("IVXLC", t[k]))
					return 0;
		}
		return e;
	}
	if (is_digit(c)) {
		while (e < len && is_digit(t[e]) && e - p < 3)
			e++;
		if (prefix_at(t, len, e, "st") || prefix_at(t, len, e, "nd") ||
		    prefix_at(t, len, e, "rd") || prefix_at(t, len, e, "th"))
			return right_ok(t, len, e + 2) ? e + 2 : 0;
		return 0;
	}
	return 0;
}

static bool word_is(const char *t, size_t len, size_t p, size_t e, const struct word_set *ws)
{
	char w[16];

	if (e - p >= sizeof(w))
		return false;
	for (size_t k = p; k < e; k++)
		w[k - p] = (char) to_lower((unsigned char) t[k]);
	return word_in(w, e - p, ws);
}

static size_t word_end(const char *t, size_t len, size_t p)
{
	while (p < len && (is_word((unsigned char) t[p]) || t[p] == '\''))
		p++;
	return p;
}

/* House number: "12", "12A", "12/B", "12 bis", "s/n"; "nº 12", "n. 12", "núm. 12". */
static size_t house_number(const char *t, size_t len, size_t p)
{
	size_t s;

	if (prefix_at_ci(t, len, p, "s/n"))
		return right_ok(t, len, p + 3) ? p + 3 : 0;
	if (prefix_at_ci(t, len, p, "n\xc2\xba ") || prefix_at_ci(t, len, p, "n. ") ||
	    prefix_at_ci(t, len, p, "no. "))
		p = (size_t) ((const char *) memchr(t + p, ' ', len - p) - t) + 1;
	else if (prefix_at_ci(t, len, p, "n\xc2\xba") || prefix_at_ci(t, len, p, "n.\xc2\xba "))
		p += AT(p + 1) == '.' ? 5 : 3;
	else if (prefix_at_ci(t, len, p, "n\xc3\xbam. "))
		p += 6;
	s = p;
	while (p < len && is_digit(t[p]) && p - s < 5)
		p++;
	if (p == s || t[s] == '0')
		return 0;
	if (is_alpha(AT(p)) && right_ok(t, len, p + 1))
		p++;
	else if (AT(p) == '/' && is_alnum(AT(p + 1)) && right_ok(t, len, p + 2))
		p += 2;
	else if (prefix_at(t, len, p, " bis") && right_ok(t, len, p + 4))
		p += 4;
	return right_ok_num(t, len, p) ? p : 0;
}

/* After the street: ", 00184 Roma (RM)", " - 28013 Madrid", ", London SW1A 2AA",
 * ", Springfield, IL 62704". Returns the new end (or e unchanged). */
static size_t address_tail(const char *t, size_t len, size_t e)
{
	size_t p = e, q, best = e;

	if (AT(p) == ',')
		p++;
	else if (prefix_at(t, len, p, " -"))
		p += 2;
	if (AT(p) != ' ')
		return e;
	p++;
	/* postcode first (IT CAP, ES CP, 5 digits) */
	q = p;
	while (q < len && is_digit(t[q]) && q - p < 6)
		q++;
	if (q - p == 5 && AT(q) == ' ') {
		size_t c = q + 1, w;
		int words = 0;
		while ((w = name_word(t, len, c)) && words < 3) {
			best = w;
			words++;
			if (AT(w) == ' ' && (w = name_word(t, len, w + 1))) {
				c = best + 1;
				continue;
			}
			break;
		}
		if (words && prefix_at(t, len, best, " (") && is_upper(AT(best + 2)) &&
		    is_upper(AT(best + 3)) && AT(best + 4) == ')')
			best += 5;
		else if (words && AT(best) == ' ' && is_upper(AT(best + 1)) && is_upper(AT(best + 2)) &&
			 right_ok(t, len, best + 3))
			best += 3;
		return best;
	}
	/* a city, then a state + ZIP or a UK postcode */
	{
		size_t c = p, w, city_end = 0;
		int words = 0;
		while (words < 3 && (w = name_word(t, len, c))) {
			city_end = w;
			words++;
			if (AT(w) == ' ' && name_word(t, len, w + 1))
				c = w + 1;
			else
				break;
		}
		if (!words)
			return e;
		p = city_end;
		if (AT(p) == ',')
			p++;
		if (AT(p) == ' ')
			p++;
		/* US: ST 12345(-6789) */
		if (is_upper(AT(p)) && is_upper(AT(p + 1)) && AT(p + 2) == ' ') {
			q = p + 3;
			while (q < len && is_digit(t[q]) && q - p - 3 < 5)
				q++;
			if (q - p - 3 == 5) {
				if (AT(q) == '-' && is_digit(AT(q + 1))) {
					size_t r = q + 1;
					while (r < len && is_digit(t[r]) && r - q - 1 < 4)
						r++;
					if (r - q - 1 == 4)
						q = r;
				}
				if (right_ok(t, len, q))
					return q;
			}
		}
		/* UK: A9 9AA, A99 9AA, AA9 9AA, AA99 9AA, A9A 9AA, AA9A 9AA */
		q = p;
		if (is_upper(AT(q))) {
			size_t r = q + 1;
			if (is_upper(AT(r)))
				r++;
			if (is_digit(AT(r))) {
				r++;
				if (is_alnum(AT(r)) && AT(r + 1) == ' ')
					r++;
				if (AT(r) == ' ' && is_digit(AT(r + 1)) && is_upper(AT(r + 2)) &&
				    is_upper(AT(r + 3)) && right_ok(t, len, r + 4))
					return r + 4;
			}
		}
		/* a city alone, at the end of a sentence or line */
		if (city_end >= len || strchr(".;)\n\r", t[city_end]))
			return city_end;
	}
	return e;
}

/* "Via Giuseppe Garibaldi 12", "Viale dei Mille, 4", "Calle de Alcalá 45", "C/ Mayor, 3",
 * "Avenida de la Constitución nº 12" (+ the tail). */
static size_t scan_address_it_es(const char *t, size_t len, size_t i)
{
	size_t p, e, w;
	int names = 0;

	switch (to_lower((unsigned char) t[i])) {
	case 'v': case 'p': case 'c': case 'l': case 's': case 'a': case 'r': case 'g': case 't':
		break;
	default:
		return 0;
	}
	e = word_end(t, len, i);
	if (e - i > 10)
		return 0;
	if (AT(e) == '.' || AT(e) == '/')
		e++;
	if (!word_is(t, len, i, e, &ws_it_es_street))
		return 0;
	p = e;
	if (AT(p) == ' ')
		p++;
	else if (t[e - 1] != '/')
		return 0;
	for (;;) {
		size_t we;
		if ((w = name_word(t, len, p))) {
			names++;
			p = w;
		} else if ((we = word_end(t, len, p)) > p &&
			   word_is(t, len, p, we, &ws_name_particles))
			p = we;
		else if (prefix_at_ci(t, len, p, "d'") || prefix_at_ci(t, len, p, "dell'")) {
			p += AT(p + 1) == '\'' ? 2 : 5;
			continue;
		} else
			break;
		if (names > 6)
			return 0;
		if (AT(p) == ',' && AT(p + 1) == ' ')
			p++;
		if (AT(p) != ' ')
			break;
		{
			size_t h = house_number(t, len, p + 1);
			if (h && names) {
				/* "Via Roma 12" */
				return address_tail(t, len, h);
			}
		}
		p++;
	}
	return 0;
}

/* "221B Baker Street", "1600 Pennsylvania Avenue NW, Washington, DC 20500". */
static size_t scan_address_en(const char *t, size_t len, size_t i)
{
	size_t p = i, w;
	int names = 0;

	while (p < len && is_digit(t[p]) && p - i < 5)
		p++;
	if (is_alpha(AT(p)) && AT(p + 1) == ' ')
		p++;
	if (AT(p) != ' ' || t[i] == '0')
		return 0;
	p++;
	while ((w = name_word(t, len, p)) && names < 5) {
		size_t we = w;
		if (AT(we) == '.' && word_is(t, len, p, we + 1, &ws_en_suffix) &&
		    !word_is(t, len, p, we, &ws_en_suffix))
			we++; /* "St." */
		if (names > 0 && word_is(t, len, p, we, &ws_en_suffix)) {
			size_t e = we;
			if (!right_ok(t, len, e))
				return 0;
			/* NW, NE, SW, SE */
			if (AT(e) == ' ' && strchr("NS", AT(e + 1)) && strchr("EW", AT(e + 2)) &&
			    AT(e + 2) && right_ok(t, len, e + 3))
				e += 3;
			return address_tail(t, len, e);
		}
		names++;
		if (AT(w) != ' ')
			return 0;
		p = w + 1;
	}
	return 0;
}

/* ---- the walk ---- */

/* The end of "CC99 XXXX XXXX ..." (15+ characters), else i + 1. */
static size_t iban_shape_end(const char *t, size_t len, size_t i)
{
	size_t p = i, n = 0;

	if (!(is_upper(AT(i)) && is_upper(AT(i + 1)) && is_digit(AT(i + 2)) && is_digit(AT(i + 3))))
		return i + 1;
	while (p < len && n < 34) {
		if (is_alnum(t[p])) {
			n++;
			p++;
		} else if (t[p] == ' ' && n % 4 == 0 && p + 1 < len && is_alnum(t[p + 1]))
			p++;
		else
			break;
	}
	return n >= 15 ? p : i + 1;
}

/* The detectors that can start at i, by its first byte. Returns the end, 0 for none. */
static size_t scan_inner(const char *t, size_t len, size_t i, enum detect_kind *kind,
			 size_t *ret_start);

static size_t scan_at(const char *t, size_t len, size_t i, enum detect_kind *kind,
		      size_t *ret_start, int depth)
{
	int c = (unsigned char) t[i];
	size_t e;

#define TRY(k, expr)                                                                               \
	do {                                                                                       \
		if ((e = (expr))) {                                                                \
			*kind = (k);                                                               \
			*ret_start = i;                                                            \
			return e;                                                                  \
		}                                                                                  \
	} while (0)

	if (c == '-') {
		TRY(DETECT_PRIVATE_KEY, scan_pem(t, len, i));
		if ((e = credential_scan_cli(t, len, i, ret_start))) {
			*kind = DETECT_SECRET;
			return e;
		}
		return 0;
	}
	if (c == '+' || c == '(') {
		if (left_ok_num(t, i))
			TRY(DETECT_PHONE, scan_phone(t, len, i));
		return 0;
	}
	if (c == ':') {
		if (AT(i + 1) == ':')
			TRY(DETECT_IP, scan_ipv6(t, len, i));
		return 0;
	}
	if (is_digit(c)) {
		if (!left_ok_num(t, i))
			return 0;
		if ((e = credential_scan_token(t, len, i, kind))) {
			*ret_start = i;
			return e;
		}
		TRY(DETECT_ADDRESS, scan_address_en(t, len, i));
		TRY(DETECT_CARD, scan_card(t, len, i));
		TRY(DETECT_US_SSN, scan_ssn(t, len, i));
		TRY(DETECT_ES_DNI, scan_dni(t, len, i));
		TRY(DETECT_IP, scan_ipv4(t, len, i));
		TRY(DETECT_IP, scan_ipv6(t, len, i));
		TRY(DETECT_PHONE, scan_phone(t, len, i));
		TRY(DETECT_EMAIL, scan_email(t, len, i));
		return 0;
	}
	if (is_alpha(c)) {
		TRY(DETECT_JWT, scan_jwt(t, len, i));
		TRY(DETECT_API_KEY, scan_discord(t, len, i));
		if ((e = credential_scan_url(t, len, i, kind, ret_start)))
			return e;
		if ((e = credential_scan_token(t, len, i, kind))) {
			*ret_start = i;
			return e;
		}
		TRY(DETECT_EMAIL, scan_email(t, len, i));
		TRY(DETECT_IBAN, scan_iban(t, len, i));
		TRY(DETECT_IT_CODICE_FISCALE, scan_codice_fiscale(t, len, i));
		TRY(DETECT_ES_NIE, scan_nie(t, len, i));
		TRY(DETECT_ADDRESS, scan_address_it_es(t, len, i));
		if (is_hex(c))
			TRY(DETECT_IP, scan_ipv6(t, len, i));
		if (depth == 0)
			return credential_scan_phrase(t, len, i, scan_inner, kind, ret_start);
		return 0;
	}
	return 0;
#undef TRY
}

/* scan_at() for a value that a key phrase introduces: the detectors but the phrase one. */
static size_t scan_inner(const char *t, size_t len, size_t i, enum detect_kind *kind,
			 size_t *ret_start)
{
	return scan_at(t, len, i, kind, ret_start, 1);
}

static int push(struct detect_matches *m, enum detect_kind k, size_t s, size_t e)
{
	if (m->n == m->cap) {
		size_t nc = m->cap ? m->cap * 2 : 16;
		struct detect_match *v = realloc(m->v, nc * sizeof(*v));
		if (!v)
			return -ENOMEM;
		m->v = v;
		m->cap = nc;
	}
	m->v[m->n++] = (struct detect_match){ .kind = k, .start = s, .end = e };
	return 0;
}

static struct word_set ws_ctx_filler = WORD_SET(ctx_filler),
		       ws_ctx_positive = WORD_SET(ctx_positive),
		       ws_ctx_negative = WORD_SET(ctx_negative),
		       ws_ctx_version = WORD_SET(ctx_version),
		       ws_it_es_street = WORD_SET(it_es_street),
		       ws_name_particles = WORD_SET(name_particles),
		       ws_en_suffix = WORD_SET(en_suffix);
static pthread_once_t word_sets_once = PTHREAD_ONCE_INIT;
static uint32_t cand2_len[26][26];
static uint32_t cand_len[26];

static void word_sets_init(void)
{
	struct word_set *all[] = { &ws_ctx_filler,     &ws_ctx_positive,   &ws_ctx_negative,
				   &ws_ctx_version,    &ws_it_es_street,   &ws_name_particles,
				   &ws_en_suffix };

	for (size_t i = 0; i < ELEMENTSOF(all); i++)
		word_set_init(all[i]);
	credential_init();
	/* plain_word_end()'s filters: bit n of cand_len[a] and of cand2_len[a][b] when some
	 * credential head or street word of n bytes starts with the letter a (then b) (a street
	 * word's final '.' not counted, as the caller tries the word with and without it) */
	const size_t n_heads = credential_n_heads();
	for (size_t k = 0; k < n_heads + ws_it_es_street.n; k++) {
		const char *w =
			k < n_heads ? credential_head(k) : ws_it_es_street.list[k - n_heads];
		size_t n = strlen(w);
		if (!is_lower((unsigned char) w[0]))
			continue;
		cand_len[w[0] - 'a'] |= 1u << n;
		if (w[n - 1] == '.')
			cand_len[w[0] - 'a'] |= 1u << (n - 1);
		if (n < 2 || !is_lower((unsigned char) w[1]))
			continue;
		cand2_len[w[0] - 'a'][w[1] - 'a'] |= 1u << n;
		if (w[n - 1] == '.')
			cand2_len[w[0] - 'a'][w[1] - 'a'] |= 1u << (n - 1);
	}
}

/* The end of the run of lower-case ASCII letters from q. */
static inline size_t lower_run_end(const char *t, size_t len, size_t q)
{
	return byte_class_run_end((const unsigned char *) t, len, q, dclass, DC_LOWER);
}

/*
 * Most word starts begin a plain word: ASCII letters, lower case after the first, followed by
 * a space or punctuation that no detector continues over. Returns the word's end when no
 * detector can match at i, else 0 (the caller then tries them all). Why each one cannot:
 *   JWT "eyJ", AKIA/ASIA/AIza need a capital after the first letter; the other API keys, an
 *   e-mail ('@' or a local part going on), IPv6 (':'), IBAN and NIE (digits) need a byte the
 *   follow rule below excludes; a key word in a word without inner capitals, '_', '-' or '.'
 *   starts at no part boundary but the word's own start, so it is the whole word. What is
 *   left: a whole-word key word, a street word, 16 letters (a codice fiscale in omocodia)
 *   and "X"/"Y"/"Z" before " 1234567L" (NIE) go the slow way.
 */
static size_t plain_word_end(const char *t, size_t len, size_t i)
{
	size_t q = i + 1, n;
	int c, f = to_lower((unsigned char) t[i]);

	q = lower_run_end(t, len, q);
	n = q - i;
	if (q < len && (dclass[(unsigned char) t[q]] & DC_GOES_ON))
		return 0;
	c = AT(q);
	if (c == '.') {
		/* end of a sentence: ". " or the end; "a.b" may be an e-mail or a host */
		int d = AT(q + 1);
		if (q + 1 < len && d != ' ' && d != '\n' && d != '\r' && d != '\t')
			return 0;
	}
	/* by first letter (the caller saw a letter: f is lower case), the lengths of the
	 * credential heads and street words (bit n: n bytes), built by word_sets_init() */
	/* the lengths that go the slow way whatever the letters: 16 (a codice fiscale), and 1
	 * for X, Y, Z (a NIE) */
	uint32_t bit = n < 32 ? 1u << n : 0;
	if ((bit & (1u << 16 | (f >= 'x' ? 1u << 1 : 0))) != 0)
		return 0;
	if (!(cand_len[f - 'a'] & bit))
		return q;
	/* the same by the first two letters (built from the lists by word_sets_init()): most
	 * words that get past the first letter fail here, before any list is walked */
	if (n >= 2 && !(cand2_len[f - 'a'][t[i + 1] - 'a'] & bit))
		return q;
	/* the word lower-cased once for the lists (n < 16: the bits above stop longer ones) */
	char w[16];
	for (size_t k = 0; k < n; k++)
		w[k] = (char) to_lower((unsigned char) t[i + k]);
	if (credential_is_head(w, n))
		return 0;
	if (n <= 10 && word_in(w, n, &ws_it_es_street))
		return 0;
	if (n <= 10 && c == '.') {
		w[n] = '.';
		if (word_in(w, n + 1, &ws_it_es_street))
			return 0;
	}
	return q;
}

/* By start: the context pass appends after the walk's matches, which are in order. */
static void sort_matches(struct detect_match *v, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		struct detect_match x = v[i];
		size_t j = i;
		while (j > 0 && v[j - 1].start > x.start) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
}

int detect_scan_flags(const char *t, size_t len, struct detect_matches *m, unsigned flags)
{
	const bool shortcut = !(flags & DETECT_SCAN_NO_SHORTCUT);
	/* no seed phrase starts before seed_next or inside a match (before last_end); one
	 * word start of letters in four (counted in words) is tried */
	size_t i = 0, seed_next = 0, last_end = 0, first = m->n, n_walk;
	unsigned words = 0;
	int r;

	if (!t)
		return 0;
	pthread_once(&word_sets_once, word_sets_init);
	while (i < len) {
		int c = (unsigned char) t[i];
		enum detect_kind k;
		size_t e, s = i;

		/* only word starts (and the punctuation some values start with) are tried */
		if ((i > 0 && (dclass[(unsigned char) t[i - 1]] & DC_WORD) && c != '-') ||
		    !(dclass[c] & DC_START)) {
			/* but a seed phrase may start with "ábaco" */
			if (c == 0xc3 && (i == 0 || !(dclass[(unsigned char) t[i - 1]] & DC_WORD))
			    /* (the same sampling as below) */
			    && (++words & 3) == 0 && i >= seed_next &&
			    (e = credential_scan_seed(t, len, MAX(seed_next, last_end), i, &s,
						      &seed_next))) {
				r = push(m, DETECT_SEED_PHRASE, s, e);
				if (r < 0)
					return r;
				i = last_end = e;
				continue;
			}
			i++;
			continue;
		}
		/* seed phrases: runs of plain words, so before the plain-word shortcut */
		if ((dclass[c] & DC_ALPHA) && (++words & 3) == 0 && i >= seed_next &&
		    (e = credential_scan_seed(t, len, MAX(seed_next, last_end), i, &s,
					      &seed_next))) {
			r = push(m, DETECT_SEED_PHRASE, s, e);
			if (r < 0)
				return r;
			i = last_end = e;
			continue;
		}
		if ((dclass[c] & DC_ALPHA) && shortcut && (e = plain_word_end(t, len, i))) {
			/* the byte after a plain word, when no detector starts there, is passed
			 * here rather than by the test above */
			i = e < len && !(dclass[(unsigned char) t[e]] & DC_START) ? e + 1 : e;
			continue;
		}
		e = scan_at(t, len, i, &k, &s, 0);
		if (!e) {
			/* an IBAN-shaped run that failed mod-97 is not a phone number's source */
			i = is_alpha(c) ? iban_shape_end(t, len, i) : i + 1;
			continue;
		}
		r = push(m, k, s, e);
		if (r < 0)
			return r;
		i = last_end = e;
		/* an AWS access key id and, right after it, its secret key */
		if (k == DETECT_API_KEY && e - s == 20 && t[s] == 'A' && t[s + 2] == 'I' &&
		    (e = credential_scan_aws_secret(t, len, i, &s))) {
			r = push(m, DETECT_SECRET, s, e);
			if (r < 0)
				return r;
			i = last_end = e;
		}
	}
	/* the context pass: values further from their key words, tables, config lines */
	n_walk = m->n;
	r = credential_scan_context(t, len, m, first, push);
	if (r < 0)
		return r;
	if (m->n > n_walk)
		sort_matches(m->v + first, m->n - first);
	return 0;
}

int detect_scan(const char *t, size_t len, struct detect_matches *m)
{
	return detect_scan_flags(t, len, m, 0);
}

void detect_matches_done(struct detect_matches *m)
{
	free(m->v);
	*m = (struct detect_matches){ 0 };
}
