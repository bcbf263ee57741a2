/* SPDX-License-Identifier: MIT */
/*
 * credential-context.c: the context pass (see credential.h). The phrase grammar reads a key
 * phrase and the value right after it; people also write the value further on ("I changed
 * the password, now it's Girasole_2024"), before the key word ("hunter2025 — that's the
 * new root password"), in a table under a "password" column, in a config line whose format
 * names it (.pgpass, PHP's define()), as a password hash, or as a list of recovery codes
 * or seed words some words after their name. These rules run once over the text after the
 * walk, each from a key word or a byte that is rare in prose, so most text costs a pass over
 * its words and nothing more.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "../basic/macro.h"
#include "ascii-class.h"
#include "credential-private.h"
#include "credential.h"

#define AT(i) ((i) < len ? (unsigned char) t[i] : 0)

/* ---- what the key words are ---- */

enum role {
	ROLE_NONE,
	ROLE_PASSWORD, /* password, contraseña, clave: a value of any shape near */
	ROLE_PIN,      /* pin, puk, passcode: digits near */
	ROLE_CODE,     /* code, codice, código: digits near, with an access word */
	ROLE_CODES,    /* codes, códigos, codici: a list of codes, with a recovery word */
	ROLE_SEED,     /* seed, mnemonic, frase, phrase: a run of BIP-39 words */
	ROLE_LOCK,     /* safe, lock, alarm: digits right after a copula ("was set to 7391") */
};

struct role_word {
	const char *w;
	enum role role;
};

/* clang-format off */
static const struct role_word role_words[] = {
	{ "password", ROLE_PASSWORD }, { "passwords", ROLE_PASSWORD }, { "passwd", ROLE_PASSWORD },
	{ "pwd", ROLE_PASSWORD }, { "pw", ROLE_PASSWORD }, { "psw", ROLE_PASSWORD },
	{ "pswd", ROLE_PASSWORD }, { "passphrase", ROLE_PASSWORD }, { "passwort", ROLE_PASSWORD },
	{ "senha", ROLE_PASSWORD }, { "contrase\xc3\xb1" "a", ROLE_PASSWORD },
	{ "contrase\xc3\xb1" "as", ROLE_PASSWORD }, { "contrasena", ROLE_PASSWORD },
	{ "clave", ROLE_PASSWORD }, { "llave", ROLE_PASSWORD }, { "psk", ROLE_PASSWORD },
	{ "pass", ROLE_PASSWORD }, { "contra", ROLE_PASSWORD }, { "passw", ROLE_PASSWORD },
	{ "cod", ROLE_CODE }, { "chiave", ROLE_PASSWORD }, { "secreto", ROLE_PIN },
	{ "segreto", ROLE_PIN }, { "antifurto", ROLE_LOCK }, { "antirrobo", ROLE_LOCK },
	{ "wpa", ROLE_PASSWORD }, { "wpa2", ROLE_PASSWORD }, { "wpa3", ROLE_PASSWORD },
	{ "pin", ROLE_PIN }, { "pins", ROLE_PIN }, { "puk", ROLE_PIN }, { "pincode", ROLE_PIN },
	{ "passcode", ROLE_PIN }, { "passkey", ROLE_PIN }, { "code", ROLE_CODE }, { "codice", ROLE_CODE },
	{ "c\xc3\xb3" "digo", ROLE_CODE }, { "codigo", ROLE_CODE }, { "combination", ROLE_CODE },
	{ "combinazione", ROLE_CODE }, { "combinaci\xc3\xb3n", ROLE_CODE }, { "combo", ROLE_CODE },
	{ "codes", ROLE_CODES }, { "codici", ROLE_CODES }, { "c\xc3\xb3" "digos", ROLE_CODES },
	{ "codigos", ROLE_CODES }, { "seed", ROLE_SEED }, { "mnemonic", ROLE_SEED },
	{ "mnemonica", ROLE_SEED }, { "mnem\xc3\xb3nica", ROLE_SEED }, { "semilla", ROLE_SEED },
	{ "frase", ROLE_SEED }, { "phrase", ROLE_SEED }, { "parole", ROLE_SEED },
	{ "palabras", ROLE_SEED }, { "words", ROLE_SEED }, { "wallet", ROLE_SEED },
	{ "safe", ROLE_LOCK }, { "cassaforte", ROLE_LOCK }, { "lock", ROLE_LOCK },
	{ "padlock", ROLE_LOCK }, { "lucchetto", ROLE_LOCK }, { "candado", ROLE_LOCK },
	{ "alarm", ROLE_LOCK }, { "allarme", ROLE_LOCK }, { "alarma", ROLE_LOCK },
	{ "keypad", ROLE_LOCK }, { "tastierino", ROLE_LOCK }, { "locker", ROLE_LOCK },
	{ "armadietto", ROLE_LOCK }, { "taquilla", ROLE_LOCK }, { "lockbox", ROLE_LOCK },
	{ "fuerte", ROLE_LOCK }, { "door", ROLE_LOCK }, { "gate", ROLE_LOCK },
	{ "garage", ROLE_LOCK }, { "portone", ROLE_LOCK },
	{ "cancello", ROLE_LOCK }, { "puerta", ROLE_LOCK }, { "portal", ROLE_LOCK },
	{ "port\xc3\xb3n", ROLE_LOCK }, { "garaje", ROLE_LOCK }, { "trastero", ROLE_LOCK },
	{ "citofono", ROLE_LOCK }, { "portero", ROLE_LOCK }, { "intercom", ROLE_LOCK },
	{ "buz\xc3\xb3n", ROLE_LOCK }, { "cochera", ROLE_LOCK }, { "sblocco", ROLE_LOCK },
	{ "desbloqueo", ROLE_LOCK },
};

static const char *const number_words[] = {
	"number", "numero", "n\xc3\xbamero", "digits", "cifre", NULL,
};
static const char *const secret_adjectives[] = {
	"security", "secret", "segreto", "secreto", "sicurezza", "seguridad", "access", "pin",
	"accesso", "acceso", NULL,
};

/* Digits said in words (dictated PINs). */
static const char *const digit_words[] = {
	"zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
	"uno", "due", "tre", "quattro", "cinque", "sei", "sette", "otto", "nove", "cero", "dos",
	"tres", "cuatro", "cinco", "seis", "siete", "ocho", "nueve", NULL,
};

/* Key words that are also ordinary words ("pass", "contra", "chiave", "llave"): a copula or
 * a mark must come between them and their value. */
static const char *const weak_heads[] = { "pass", "contra", "chiave", "llave", NULL };

/* Verbs of change that link a key to its new value ("cambia in 1185B", "changes to"). */
static const char *const change_words[] = {
	"cambia", "cambiano", "diventa", "becomes", "changes", "change", "changed", "cambi\xc3\xb3",
	"cambiado", "cambiato", "cambiata", "cambiada", "passa", "pasa", "with", "con", "using",
	"usando", "digitare", "digita", "digitate", "teclea", "teclear", "marca", "marcar", "type",
	"enter", "press", "premi", "pulsa", "inserire", "inserisci", "introduce", "introducir",
	"dial", "punch", "sea", "cio\xc3\xa8", "cioe", "i.e.", "ie", "namely", "it's", "it\xe2\x80\x99s",
	NULL,
};

/* Words after a copula that keep it linking ("was set to", "è stata impostata a"). */
static const char *const link_keep[] = {
	"set", "to", "now", "still", "changed", "reset", "just", "a", "in", "stata", "stato",
	"impostata", "impostato", "cambiata", "cambiato", "ora", "adesso", "ahora", "puesta",
	"puesto", "cambiada", "cambiado", "been", "has", "ha", "sido", "always", "sempre",
	"siempre", "currently", "attualmente", "actualmente", NULL,
};

/* Words that make a list of codes one of recovery codes. */
static const char *const recovery_words[] = {
	"backup", "recovery", "emergency", "2fa", "mfa", "one-time", "recupero", "emergenza",
	"riserva", "backup", "recuperaci\xc3\xb3n", "recuperacion", "respaldo", "emergencia",
	"seguridad", "sicurezza", "security", "verification", "verifica", "verificaci\xc3\xb3n",
	NULL,
};

/* Words that may stand between a value and the key word after it ("X — that's my new
 * password", "X → è la password di", "X es la contraseña"). */
static const char *const link_words[] = {
	"that's", "thats", "that", "this", "it's", "its", "it", "is", "was", "my", "our", "your",
	"the", "new", "old", "current", "literally", "just", "also", "actually", "basically",
	"still", "as", "for", "of", "a", "e", "\xc3\xa8", "era", "la", "il", "lo", "mia", "mio",
	"tua", "tuo", "nostra", "nuova", "nuovo", "vecchia", "attuale", "come", "della", "del",
	"di", "per", "questa", "questo", "es", "el", "mi", "tu", "su", "nueva", "nuevo", "vieja",
	"actual", "como", "de", "para", "esta", "este", "ser\xc3\xa1", "sar\xc3\xa0", "will",
	"be", "now", "ora", "adesso", "ahora", "sempre", "siempre", "always", NULL,
};

/* "as": the value before it is named by the key word after ("X as my password"). */
static const char *const as_words[] = { "as", "come", "como", NULL };
/* "the password of / for / del / di un X": X is what it opens (read past articles) */
static const char *const owner_words[] = {
	"of", "del", "della", "dello", "dell'", "dei", "degli", "delle", "di", "de", NULL,
};
static const char *const article_words[] = {
	"the", "a", "an", "il", "lo", "la", "l'", "i", "gli", "le", "un", "una", "uno", "el",
	"los", "las", "mio", "mia", "my", "mi", "tuo", "your", "tu", "su", "our", "nostro", NULL,
};

/* Words that make the words before "is my password" a description, not a passphrase. */
static const char *const subject_words[] = {
	"which", "what", "one", "same", "mine", "yours", "here", "there", "thing", "something",
	"nothing", "everything", "whatever", "also", "only", "not", "and", "but", "all", "any",
	"some", "who", "where", "why", "how", "when", "then", "than", "there", "these", "those",
	"with", "without", "and", "you", "she", "they", "his", "her", "their", "name", "birthday",
	"date", "dog", "cat", "number", "wife", "husband", NULL,
};

/* Account names that, with "/" or ":" and a strong value, make a login ("root / X"). */
static const char *const account_names[] = {
	"root", "admin", "administrator", "administrador", "amministratore", "sa", "postgres",
	"ubuntu", "pi", "guest", "oracle", "superuser", "sysadmin", "elastic", "ec2-user",
	"debian", "operator", "supervisor", "webmaster", "ftpuser", "dbadmin", NULL,
};

/* The accounts written "admin/Imprime2019" with no spaces (not "debian/rules2024"). */
static const char *const tight_accounts[] = {
	"root", "admin", "administrator", "administrador", "amministratore", "sa", "guest",
	"superuser", "sysadmin", "dbadmin", NULL,
};

/* Words with digits that name a technology, not a value ("SHA256", "python3"). */
static const char *const tech_words[] = {
	"sha1", "sha256", "sha384", "sha512", "sha-256", "sha-512", "md5", "utf8", "utf-8",
	"utf-16", "ipv4", "ipv6", "http2", "http/2", "x509", "x.509", "aes128", "aes256",
	"aes-256", "aes-128", "rsa2048", "rsa4096", "pbkdf2", "argon2", "argon2id", "bcrypt",
	"scrypt", "oauth2", "oauth", "base64", "base32", "python3", "python2", "win10", "win11",
	"windows10", "windows11", "mp3", "mp4", "h264", "h265", "k8s", "i18n", "l10n", "1password",
	"2fa", "mfa", "wpa2", "wpa3", "ed25519", "p256", "secp256k1", "x86_64", "arm64", "amd64",
	"ubuntu22", "debian12", "es6", "html5", "css3", "s3", "ec2", "gpt-4", "gpt4", "ps5", "3ds",
	"pkcs12", "pkcs#12", "pkcs8", "log4j", "node18", "node20", "fail2ban", "x25519",
	"ed448", "rsa3072", "p384", "p521", "nistp256", "chacha20", "poly1305", "aes-gcm",
	"sha3", "sha3-256", "blake2", "blake3", "tls1.2", "tls1.3", "ipv4-only", NULL,
};
/* clang-format on */

static bool in_list(const char *w, size_t n, const char *const *list)
{
	for (; *list; list++)
		if ((*list)[0] == w[0] && strnlen(*list, n + 1) == n && memcmp(*list, w, n) == 0)
			return true;
	return false;
}

/* role_words by hash (filled by gate_init()): 0 empty, else 1 + index. */
#define ROLE_SLOTS 256u
static uint8_t role_slot[ROLE_SLOTS];

static uint32_t word_hash(const char *w, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t k = 0; k < n; k++)
		h = (h ^ (unsigned char) w[k]) * 16777619u;
	return h ^ (h >> 13);
}

static enum role role_of(const char *w, size_t n)
{
	for (uint32_t i = word_hash(w, n) & (ROLE_SLOTS - 1);; i = (i + 1) & (ROLE_SLOTS - 1)) {
		unsigned e = role_slot[i];
		if (!e)
			return ROLE_NONE;
		const char *r = role_words[e - 1].w;
		if (r[0] == w[0] && strnlen(r, n + 1) == n && memcmp(r, w, n) == 0)
			return role_words[e - 1].role;
	}
}

/* ---- tokens ---- */

/* A token: a run of bytes that are not white space, [s, e); its core [cs, ce) without the
 * quotes, brackets and sentence punctuation around it. */
struct token {
	size_t s, e, cs, ce;
	bool quoted; /* the core was between quotes */
};

static bool open_punct(const char *t, size_t len, size_t i, size_t *n)
{
	unsigned char b = (unsigned char) t[i];

	if (b < 0x80 && b != '"' && b != '\'' && b != '(' && b != '[' && b != '`')
		return false;
	static const char *const open[] = {
		"\"", "'", "(", "[", "`", "\xc2\xab", "\xe2\x80\x9c", "\xe2\x80\x98", NULL,
	};
	for (size_t k = 0; open[k]; k++) {
		size_t m = strlen(open[k]);
		if (i + m <= len && memcmp(t + i, open[k], m) == 0) {
			*n = m;
			return true;
		}
	}
	return false;
}

static bool close_punct_before(const char *t, size_t s, size_t e, size_t *n)
{
	unsigned char b = (unsigned char) t[e - 1];

	if (b < 0x80 && !strchr("\"')]`,.;:?", b))
		return false;
	static const char *const close[] = {
		"\"", "'", ")", "]", "`", ",", ".", ";", ":", "?", "\xc2\xbb", "\xe2\x80\x9d",
		"\xe2\x80\x99", NULL,
	};
	for (size_t k = 0; close[k]; k++) {
		size_t m = strlen(close[k]);
		if (e - s >= m && memcmp(t + e - m, close[k], m) == 0) {
			*n = m;
			return true;
		}
	}
	return false;
}

static void token_core(const char *t, size_t len, struct token *k)
{
	size_t n;

	k->cs = k->s;
	k->ce = k->e;
	k->quoted = false;
	/* most tokens are a word and a space */
	if (is_alnum(t[k->cs]) && is_alnum(t[k->ce - 1]))
		return;
	while (k->cs < k->ce && open_punct(t, len, k->cs, &n)) {
		k->quoted |= t[k->cs] == '"' || t[k->cs] == '\'' || (unsigned char) t[k->cs] >= 0x80;
		k->cs += n;
	}
	while (k->ce > k->cs && close_punct_before(t, k->cs, k->ce, &n))
		k->ce -= n;
}

/* The token at or after p, stopping at lim; false at a line end (with *ret_nl at it) or at
 * lim. */
static bool next_token_q(const char *t, size_t len, size_t p, size_t lim, struct token *k,
			 size_t *ret_nl, bool phrases);

static bool next_token(const char *t, size_t len, size_t p, size_t lim, struct token *k,
		       size_t *ret_nl)
{
	return next_token_q(t, len, p, lim, k, ret_nl, true);
}

/* next_token(), with a quoted phrase as one token when phrases is set. */
static bool next_token_q(const char *t, size_t len, size_t p, size_t lim, struct token *k,
			 size_t *ret_nl, bool phrases)
{
	while (p < lim && (t[p] == ' ' || t[p] == '\t' || t[p] == '\r'))
		p++;
	*ret_nl = SIZE_MAX;
	if (p >= lim)
		return false;
	if (t[p] == '\n') {
		*ret_nl = p;
		return false;
	}
	k->s = p;
	{
		/* a quoted phrase is one token: "sol y sombra 44" */
		size_t qn = 0;
		char close = 0;
		if (!phrases)
			close = 0;
		else if (open_punct(t, len, p, &qn) && (t[p] == '"' || t[p] == '\''))
			close = t[p];
		else if (open_punct(t, len, p, &qn) && qn == 3 && (unsigned char) t[p + 2] == 0x9c)
			close = (char) 0x9d; /* “ ” */
		if (close) {
			size_t q = p + qn;
			while (q < len && q - p < 80 && t[q] != '\n' &&
			       !(t[q] == close && (close != (char) 0x9d || (unsigned char) t[q - 2] == 0xe2)))
				q++;
			if (q < len && t[q] == close && memchr(t + p, ' ', q - p)) {
				p = q + 1;
				while (p < len && !is_space(t[p]))
					p++;
				k->e = p;
				token_core(t, len, k);
				return true;
			}
		}
	}
	while (p < len && !is_space(t[p]))
		p++;
	k->e = p;
	token_core(t, len, k);
	return true;
}

/* The folded word of a token's core (letters, digits, UTF-8, '\'', '-'), or false. */
static bool token_word(const char *t, const struct token *k, char *w, size_t size, size_t *n)
{
	size_t m = k->ce - k->cs;

	if (m == 0 || m >= size)
		return false;
	for (size_t i = k->cs; i < k->ce; i++)
		if (!is_word((unsigned char) t[i]) && t[i] != '\'' && t[i] != '-')
			return false;
	*n = m;
	return credential_fold(t + k->cs, m, w, size);
}

/* ---- what a value looks like ---- */

static size_t count_digits(const char *s, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += is_digit(s[i]);
	return k;
}

static size_t count_of(const char *s, size_t n, char c)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += s[i] == c;
	return k;
}

static bool all_of(const char *s, size_t n, bool (*test)(int c))
{
	for (size_t k = 0; k < n; k++)
		if (!test((unsigned char) s[k]))
			return false;
	return true;
}

static bool hex_or_dash(int c)
{
	return is_hex(c) || c == '-';
}
static bool date_byte(int c)
{
	return is_digit(c) || c == '-' || c == '/' || c == ':' || c == '.' || c == 'T' || c == 'Z';
}

/* Letters then digits, capitals only ("SHA256", "INC0012345", "CVE-2024-1234", "RFC7617"):
 * an identifier of a thing. */
static bool acronym_number(const char *s, size_t n)
{
	size_t k = 0;

	while (k < n && is_upper(s[k]))
		k++;
	if (k == 0 || k > 6)
		return false;
	for (; k < n; k++)
		if (!is_digit(s[k]) && s[k] != '-' && s[k] != '_' && s[k] != '.')
			return false;
	return true;
}

/* The weak passwords that lists of weak passwords quote ("password123", "Qwerty1!",
 * "admin1234"): examples in a question about them, when no copula names them a value. */
static bool famous_weak(const char *s, size_t n)
{
	static const char *const words[] = {
		"password", "passw", "passwd", "pass", "qwerty", "qwertz", "azerty", "admin",
		"letmein", "welcome", "iloveyou", "abc", "monkey", "dragon", "changeme", "test",
		"user", "root", "secret", "contrasena", "clave", "passwort", "asdf", "football",
		"princess", "sunshine", NULL,
	};
	static const char *const digits[] = {
		"", "1", "12", "123", "1234", "12345", "123456", "0", "00", "000", "111", "321", NULL,
	};
	char l[24], d[12];
	size_t nl = 0, nd = 0;

	for (size_t k = 0; k < n; k++) {
		int c = (unsigned char) s[k];
		if (is_alpha(c) && nl < sizeof(l) - 1)
			l[nl++] = (char) to_lower(c);
		else if (is_digit(c) && nd < sizeof(d) - 1)
			d[nd++] = (char) c;
		else if (!strchr("!.?@#$_-", c))
			return false;
	}
	l[nl] = d[nd] = 0;
	if (!in_list(l, nl, words))
		return false;
	for (size_t k = 0; digits[k]; k++)
		if (strcmp(d, digits[k]) == 0)
			return true;
	return false;
}

/*
 * A value that reads as a password wherever it stands: letters with digits or symbols,
 * 6 to 64 bytes, that is not an identifier of something else (a path, an e-mail, a URL, a
 * version, a date, a hash, a UUID, a unit, a technology's name, code).
 */
static bool strong_value_shape(const char *s, size_t n);

/* Not a value, whatever its shape: a masked one ("P********1", "ab•••••"), a key chord
 * ("Ctrl+D", "Alt+F4"), an attribute ('autoComplete="new-password'), a variable or an index
 * in code ("$PW", "$riga['hash']", "${pw}"). */
static bool masked_or_code(const char *s, size_t n)
{
	static const char *const chords[] = { "ctrl+", "alt+", "cmd+", "shift+", "super+", "win+",
					      "strg+", "option+", "meta+", NULL };
	char w[8];
	size_t stars = 0;

	for (size_t k = 0; k < n; k++) {
		stars = s[k] == '*' ? stars + 1 : 0;
		if (stars >= 3)
			return true;
		/* "$riga" after a space or a bracket ("Pa$sword" keeps its '$') */
		if (s[k] == '$' && k + 1 < n && (k == 0 || !is_alnum(s[k - 1])) &&
		    (is_alpha(s[k + 1]) || s[k + 1] == '_' || s[k + 1] == '{'))
			return true;
		if (k + 1 < n && (s[k] == '=' || s[k] == '[') && (s[k + 1] == '"' || s[k + 1] == '\''))
			return true;
	}
	if (memmem(s, n, "\xe2\x80\xa2\xe2\x80\xa2", 6))
		return true; /* "••" */
	for (size_t k = 0; chords[k]; k++) {
		size_t cn = strlen(chords[k]);
		if (n > cn && credential_fold(s, cn, w, sizeof(w)) && memcmp(w, chords[k], cn) == 0)
			return true;
	}
	return false;
}

static bool strong_value(const char *s, size_t n)
{

	if (credential_is_snake_name(s, n))
		return false;
	return strong_value_shape(s, n);
}

/* strong_value() but for the snake_case test ("pepino_loco2020" after a copula is one). */
static bool strong_value_shape(const char *s, size_t n)
{
	struct value_shape h;
	const char *at;

	if (n < 6 || n > 64 || credential_is_placeholder(s, n) || credential_is_code_like(s, n) ||
	    famous_weak(s, n))
		return false;
	if (memchr(s, '/', n) || memchr(s, '\\', n) || memchr(s, '<', n) || memchr(s, '>', n))
		return false;
	if (masked_or_code(s, n))
		return false;
	at = memchr(s, '@', n);
	if (at && memchr(at, '.', n - (size_t) (at - s)))
		return false; /* an e-mail address or user@host */
	h = credential_shape_of(s, n);
	if (h.lower + h.upper + h.utf8 == 0)
		return false; /* digits and punctuation: a number, a date */
	{
		/* "user=mrossi", "lang=es": an assignment, not a value */
		const char *eq = memchr(s, '=', n);
		if (eq && eq > s) {
			bool ident = true;
			for (const char *q = s; q < eq; q++)
				ident &= is_alpha(*q) || *q == '_' || *q == '-';
			if (ident)
				return false;
		}
	}
	/* an SSH public key's blob ("AAAAB3NzaC1yc2E...") */
	if (n >= 20 && memcmp(s, "AAAA", 4) == 0 && (memcmp(s + 4, "B3NzaC1", 7) == 0 ||
						      memcmp(s + 4, "C3NzaC1", 7) == 0 ||
						      memcmp(s + 4, "E2VjZH", 6) == 0))
		return false;
	if (h.digit == 0 && h.sym == 0)
		return false; /* "two-factor", "it's", "snake_case" */
	if (h.digit == 0 && !(h.upper && h.lower) && n < 8)
		return false;
	if (h.utf8 && h.digit == 0)
		return false;
	/* "12px", "600mg", "3rd", "2FA", "10k": a number and a unit */
	if (is_digit(s[0]) && h.lower + h.upper <= 3 && h.sym == 0)
		return false;
	/* versions and dates: "v2.3.1", "1.22", "2024-05-02T10:14" */
	if ((s[0] == 'v' || s[0] == 'V') && n > 1 && is_digit(s[1]) && h.lower + h.upper == 1)
		return false;
	if (all_of(s, n, date_byte))
		return false;
	if (all_of(s, n, hex_or_dash) && h.digit && (n >= 7) &&
	    (h.upper == 0 || h.lower == 0))
		return false; /* a hash, a UUID */
	if (acronym_number(s, n))
		return false;
	if (credential_is_tech_word(s, n))
		return false;
	/* a file name: "wp-config.php", "db.sqlite3" */
	{
		const char *dot = memrchr(s, '.', n);
		if (dot && dot > s && (size_t) (s + n - dot) <= 9 && (size_t) (s + n - dot) >= 2 &&
		    all_of(dot + 1, (size_t) (s + n - dot - 1), is_lower) && h.sym == 0)
			return false;
	}
	return true;
}

/* A quoted phrase that may be a passphrase: 4 to 64 bytes, at most eight words, not a
 * placeholder. */
static bool quoted_value(const char *s, size_t n)
{
	unsigned spaces = 0;

	if (n < 4 || n > 64 || credential_is_placeholder(s, n))
		return false;
	for (size_t k = 0; k < n; k++) {
		if (s[k] == '\n')
			return false;
		spaces += s[k] == ' ';
	}
	if (spaces > 7)
		return false;
	/* "Contraseña incorrecta", "Forgot your password?": a string about the password */
	for (size_t k = 0, st = 0; k <= n; k++) {
		if (k == n || !is_word((unsigned char) s[k])) {
			char w[32];
			if (k > st && k - st < sizeof(w) && credential_fold(s + st, k - st, w, sizeof(w)) &&
			    role_of(w, k - st) == ROLE_PASSWORD)
				return false;
			st = k + 1;
		}
	}
	return spaces > 0 || strong_value(s, n) || credential_shape_of(s, n).digit > 0;
}

/* "1185B", "A4471": three to eight digits and one letter at an end, a door code. */
static bool code_with_letter(const char *s, size_t n)
{
	size_t d = 0;

	if (n < 4 || n > 9)
		return false;
	for (size_t k = 0; k < n; k++)
		d += is_digit(s[k]);
	if (d != n - 1 || d < 3)
		return false;
	return is_alpha(s[0]) || is_alpha(s[n - 1]);
}

/* "7KQ2-PM9X-44TB": three groups or more of 3 to 6 capitals and digits joined by '-', with
 * digits and letters among them (not a date, not a reference made of words). */
static bool code_groups(const char *s, size_t n)
{
	unsigned groups = 0, run = 0, digits = 0, letters = 0;

	if (n < 11 || n > 40)
		return false;
	for (size_t k = 0; k <= n; k++) {
		if (k == n || s[k] == '-') {
			if (run < 3 || run > 6)
				return false;
			groups++;
			run = 0;
		} else if (is_upper(s[k]) || is_digit(s[k])) {
			run++;
			digits += is_digit(s[k]);
			letters += is_upper(s[k]);
		} else {
			return false;
		}
	}
	return groups >= 3 && digits >= 2 && letters >= 2;
}

/* "olivo-barricada-mercurio-setenta": three words or more of lower-case letters joined by
 * '-' (not a placeholder: "your-password-here"). */
static bool passphrase_token(const char *s, size_t n)
{
	unsigned parts = 1, run = 0;

	if (n < 14 || n > 64 || credential_is_placeholder(s, n))
		return false;
	for (size_t k = 0; k < n; k++) {
		/* "olivo-barricada", "Olivo-Centenario-58": a capital may start a part */
		if (is_lower(s[k]) || is_digit(s[k]) || (is_upper(s[k]) && run == 0)) {
			run++;
		} else if (s[k] == '-' && run >= 2) {
			parts++;
			run = 0;
		} else {
			return false;
		}
	}
	return parts >= 3 && run >= 2;
}

/* ---- results ---- */

struct context {
	const char *t;
	size_t len;
	struct detect_matches *m;
	size_t first; /* the matches of this text start here in m */
	credential_add_fn add;
	size_t spelled_until; /* rule_spelled() has read the text up to here */
};

/* Adds [s, e) unless a match of class secret overlaps it; a match of another class inside it
 * (a phone number that is a password) takes its kind. */
static int add_match(struct context *c, enum detect_kind kind, size_t s, size_t e)
{
	for (size_t k = c->first; k < c->m->n; k++) {
		struct detect_match *x = &c->m->v[k];
		if (x->end <= s || e <= x->start)
			continue;
		if (detect_kind_class(x->kind) == POLICY_CLASS_SECRET)
			return 0;
		if (x->start >= s && x->end <= e) {
			x->kind = kind;
			x->start = s;
			x->end = e;
			return 0;
		}
		return 0;
	}
	return c->add(c->m, kind, s, e);
}

static bool overlaps_any(const struct context *c, size_t s, size_t e)
{
	for (size_t k = c->first; k < c->m->n; k++)
		if (c->m->v[k].start < e && s < c->m->v[k].end)
			return true;
	return false;
}

/* ---- the rules ---- */

/* The word before [s, ...) on the same line, folded; false if none. */
static bool word_before(const char *t, size_t s, char *w, size_t size, size_t *n)
{
	size_t e = s, p;

	while (e > 0 && (t[e - 1] == ' ' || t[e - 1] == '\t'))
		e--;
	p = e;
	while (p > 0 && (is_word((unsigned char) t[p - 1]) || t[p - 1] == '\''))
		p--;
	if (p == e || e - p >= size)
		return false;
	*n = e - p;
	return credential_fold(t + p, e - p, w, size);
}

/* Is the phrase word w at [i, e) ("frase", "phrase") a passphrase's name: a secret adjective
 * beside it, or a verb of encrypting before it ("cifrato con la frase")? */
static bool secret_phrase(const char *t, size_t len, size_t i, size_t e, const char *w, size_t n)
{
	static const char *const phrase_words[] = { "frase", "phrase", NULL };
	static const char *const adjectives[] = {
		"secret", "segreta", "secreta", "secrete", "d'accesso", "di accesso", "de paso",
		"de acceso", "di sblocco", "de recuperaci\xc3\xb3n", "di recupero", NULL,
	};
	static const char *const encrypting[] = {
		"encrypted", "protected", "cifrato", "cifrata", "criptato", "criptata", "protetto",
		"protetta", "cifrado", "cifrada", "encriptado", "encriptada", "protegido", "protegida",
		NULL,
	};
	static const char *const skip[] = { "with", "con", "by", "using", "usando", NULL };
	char a[32], b[32];
	size_t an, bn, q = e;

	if (!in_list(w, n, phrase_words))
		return false;
	/* the word after, or the two after ("frase de paso") */
	while (q < len && t[q] == ' ')
		q++;
	an = 0;
	while (q + an < len && (is_word((unsigned char) t[q + an]) || t[q + an] == '\'') && an < 20)
		an++;
	if (an && credential_fold(t + q, an, a, sizeof(a))) {
		size_t r = q + an, rn = 0;
		if (in_list(a, an, adjectives))
			return true;
		while (r < len && t[r] == ' ')
			r++;
		while (r + rn < len && is_word((unsigned char) t[r + rn]) && rn < 16)
			rn++;
		if (rn && an + 1 + rn < sizeof(b)) {
			memcpy(b, a, an);
			b[an] = ' ';
			if (credential_fold(t + r, rn, b + an + 1, sizeof(b) - an - 1) &&
			    in_list(b, an + 1 + rn, adjectives))
				return true;
		}
	}
	/* "secret phrase", or "cifrada con la frase": the words before, past an article and
	 * "with" */
	for (size_t p = i, k = 0; k < 3 && word_before(t, p, b, sizeof(b), &bn); k++) {
		if ((k == 0 && in_list(b, bn, adjectives)) || in_list(b, bn, encrypting))
			return true;
		if (!in_list(b, bn, article_words) && !in_list(b, bn, skip))
			break;
		while (p > 0 && t[p - 1] == ' ')
			p--;
		while (p > 0 && (is_word((unsigned char) t[p - 1]) || t[p - 1] == '\''))
			p--;
	}
	return false;
}

/* An access word ("door", "cancello", "alarma") within 60 bytes around [s, e) on its line. */
static bool access_near(const char *t, size_t len, size_t s, size_t e,
			const char *const *list)
{
	size_t a = s > 60 ? s - 60 : 0, b = MIN(len, e + 60);

	for (size_t p = s; p > a; p--)
		if (t[p - 1] == '\n') {
			a = p;
			break;
		}
	for (size_t p = e; p < b; p++)
		if (t[p] == '\n') {
			b = p;
			break;
		}
	for (size_t p = a; p < b;) {
		size_t q = p;
		char w[32];
		while (q < b && (is_word((unsigned char) t[q]) || t[q] == '-'))
			q++;
		if (q > p && q - p < sizeof(w) && (q <= s || p >= e) &&
		    credential_fold(t + p, q - p, w, sizeof(w)) &&
		    (list ? in_list(w, q - p, list) : credential_is_access_word(w, q - p)))
			return true;
		p = q + (q == p);
	}
	return false;
}

/* Is the 4-digit number at [s, e) a year after a preposition ("in 2019", "desde 2021")? */
static bool year_after_preposition(const char *t, size_t s, size_t e)
{
	static const char *const preps[] = {
		"in", "since", "from", "until", "of", "nel", "dal", "del", "fino", "en", "desde",
		"hasta", "de", "year", "anno", "a\xc3\xb1o", NULL,
	};
	char w[16];
	size_t n;
	unsigned y = 0;

	if (e - s != 4)
		return false;
	for (size_t k = s; k < e; k++)
		y = y * 10 + (unsigned) (t[k] - '0');
	if (y < 1950 || y > 2039)
		return false;
	return word_before(t, s, w, sizeof(w), &n) && in_list(w, n, preps);
}

/*
 * After a key word [hs, he): the first value in the next 100 bytes of its sentence and the
 * one after it (a line that ends with ':' goes on to the next line). A password key takes a
 * strong value, a quoted phrase after a copula or ':', or digits after one; a PIN or code
 * key takes digits.
 */
static bool is_mark_token(const char *t, const struct token *k);

/* "vxqe mkzr hplt bwoa": an app password, four groups of four lower-case letters. Returns
 * the end or 0. */
static size_t app_password_end(const char *t, size_t len, size_t p)
{
	for (int g = 0; g < 4; g++, p += 5) {
		for (size_t k = p; k < p + 4; k++)
			if (!is_lower(AT(k)))
				return 0;
		if (g < 3 ? AT(p + 4) != ' ' : is_word(AT(p + 4)))
			return 0;
	}
	return p - 1;
}

/* A chat line's prefix at p ("[09:13] Tom: ", "Tom: ", "12:01 - Ana: ")? */
static bool chat_prefix(const char *t, size_t len, size_t p)
{
	size_t q = p, w;

	if (AT(q) == '[') {
		while (q < len && t[q] != ']' && t[q] != '\n' && q - p < 24)
			q++;
		if (AT(q) != ']')
			return false;
		q++;
		while (q < len && t[q] == ' ')
			q++;
	}
	w = q;
	while (q < len && (is_word((unsigned char) t[q]) || t[q] == ' ' || t[q] == '.') && q - w < 24)
		q++;
	return q > w && AT(q) == ':' && (AT(q + 1) == ' ' || AT(q + 1) == '\t');
}

/* "2024-05-01", "01/05/2024", "1.5.24": three groups that read as a date. */
static bool date_like(const char *s, size_t n)
{
	unsigned g[4] = { 0 }, len[4] = { 0 }, k = 0;

	for (size_t q = 0; q < n && k < 4; q++) {
		if (is_digit(s[q])) {
			g[k] = g[k] * 10 + (unsigned) (s[q] - '0');
			len[k]++;
		} else if (q > 0 && is_digit(s[q - 1])) {
			k++;
		}
	}
	if (k != 2)
		return false;
	if (len[0] == 4) /* year first */
		return g[0] >= 1900 && g[0] <= 2099 && g[1] >= 1 && g[1] <= 12 && g[2] >= 1 &&
		       g[2] <= 31 && len[2] <= 2;
	return len[0] <= 2 && len[1] <= 2 && (len[2] == 2 || len[2] == 4) && g[0] >= 1 &&
	       g[0] <= 31 && g[1] >= 1 && g[1] <= 31 && (g[0] <= 12 || g[1] <= 12);
}

static bool is_alnum_fn(int c)
{
	return is_alnum(c);
}

/* "API" right after the key word ("clave API") or right before it ("API clave"). */
static bool api_beside(const char *t, size_t len, size_t hs, size_t he)
{
	char w[8];
	size_t n;

	if (he + 4 <= len && t[he] == ' ' && (t[he + 1] == 'A' || t[he + 1] == 'a') &&
	    (t[he + 2] == 'P' || t[he + 2] == 'p') && (t[he + 3] == 'I' || t[he + 3] == 'i') &&
	    (he + 4 == len || !is_word((unsigned char) t[he + 4])))
		return true;
	return word_before(t, hs, w, sizeof(w), &n) && n == 3 && memcmp(w, "api", 3) == 0;
}

bool credential_is_tech_word(const char *s, size_t n)
{
	char w[32];

	return n < sizeof(w) && credential_fold(s, n, w, sizeof(w)) && in_list(w, n, tech_words);
}

/* "passphrase della chiave gpg: tre camion rossi sotto la pioggia di agosto.": after a
 * passphrase's name and a ':' on its line, four to twelve plain words to the end of the
 * sentence. Returns 1 when it added one, 0 when none, or a negative errno. */
static int rule_phrase_after(struct context *c, size_t he)
{
	const char *t = c->t;
	size_t len = c->len, p = he, s, last = 0;
	unsigned words = 0;
	char w[32];
	int r;

	while (p < len && p - he < 100 && t[p] != ':' && t[p] != '\n' && t[p] != '.' &&
	       t[p] != '?')
		p++;
	if (AT(p) != ':' || AT(p + 1) != ' ')
		return 0;
	s = p + 2;
	for (p = s; p < len;) {
		size_t e = p;
		while (e < len && (is_alpha(t[e]) || (unsigned char) t[e] >= 0x80 || t[e] == '\''))
			e++;
		if (e == p)
			return 0;
		if (words == 0 && e - p < sizeof(w) && credential_fold(t + p, e - p, w, sizeof(w)) &&
		    (credential_is_not_value(w, e - p) || credential_is_placeholder(t + p, e - p)))
			return 0;
		words++;
		last = e;
		if (e >= len || t[e] != ' ')
			break;
		p = e + 1;
		if (words > 12)
			return 0;
	}
	if (words < 4 || words > 12 || (last < len && !strchr(".\n!", t[last])) ||
	    overlaps_any(c, s, last))
		return 0;
	r = add_match(c, DETECT_SECRET, s, last);
	return r < 0 ? r : 1;
}

/* ---- spelled values ---- */

/* A password read out letter by letter: "Kilo-Echo-Romeo-Nine", "Ancona, Bologna, sette",
 * "equis-nueve-jota", "m a r g o t 1 9 7 7 !". Letters are spelling-alphabet words (NATO, the
 * Italian telephone alphabet), letter names (IT, ES) or single letters. */
static const char *const spelled_letters[] = {
	"alfa", "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
	"juliet", "juliett", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
	"sierra", "tango", "uniform", "victor", "whiskey", "whisky", "x-ray", "xray", "yankee",
	"zulu", "ancona", "bari", "bologna", "como", "domodossola", "empoli", "firenze", "genova",
	"imola", "jolly", "kappa", "livorno", "milano", "napoli", "otranto", "padova", "palermo",
	"quarto", "quadro", "roma", "salerno", "savona", "sassari", "taranto", "torino", "udine",
	"venezia", "vicenza", "washington", "xeres", "yacht", "york", "yogurt", "zara", "bi", "ci",
	"di", "effe", "gi", "acca", "elle", "emme", "enne", "pi", "cu", "qu", "erre", "esse", "ti",
	"vu", "vi", "ics", "ipsilon", "zeta", "cappa", "be", "ce", "de", "efe", "ge", "hache",
	"jota", "ka", "ele", "eme", "ene", "e\xc3\xb1" "e", "pe", "ese", "te", "uve", "ve", "equis",
	"ye", NULL,
};
static const char *const spelled_symbols[] = {
	"exclamation", "esclamativo", "exclamaci\xc3\xb3n", "exclamacion", "at", "arroba",
	"chiocciola", "hash", "hashtag", "cancelletto", "almohadilla", "dollar", "dollaro",
	"d\xc3\xb3lar", "dolar", "dash", "hyphen", "trattino", "guion", "gui\xc3\xb3n",
	"underscore", "dot", "punto", "period", "star", "asterisk", "asterisco", "percent",
	"plus", "slash", "barra", "ampersand", "mark", "niner", NULL,
};
static const char *const spelled_fill[] = {
	"capital", "uppercase", "upper", "lowercase", "lower", "small", "maiuscola", "maiuscolo",
	"minuscola", "minuscolo", "may\xc3\xbascula", "mayuscula", "min\xc3\xbascula",
	"minuscula", "then", "poi", "luego", "and", "y", "e", NULL,
};

enum spelled { SP_NONE, SP_LETTER, SP_DIGIT, SP_SYMBOL, SP_FILL };

/* The unit at p (a word or one symbol), its end in *ret_end. */
static enum spelled spelled_unit(const char *t, size_t len, size_t p, size_t *ret_end)
{
	size_t e = p;
	char w[24];

	while (e < len && (is_alnum(t[e]) || (unsigned char) t[e] >= 0x80))
		e++;
	if (e == p) {
		if (p < len && strchr("!#$%&*+?@^~_.=", t[p])) {
			*ret_end = p + 1;
			return SP_SYMBOL;
		}
		return SP_NONE;
	}
	*ret_end = e;
	if (e - p == 1)
		return is_digit(t[p]) ? SP_DIGIT : SP_LETTER;
	if (all_of(t + p, e - p, is_digit))
		return e - p <= 4 ? SP_DIGIT : SP_NONE;
	if (e - p >= sizeof(w) || !credential_fold(t + p, e - p, w, sizeof(w)))
		return SP_NONE;
	if (in_list(w, e - p, spelled_letters))
		return SP_LETTER;
	if (in_list(w, e - p, digit_words))
		return SP_DIGIT;
	if (in_list(w, e - p, spelled_symbols))
		return SP_SYMBOL;
	if (in_list(w, e - p, spelled_fill))
		return SP_FILL;
	return SP_NONE;
}

/* Runs of six units or more in [from, to), three of them letters and one a digit or a symbol
 * (a list of cities near "chiave" is no password): each is a secret. */
static int rule_spelled(struct context *c, size_t from, size_t to)
{
	const char *t = c->t;
	size_t p = from;

	while (p < to) {
		size_t s = SIZE_MAX, last = 0, q = p, e;
		unsigned units = 0, letters = 0, other = 0, long_words = 0;
		enum spelled k;

		while (q < to) {
			/* separators between units: spaces, commas, hyphens, quotes */
			while (q < to && strchr(" ,;-\"'\t", t[q]))
				q++;
			if (q >= to || (k = spelled_unit(t, c->len, q, &e)) == SP_NONE)
				break;
			/* a sentence's full stop ends the run, a spelled "." does not */
			if (k == SP_SYMBOL && t[q] == '.' && (e >= c->len || is_space(t[e])) && units)
				break;
			if (s == SIZE_MAX)
				s = q;
			units += k != SP_FILL;
			letters += k == SP_LETTER;
			other += k == SP_DIGIT || k == SP_SYMBOL;
			long_words += k == SP_LETTER && e - q > 2;
			if (k != SP_FILL)
				last = e;
			q = e;
		}
		/* single letters alone must be spaced out one by one ("m a r g o t"), so that
		 * "a e i o u" in prose is not a run: three longer letter words, or six units */
		if (s != SIZE_MAX && units >= 6 && letters >= 3 && other >= 1 &&
		    (long_words >= 3 || units >= 8) && !overlaps_any(c, s, last)) {
			int r = add_match(c, DETECT_SECRET, s, last);
			if (r < 0)
				return r;
		}
		/* the next run starts after this one, or after the byte that stopped it */
		p = q > p ? q : p + 1;
		while (p < to && (is_alnum(t[p]) || (unsigned char) t[p] >= 0x80) && p > 0 &&
		       (is_alnum(t[p - 1]) || (unsigned char) t[p - 1] >= 0x80))
			p++;
	}
	return 0;
}

static int rule_after(struct context *c, size_t hs, size_t he, enum role role, bool weak)
{
	const char *t = c->t;
	size_t len = c->len, p = he, lim = MIN(len, he + (role == ROLE_PASSWORD ? 240 : 100)), nl;
	unsigned ends = 0;
	/* the last token was the key, a copula or a mark; "pass" and "contra" are verbs and
	 * prepositions too: a link must follow them */
	bool link = role != ROLE_LOCK && !weak &&
		    (AT(he) == ' ' || AT(he) == ':' || AT(he) == '=' || AT(he) == '\t');
	bool link_seen = false, asked = false;
	/* the last words were "of", "del", "di un": the next one names what the key opens */
	bool owner = false, after_comma = false;
	/* "clave API", "chiave API", "API-Schlüssel": the key word names an API key */
	bool api = api_beside(c->t, c->len, hs, he);
	/* a password key near a door, a safe, a wifi network: digits are its value too ("clave de
	 * la caja fuerte 1 9 8 4", "rete FRITZ!Box, chiave 48120937716253840914") */
	bool access = role == ROLE_PASSWORD && access_near(c->t, c->len, hs, he, NULL);
	struct token k;
	char w[32];
	size_t n;

	for (int tokens = 0; tokens < 40; tokens++) {
		if (!next_token(t, len, p, lim, &k, &nl)) {
			/* a line end: go on only after a ':' that ends the line */
			size_t b = nl;
			if (nl == SIZE_MAX)
				return 0;
			while (b > he && (t[b - 1] == ' ' || t[b - 1] == '\r'))
				b--;
			/* or, once, after a question ("mi ridai la pass di disney+?" and the
			 * answer on the next line of a chat) */
			if (AT(nl + 1) == '\n' ||
			    !((b > he && t[b - 1] == ':') ||
			      (b > he && (t[b - 1] == '?' || chat_prefix(t, len, nl + 1)) && !asked)))
				return 0;
			asked |= chat_prefix(t, len, nl + 1);
			asked |= t[b - 1] == '?';
			p = nl + 1;
			lim = MIN(len, p + 80);
			continue;
		}
		p = k.e;
		/* "=value", ":value": the mark, then the value */
		while (k.cs < k.ce && (t[k.cs] == '=' || t[k.cs] == ':')) {
			k.cs++;
			link = true;
		}
		if (k.ce > k.cs) {
			const char *v = t + k.cs;
			size_t vn = k.ce - k.cs, de;
			bool word = token_word(t, &k, w, sizeof(w), &n);
			/* another key word: the value is its own */
			if (word && tokens > 0) {
				enum role other = role_of(w, n);
				if (other == ROLE_PASSWORD || other == ROLE_PIN ||
				    (other != ROLE_NONE && other == role))
					return 0;
			}
			/* a log line's next field (", request: \"GET / HTTP/1.1\""): its value is
			 * its own */
			if (tokens > 0 && after_comma && t[k.e - 1] == ':' && k.ce < k.e && word)
				return 0;
			/* "la password del Fritz!Box", "the password of a Fritz!Box": what it opens */
			if (owner && !link)
				goto next;
			if (role == ROLE_PASSWORD) {
				bool near = k.cs < he + 100 && tokens < 16;
				if (k.quoted && link && quoted_value(v, vn))
					return add_match(c, DETECT_SECRET, k.cs, k.ce);
				if (!near && !link)
					goto next; /* further on, only right after a copula or mark */
				if ((link || near) && (de = app_password_end(t, len, k.cs)))
					return add_match(c, DETECT_SECRET, k.cs, de);
				/* an API key's value: a long token of letters and digits after "clave
				 * API", "chiave API" (hex included, which alone reads as a hash) */
				if (api && near && vn >= 24 && vn <= 128 && all_of(v, vn, is_alnum_fn) &&
				    count_digits(v, vn) > 0 && count_digits(v, vn) < vn)
					return add_match(c, DETECT_API_KEY, k.cs, k.ce);
				if (strong_value(v, vn) ||
				    (link && credential_is_snake_name(v, vn) && credential_shape_of(v, vn).digit &&
				     strong_value_shape(v, vn)))
					return add_match(c, DETECT_SECRET, k.cs, k.ce);
			}
			/* "alarm 6-0-3-3", "cassaforte 17-42-08": a code in three groups or more
			 * right after a lock word (one number alone may be its number: "locker
			 * 214") */
			if (role == ROLE_LOCK && tokens == 0 &&
			    (de = credential_digit_code_end(t, len, k.cs)) && de >= k.ce &&
			    !credential_unit_follows(t, len, de)) {
				unsigned groups = 1;
				for (size_t q = k.cs + 1; q < de; q++)
					groups += !is_digit(t[q]) && is_digit(t[q - 1]);
				if (groups >= 3 && count_digits(t + k.cs, de - k.cs) >= 4 &&
				    !date_like(t + k.cs, de - k.cs))
					return add_match(c, DETECT_ACCESS_CODE, k.cs, de);
			}
			/* "cancello del condominio 1478#": digits typed on a keypad, '#' to end */
			if (role == ROLE_LOCK && tokens < 4 && vn >= 5 && vn <= 9 &&
			    (v[vn - 1] == '#' || v[vn - 1] == '*') && count_digits(v, vn) == vn - 1)
				return add_match(c, DETECT_ACCESS_CODE, k.cs, k.ce);
			if (role != ROLE_PASSWORD && vn > 1 && (v[0] == '#' || v[0] == '*') &&
			    is_digit(v[1])) {
				k.cs++;
				v++;
				vn--;
			}
			/* "my pin is four four seven one": four digit words or more */
			if ((role != ROLE_PASSWORD || link) && word && in_list(w, n, digit_words)) {
				size_t q = k.e, last = k.ce;
				unsigned count = 1;
				struct token x;
				char xw[16];
				size_t xn;
				while (count < 16 && next_token(t, len, q, lim, &x, &nl) &&
				       token_word(t, &x, xw, sizeof(xw), &xn) && in_list(xw, xn, digit_words)) {
					count++;
					last = x.ce;
					q = x.e;
				}
				if (count >= 4)
					return add_match(c, role == ROLE_PASSWORD ? DETECT_SECRET
										  : DETECT_ACCESS_CODE,
							 k.cs, last);
			}
			/* a long number after a password key: a wifi key ("chiave
			 * 48120937716253840914") */
			if (role == ROLE_PASSWORD && (link || access) && vn >= 10 && vn <= 64 &&
			    count_digits(v, vn) == vn)
				return add_match(c, DETECT_SECRET, k.cs, k.ce);
			if (role != ROLE_PASSWORD && code_with_letter(v, vn))
				return add_match(c, DETECT_ACCESS_CODE, k.cs, k.ce);
			/* "7KQ2-PM9X-44TB", "UNI-7Q3K-P9WX": an activation code in groups */
			if ((role == ROLE_CODE || role == ROLE_PIN) &&
			    (link || (k.cs < he + 60 && tokens < 8)) && code_groups(v, vn))
				return add_match(c, DETECT_ACCESS_CODE, k.cs, k.ce);
			if (role == ROLE_PASSWORD && link && passphrase_token(v, vn))
				return add_match(c, DETECT_SECRET, k.cs, k.ce);
			de = credential_digit_code_end(t, len, k.cs);
			if (de && de >= k.ce &&
			    ((role != ROLE_PASSWORD && role != ROLE_LOCK) || link || access) &&
			    !credential_unit_follows(t, len, de) &&
			    !year_after_preposition(t, k.cs, de) && de - k.cs <= 24) {
				size_t digits = 0;
				for (size_t q = k.cs; q < de; q++)
					digits += is_digit(t[q]);
				if (digits >= 4 && digits <= 12)
					return add_match(c, role == ROLE_PASSWORD ? DETECT_SECRET
										  : DETECT_ACCESS_CODE,
							 k.cs, de);
			}
		next:
			owner = word && (in_list(w, n, owner_words) || (owner && in_list(w, n, article_words)));
			/* a lock's code only right after its copula, which comes within six words
			 * of the lock word in its sentence */
			if (role == ROLE_LOCK && ((link_seen && !link) || (!link_seen && (tokens >= 6 || ends))))
				return 0;
			link = (word && (credential_is_copula(w, n) || in_list(w, n, change_words))) ||
			       (link && word && in_list(w, n, link_keep)) ||
			       (vn == 0 && (t[k.s] == ':' || t[k.s] == '='));
			link_seen |= link;
			/* "è:", "es:", "is:" */
			if (!link && k.e > k.s && t[k.e - 1] == ':')
				link = true;
		} else {
			/* punctuation alone: "—", ":", "->", "=" */
			link = true;
		}
		if (is_mark_token(t, &k)) {
			link = true; /* "Gym locker - 2-19-33", "alarm → 7740" */
			link_seen = true;
		}
		after_comma = k.e > k.s && t[k.e - 1] == ',';
		/* sentence ends */
		if (k.e > k.s && strchr(".?!", t[k.e - 1]) && !(k.ce > k.cs && k.e - 1 < k.ce))
			if (++ends >= 2)
				return 0;
	}
	return 0;
}

static bool is_mark_token(const char *t, const struct token *k)
{
	size_t n = k->e - k->s;
	const char *s = t + k->s;

	return (n == 1 && strchr("-:=,", s[0])) || (n == 2 && !memcmp(s, "->", 2)) ||
	       (n == 3 && (!memcmp(s, "\xe2\x80\x94", 3) || !memcmp(s, "\xe2\x80\x93", 3) ||
			   !memcmp(s, "\xe2\x86\x92", 3)));
}

/*
 * Before a password key word [hs, he): "X — that's my gmail password", "\"X\" è la password
 * che uso", "X is literally my bank password". Going back over at most seven tokens of the
 * line: link words, marks and at most two other words, at least one copula or mark among
 * them; then a strong value or a quoted phrase, or (before a copula) three to six plain
 * words from the start of the sentence: a passphrase.
 */
static int rule_before(struct context *c, size_t hs)
{
	const char *t = c->t;
	struct token tok[8];
	size_t n_tok = 0, p = hs, ls = hs > 120 ? hs - 120 : 0;
	unsigned others = 0;
	bool linked = false;

	for (size_t q = hs; q > ls; q--)
		if (t[q - 1] == '\n') {
			ls = q;
			break;
		}
	/* the tokens before the key word, nearest first */
	while (n_tok < ELEMENTSOF(tok) && p > ls) {
		size_t e = p;
		while (e > ls && (t[e - 1] == ' ' || t[e - 1] == '\t'))
			e--;
		size_t s = e;
		while (s > ls && t[s - 1] != ' ' && t[s - 1] != '\t')
			s--;
		if (s == e)
			break;
		tok[n_tok].s = s;
		tok[n_tok].e = e;
		token_core(t, c->len, &tok[n_tok]);
		n_tok++;
		p = s;
	}
	for (size_t i = 0; i < n_tok; i++) {
		const struct token *k = &tok[i];
		const char *v = t + k->cs;
		size_t vn = k->ce - k->cs, n;
		char w[32];
		bool word = token_word(t, k, w, sizeof(w), &n);

		if (is_mark_token(t, k) || vn == 0) {
			linked = true;
			continue;
		}
		if (linked || i > 0) {
			/* a value: quoted, or strong; the token after it may carry the mark
			 * ("Tr0ub4dor&3 —", "Stellina88 →", "X," and "X:") */
			bool marked = linked || (k->e > k->ce && strchr(",:", t[k->e - 1]));
			if (marked && ((k->quoted && quoted_value(v, vn)) || strong_value(v, vn) ||
				       (linked && credential_shape_of(v, vn).digit && strong_value_shape(v, vn))))
				return add_match(c, DETECT_SECRET, k->cs, k->ce);
		}
		if (word && credential_is_copula(w, n)) {
			linked = true;
			/* a passphrase before the copula, from the start of the sentence */
			size_t j = i + 1, words = 0;
			for (; j < n_tok; j++) {
				char x[32];
				size_t xn;
				const struct token *y = &tok[j];
				if (!token_word(t, y, x, sizeof(x), &xn) || xn < 3 ||
				    y->ce != y->e || in_list(x, xn, subject_words) ||
				    in_list(x, xn, link_words) || !all_of(t + y->cs, xn, is_lower))
					break;
				words++;
			}
			if (words >= 3 && words <= 6 &&
			    (j == n_tok ? tok[j - 1].s == ls ||
						   (tok[j - 1].s >= 2 && tok[j - 1].s - 2 >= ls &&
						    strchr(".!?:", t[tok[j - 1].s - 2]))
					: tok[j].e > tok[j].s && strchr(".!?:", t[tok[j].e - 1])))
				return add_match(c, DETECT_SECRET, tok[j - 1].cs, tok[i + 1].ce);
			continue;
		}
		if (word && in_list(w, n, link_words)) {
			/* "X as my password", "usa X como contraseña" */
			if (in_list(w, n, as_words))
				linked = true;
			continue;
		}
		if (word && k->ce == k->e && ++others <= 2)
			continue;
		return 0;
	}
	return 0;
}

/* "codes ...: 8k2f-9qzm, t7vx-3lpa, h4nd-6wre": three codes or more in the next 300 bytes. */
static int rule_codes(struct context *c, size_t he, size_t lim)
{
	const char *t = c->t;
	size_t len = c->len, p = he, first = 0, last = 0, nl;
	unsigned codes = 0, gap = 0;
	struct token k;

	while (p < lim) {
		if (!next_token(t, len, p, lim, &k, &nl)) {
			if (nl == SIZE_MAX)
				break;
			p = nl + 1;
			continue;
		}
		p = k.e;
		const char *v = t + k.cs;
		size_t vn = k.ce - k.cs;
		struct value_shape h = credential_shape_of(v, vn);
		bool code = false;
		if (vn >= 4 && vn <= 14 && h.digit >= 4 && h.digit + h.other == vn &&
		    h.other == count_of(v, vn, '-')) {
			code = true; /* "4821-9930", "4829" of "4829 1736" */
		} else if (vn >= 6 && vn <= 14 && h.digit && h.lower + h.upper && h.utf8 == 0 &&
			   h.other <= 2 && h.sym == 0 && !credential_is_placeholder(v, vn)) {
			code = true;
		}
		if (code) {
			if (!codes)
				first = k.cs;
			last = k.ce;
			codes++;
			gap = 0;
		} else if (codes && ++gap > 1) {
			break;
		} else if (!codes && vn > 0 && k.cs > he + 200) {
			break;
		}
	}
	if (codes >= 3)
		return add_match(c, DETECT_ACCESS_CODE, first, last);
	return 0;
}

/* "frase di recupero del wallet è: foresta tigre ...": after a seed word, ':' or a copula
 * within 48 bytes, then 12, 15, 18, 21 or 24 words of letters, at least half of them BIP-39
 * words. */
static int seed_run_at(struct context *c, size_t p);

static int rule_seed(struct context *c, size_t he)
{
	const char *t = c->t;
	size_t len = c->len, p = he, lim = MIN(len, he + 48);

	/* the link: ':' or a copula within 48 bytes; else the words right after the name, or
	 * after up to three more ("parole di recupero tavolo nuvola ...") */
	while (p < lim && t[p] != ':' && t[p] != '\n')
		p++;
	if (p < lim && t[p] == ':')
		return seed_run_at(c, p + 1);
	for (int skip = 0, r; skip < 4; skip++) {
		size_t q = he;
		for (int k = 0; k < skip; k++) {
			while (q < len && t[q] == ' ')
				q++;
			while (q < len && (is_word((unsigned char) t[q]) || t[q] == '\''))
				q++;
		}
		if ((r = seed_run_at(c, q)) != 0)
			return r;
	}
	return 0;
}

/* The seed rule's run from p: 12 to 24 words (a multiple of three), half of them BIP-39
 * words; 1 when added, 0 when none, or add()'s error. */
static int seed_run_at(struct context *c, size_t p)
{
	const char *t = c->t;
	size_t len = c->len, start = 0, end = 0;
	unsigned words = 0, listed = 0;
	int r;

	for (;;) {
		size_t q = p, e;
		while (q < len && (is_space(t[q]) || t[q] == ',' || t[q] == '-' ||
				   (is_digit(t[q]) && words < 25) || t[q] == '.' || t[q] == ')'))
			q++;
		e = q;
		while (e < len && (is_alpha(t[e]) || (unsigned char) t[e] >= 0x80) && e - q <= 12)
			e++;
		if (e == q || e - q < 3 || e - q > 12 || (e < len && is_word((unsigned char) t[e])))
			break;
		if (!words)
			start = q;
		words++;
		end = e;
		{
			size_t we;
			listed += credential_seed_word(t, len, q, &we) != 0;
		}
		p = e;
		if (words == 24)
			break;
	}
	while (words >= 12 && words % 3)
		words--; /* (a word that follows the phrase) */
	if (words >= 12 && listed * 2 >= words) {
		r = add_match(c, DETECT_SEED_PHRASE, start, end);
		return r < 0 ? r : 1;
	}
	return 0;
}

/* "vCenter root / Ch1av3Magica#5", "admin: Gr8Wall#77": an account name, '/' or ':', a
 * strong value or capitals and digits. */
static int rule_account(struct context *c, size_t ws, size_t we)
{
	const char *t = c->t;
	size_t len = c->len, p = we, v;
	struct value_shape h;

	while (p < len && t[p] == ' ')
		p++;
	if (AT(p) != '/' && AT(p) != ':')
		return 0;
	/* "root / X", and "admin/Imprime2019" when what follows is a strong value, not a path
	 * ("debian/rules", "root/.ssh") */
	bool tight = t[p] == '/' && p == we && AT(p + 1) != ' ';
	char aw[24];
	p++;
	while (p < len && t[p] == ' ')
		p++;
	v = p;
	while (v < len && !is_space(t[v]) && t[v] != ',' && t[v] != '"' && t[v] != '\'' &&
	       t[v] != ';')
		v++;
	while (v > p && strchr(".):", t[v - 1]))
		v--;
	if (v - p < 6 || v - p > 64)
		return 0;
	if (tight && (!strong_value(t + p, v - p) || memchr(t + p, '.', v - p) ||
		      (ws > 0 && !is_space(t[ws - 1])) || we - ws >= sizeof(aw) ||
		      !credential_fold(t + ws, we - ws, aw, sizeof(aw)) ||
		      !in_list(aw, we - ws, tight_accounts)))
		return 0;
	h = credential_shape_of(t + p, v - p);
	if (!strong_value(t + p, v - p) &&
	    !(h.upper && h.digit && h.lower == 0 && h.other == 0 && !acronym_number(t + p, v - p)))
		return 0;
	return add_match(c, DETECT_SECRET, p, v);
}

/* A crypt(3) or LDAP password hash: "$apr1$...", "$2y$10$...", "$6$...", "{SSHA}...". */
static int rule_hash(struct context *c, size_t i)
{
	static const char *const prefixes[] = {
		"$1$", "$apr1$", "$2a$", "$2b$", "$2y$", "$5$", "$6$", "$y$", "$gy$", "$7$",
		"$argon2i$", "$argon2id$", "$argon2d$", "$scrypt$", "$pbkdf2", "{SSHA}", "{SHA}",
		"{SSHA512}", "{CRYPT}", "{PBKDF2", NULL,
	};
	const char *t = c->t;
	size_t len = c->len;

	if (i > 0 && (is_word((unsigned char) t[i - 1]) || t[i - 1] == '$'))
		return 0;
	for (size_t k = 0; prefixes[k]; k++) {
		size_t n = strlen(prefixes[k]), e;
		if (i + n > len || memcmp(t + i, prefixes[k], n) != 0)
			continue;
		e = i + n;
		while (e < len && (is_alnum(t[e]) || strchr("./$=,+-_", t[e])) && e - i < 400)
			e++;
		if (e - i < 20)
			return 0;
		return add_match(c, DETECT_SECRET, i, e);
	}
	return 0;
}

/* Per line: a .pgpass line ("host:5432:db:user:password"), a table under a password column,
 * PHP's define('DB_PASSWORD', 'x'). */
static bool field_is_host(const char *s, size_t n)
{
	if (n == 1 && s[0] == '*')
		return true;
	if (memchr(s, '.', n) || (n == 9 && !memcmp(s, "localhost", 9)))
		return true;
	for (size_t k = 0; k < n; k++)
		if (is_alpha(s[k]) && !is_hex(s[k]))
			return true;
	return false;
}

static int rule_pgpass(struct context *c, size_t ls, size_t le)
{
	const char *t = c->t;
	size_t f[6], nf = 0;

	f[nf++] = ls;
	for (size_t p = ls; p < le; p++) {
		if (t[p] == ' ' || t[p] == '\t')
			return 0;
		if (t[p] == ':' && (p == ls || t[p - 1] != '\\')) {
			if (nf == 5)
				return 0;
			f[nf++] = p + 1;
		}
	}
	if (nf != 5)
		return 0;
	f[5] = le + 1;
	for (int k = 0; k < 4; k++)
		if (f[k + 1] - 1 == f[k])
			return 0;
	if (!field_is_host(t + f[0], f[1] - 1 - f[0]))
		return 0;
	for (size_t p = f[1]; p < f[2] - 1; p++)
		if (!is_digit(t[p]) && t[p] != '*')
			return 0;
	if (le - f[4] < 3 || credential_is_placeholder(t + f[4], le - f[4]))
		return 0;
	return add_match(c, DETECT_SECRET, f[4], le);
}

/* The cells of a table row: separated by '|', a tab or ';' (markdown's outer bars
 * dropped). Returns the count, the cells' bounds (trimmed) in s[] and e[]. */
#define MAX_CELLS 16
static size_t table_cells(const char *t, size_t ls, size_t le, char sep, size_t *s, size_t *e)
{
	size_t n = 0, p = ls;

	while (p < le && t[p] == ' ')
		p++;
	if (sep == '|' && p < le && t[p] == '|')
		p++;
	for (;;) {
		size_t q = p;
		while (q < le && t[q] != sep)
			q++;
		if (n == MAX_CELLS)
			return n;
		size_t a = p, b = q;
		while (a < b && (t[a] == ' ' || t[a] == '\t'))
			a++;
		while (b > a && (t[b - 1] == ' ' || t[b - 1] == '\t' || t[b - 1] == '\r'))
			b--;
		s[n] = a;
		e[n] = b;
		n++;
		if (q >= le)
			break;
		p = q + 1;
	}
	/* "| a | b |": the empty cell after the last bar is no cell */
	if (sep == '|' && n > 1 && s[n - 1] == e[n - 1])
		n--;
	return n;
}

static char table_separator(const char *t, size_t ls, size_t le)
{
	unsigned bars = 0, tabs = 0, semis = 0;
	/* (a CSV header: "username,email,password,last_login") */

	for (size_t p = ls; p < le; p++) {
		bars += t[p] == '|';
		tabs += t[p] == '\t';
		semis += t[p] == ';';
	}
	unsigned commas = 0;
	for (size_t p = ls; p < le; p++)
		commas += t[p] == ',';
	return bars >= 2 ? '|' : tabs >= 1 ? '\t' : semis >= 2 ? ';' : commas >= 2 ? ',' : 0;
}

struct table_state {
	char sep;
	size_t col, n_cols;
};

static int rule_table(struct context *c, struct table_state *ts, size_t ls, size_t le)
{
	const char *t = c->t;
	size_t s[MAX_CELLS], e[MAX_CELLS], n;
	char sep = table_separator(t, ls, le);

	if (ts->sep && sep == ts->sep) {
		n = table_cells(t, ls, le, sep, s, e);
		if (n + 1 < ts->n_cols || n > ts->n_cols + 1 || ts->col >= n) {
			ts->sep = 0;
		} else {
			size_t a = s[ts->col], b = e[ts->col];
			bool rule = true;
			for (size_t p = a; p < b; p++)
				rule &= t[p] == '-' || t[p] == ':' || t[p] == '=' || t[p] == ' ';
			if (!rule && b - a >= 3 && !credential_is_placeholder(t + a, b - a)) {
				char w[32];
				if (!(b - a < sizeof(w) && credential_fold(t + a, b - a, w, sizeof(w)) &&
				      credential_is_not_value(w, b - a)))
					return add_match(c, DETECT_SECRET, a, b);
			}
			return 0;
		}
	}
	ts->sep = 0;
	if (!sep)
		return 0;
	n = table_cells(t, ls, le, sep, s, e);
	for (size_t k = 0; k < n; k++) {
		char w[32];
		size_t m = e[k] - s[k];
		if (m == 0 || m >= sizeof(w) || !credential_fold(t + s[k], m, w, sizeof(w)))
			continue;
		/* "password", "pass", "pwd", "contraseña", "clave", "pin", "password / pin", and
		 * names that end with one ("temp_password", "wifi-pin"; not "password_hash") */
		const char *tail = w;
		for (size_t q = 0; q + 1 < m; q++)
			if (w[q] == '_' || w[q] == '-')
				tail = w + q + 1;
		size_t tn = m - (size_t) (tail - w);
		if (role_of(w, m) == ROLE_PASSWORD || role_of(w, m) == ROLE_PIN ||
		    (m == 4 && !memcmp(w, "pass", 4)) ||
		    (tail != w && tn >= 3 &&
		     (role_of(tail, tn) == ROLE_PASSWORD || role_of(tail, tn) == ROLE_PIN))) {
			ts->sep = sep;
			ts->col = k;
			ts->n_cols = n;
			return 0;
		}
	}
	return 0;
}

/* From p, spaces then a string in ' or " on one line, at most max bytes: its bounds in *ret_s
 * and *ret_e; returns the byte after the closing quote, or 0. */
static size_t quoted_after_spaces(const char *t, size_t len, size_t p, size_t max, size_t *ret_s,
				  size_t *ret_e)
{
	char q;

	while (p < len && t[p] == ' ')
		p++;
	if (AT(p) != '\'' && AT(p) != '"')
		return 0;
	q = t[p];
	*ret_s = ++p;
	while (p < len && p - *ret_s < max && t[p] != q && t[p] != '\n')
		p++;
	*ret_e = p;
	return AT(p) == q ? p + 1 : 0;
}

static int rule_define(struct context *c, size_t i)
{
	static const char *const calls[] = { "define", "setenv", "putenv", "putenv_s", NULL };
	const char *t = c->t;
	size_t len = c->len, p = 0, ks, ke, vs, ve;

	for (size_t k = 0; calls[k] && !p; k++) {
		size_t n = strlen(calls[k]);
		if (i + n <= len && memcmp(t + i, calls[k], n) == 0 && !is_word(AT(i + n)))
			p = i + n;
	}
	if (!p)
		return 0;
	while (p < len && t[p] == ' ')
		p++;
	if (AT(p) != '(')
		return 0;
	p = quoted_after_spaces(t, len, p + 1, 64, &ks, &ke);
	if (!p || !credential_key_name(t, ks, ke))
		return 0;
	while (p < len && t[p] == ' ')
		p++;
	if (AT(p) != ',' || !quoted_after_spaces(t, len, p + 1, 200, &vs, &ve) || ve - vs < 3 ||
	    credential_is_placeholder(t + vs, ve - vs))
		return 0;
	return add_match(c, DETECT_SECRET, vs, ve);
}

/* A token shaped like a password with no key word at all: 8 to 24 bytes with lower case,
 * capitals, digits and a symbol ("Hq92!mvz" has three classes and '!': "The one on the
 * sticky note, Hq92!mvz"); or after an e-mail address and '/' ("ana@x.com / Gatitos2019!").
 * Code, paths, URLs and base64 are not. */
static bool password_shaped(const char *s, size_t n)
{
	struct value_shape h = credential_shape_of(s, n);

	if (n < 8 || n > 24 || h.sym == 0 || h.digit == 0 || h.lower == 0 || h.utf8)
		return false;
	if (h.upper == 0)
		return false; /* "lib32stdc++6", "27+nmu1~": versions and names */
	if (!is_alnum(s[0]) || memchr(s, '/', n) || memchr(s, '\\', n) || memchr(s, '(', n) ||
	    memchr(s, '[', n) || memchr(s, '{', n) || memchr(s, '<', n) || memchr(s, '=', n) ||
	    memchr(s, '%', n))
		return false;
	if (memchr(s, '@', n) && memchr(memchr(s, '@', n), '.', n - (size_t) ((const char *) memchr(s, '@', n) - s)))
		return false;
	return strong_value(s, n);
}

/* "JBSW Y3DP EHPK 3PXP": an authenticator's setup key typed in groups of four base32
 * characters (A-Z, 2-7), four groups or more, a digit among them. Returns the end or 0. */
/* A group of four capitals and digits; counts the groups with digits and with letters. */
static bool base32_group(const char *t, size_t len, size_t p, unsigned *with_digit,
			 unsigned *with_letter, bool *strict)
{
	bool d = false, l = false;

	for (size_t k = p; k < p + 4; k++) {
		if (!is_upper(AT(k)) && !is_digit(AT(k)))
			return false;
		d |= is_digit(AT(k));
		l |= is_upper(AT(k));
		*strict &= !(AT(k) == '0' || AT(k) == '1' || AT(k) == '8' || AT(k) == '9');
	}
	if (is_word(AT(p + 4)) || (p > 0 && is_word((unsigned char) t[p - 1])))
		return false;
	*with_digit += d;
	*with_letter += l;
	return true;
}

/* Four groups or more of base32 (A-Z, 2-7), or five of capitals and digits (people type
 * keys they make up with any digit), groups with digits and with letters among them; not the
 * shape of an IBAN ("IT60 X054 ..."). Returns the end or 0. */
static size_t base32_groups_end(const char *t, size_t len, size_t p)
{
	unsigned groups = 0, wd = 0, wl = 0;
	bool strict = true;
	size_t s = p, last = 0;

	while (base32_group(t, len, p, &wd, &wl, &strict)) {
		/* "IT60 X054 ...": an IBAN's country and check digits, valid or not */
		if (is_upper(AT(p)) && is_upper(AT(p + 1)) && is_digit(AT(p + 2)) &&
		    is_digit(AT(p + 3)))
			return 0;
		groups++;
		last = p + 4;
		if (AT(p + 4) != ' ' && AT(p + 4) != '-')
			break;
		p += 5;
	}
	if (wd == 0 || wl < 2 || groups < (strict ? 4u : 5u) || (!strict && wd < 2))
		return 0;
	/* hex only: a key's fingerprint ("7A3F 92C1 B84E ..."), not a secret */
	for (size_t k = s; k < last; k++)
		if (is_upper(t[k]) && t[k] > 'F')
			return last;
	return 0;
}

static bool email_token(const char *s, size_t n)
{
	const char *at = memchr(s, '@', n);

	return at && at > s && memchr(at, '.', n - (size_t) (at - s)) && !memchr(s, '/', n);
}

static int rule_userinfo(struct context *c, size_t i, size_t e);

/* The token (white space to white space) around i, on its line. */
static void token_around(const char *t, size_t len, size_t i, struct token *k)
{
	size_t s = i, e = i;

	while (s > 0 && !is_space(t[s - 1]))
		s--;
	while (e < len && !is_space(t[e]))
		e++;
	k->s = s;
	k->e = e;
	token_core(t, len, k);
}

static bool dot_between_digits(const char *s, size_t n)
{
	for (size_t k = 1; k + 1 < n; k++)
		if (s[k] == '.' && is_digit(s[k - 1]) && is_digit(s[k + 1]))
			return true;
	return false;
}

/* "ella.ward09 / Unicorn77", "tommi.c2014 / Dinosauro14": a login and a password written as
 * a pair, with no key word. The login is one lower-case token (letters, digits, '.', '_',
 * '-'; a letter first; not a version), the password a strong value with a capital and a digit
 * (so "input / output", "km / h2" stay prose). The '/' at i has a space on each side. */
static int rule_login_pair(struct context *c, size_t i)
{
	const char *t = c->t;
	size_t len = c->len, ls = i - 1, le, rs = i + 2, re;
	struct value_shape h;
	bool mark = false;

	le = ls;
	while (ls > 0 && !is_space(t[ls - 1]))
		ls--;
	while (ls < le && strchr("([\"'", t[ls]))
		ls++; /* "(jake.m.2011 / Maple.Owl.47)" */
	if (le - ls < 4 || le - ls > 32 || !is_lower(t[ls]))
		return 0;
	for (size_t k = ls; k < le; k++) {
		if (!(is_lower(t[k]) || is_digit(t[k]) || t[k] == '.' || t[k] == '_' || t[k] == '-'))
			return 0;
		mark |= !is_lower(t[k]);
	}
	if ((t[ls] == 'v' && is_digit(AT(ls + 1))) || (!mark && le - ls < 6))
		return 0;
	re = rs;
	while (re < len && !is_space(t[re]))
		re++;
	while (re > rs && strchr(".,;:)!?", t[re - 1]) && !(t[re - 1] == '!' && re - rs > 8))
		re--;
	h = credential_shape_of(t + rs, re - rs);
	if (!h.upper || !h.digit || !h.lower || !strong_value(t + rs, re - rs) ||
	    dot_between_digits(t + rs, re - rs) /* "Python3.12": a version */ ||
	    overlaps_any(c, rs, re))
		return 0;
	return add_match(c, DETECT_SECRET, rs, re);
}

/* The tokens of the text that hold a symbol or an '@', or that start a run of four-byte
 * groups: found byte by byte, so that the words between them cost a test each. */
static int rule_tokens(struct context *c)
{
	const char *t = c->t;
	size_t len = c->len, i = 0, nl;
	struct token k;

	while (i < len) {
		unsigned char b = (unsigned char) t[i];
		bool sym = b == '!' || b == '#' || b == '$' || b == '%' || b == '&' || b == '*' ||
			   b == '?' || b == '^' || b == '~' || b == '+' || b == '@';
		bool b32 = (is_upper(b) || is_digit(b)) && (i == 0 || is_space(t[i - 1])) &&
			   i + 5 < len && (t[i + 4] == ' ' || t[i + 4] == '-') &&
			   (is_upper(t[i + 5]) || is_digit(t[i + 5]));
		size_t e;
		int r = 0;

		if (b == '/' && i > 0 && t[i - 1] == ' ' && i + 1 < len && t[i + 1] == ' ') {
			if ((r = rule_login_pair(c, i)) < 0)
				return r;
			i++;
			continue;
		}
		if (!sym && !b32) {
			i++;
			continue;
		}
		token_around(t, len, i, &k);
		const char *v = t + k.cs;
		size_t vn = k.ce - k.cs;
		if (b == '@' && (r = rule_userinfo(c, k.cs, k.ce)) < 0)
			return r;
		/* Microsoft Teams / Office 365 incoming webhooks */
		if (vn > 40 && (memmem(v, vn, "webhook.office.com/webhook", 26) ||
				memmem(v, vn, "outlook.office.com/webhook", 26))) {
			r = add_match(c, DETECT_API_KEY, k.cs, k.ce);
		} else if (vn && sym && password_shaped(v, vn)) {
			r = add_match(c, DETECT_SECRET, k.cs, k.ce);
		} else if (b32 && vn == 4 && (e = base32_groups_end(t, len, k.cs)) &&
			   !overlaps_any(c, k.cs, e)) {
			r = add_match(c, DETECT_SECRET, k.cs, e);
			k.e = e;
		} else if (b == '@' && email_token(v, vn)) {
			/* "mail@x.com / value" */
			struct token mark, x;
			if (next_token_q(t, len, k.e, len, &mark, &nl, false) &&
			    mark.e - mark.s == 1 && (t[mark.s] == '/' || t[mark.s] == ':') &&
			    next_token(t, len, mark.e, len, &x, &nl) && x.ce > x.cs &&
			    (strong_value(t + x.cs, x.ce - x.cs) ||
			     (credential_shape_of(t + x.cs, x.ce - x.cs).digit &&
			      strong_value_shape(t + x.cs, x.ce - x.cs)))) {
				r = add_match(c, DETECT_SECRET, x.cs, x.ce);
				k.e = x.e;
			}
		}
		if (r < 0)
			return r;
		i = MAX(k.e, i + 1);
	}
	return 0;
}

/* "?token=X", "&api_key=X", "&sig=X", "appid==X" (httpie): a credential in a URL's query or
 * a request's parameters, 12 bytes or more. */
static int rule_query(struct context *c, size_t i)
{
	static const char *const names[] = {
		"token", "access_token", "auth_token", "api_key", "apikey", "key", "sig", "signature",
		"appid", "app_id", "secret", "client_secret", "password", "pwd", "passwd", "auth",
		"X-Amz-Signature", "x-amz-signature", "sv", "code", "id_token", "refresh_token",
		"private_token", "session", "sessionid", "jwt", NULL,
	};
	const char *t = c->t;
	size_t len = c->len, p = i + 1, e, v;
	struct value_shape h;

	e = p;
	while (e < len && (is_alnum(t[e]) || t[e] == '_' || t[e] == '-'))
		e++;
	if (e == p || AT(e) != '=')
		return 0;
	{
		bool known = false;
		for (size_t k = 0; names[k] && !known; k++)
			known = strlen(names[k]) == e - p && memcmp(names[k], t + p, e - p) == 0;
		if (!known)
			return 0;
	}
	v = ++e;
	if (AT(v) == '=')
		v = ++e;
	while (e < len && !is_space(t[e]) && t[e] != '&' && t[e] != '"' && t[e] != '\'' &&
	       t[e] != '#' && t[e] != '<' && t[e] != '>' && e - v < 400)
		e++;
	if (e - v < 12 || credential_is_placeholder(t + v, e - v))
		return 0;
	h = credential_shape_of(t + v, e - v);
	if (!h.digit || h.lower + h.upper == 0)
		return 0;
	return add_match(c, DETECT_SECRET, v, e);
}

/* "<password>Erp#Lettura99</password>", "<clave>X</clave>": an element named for a
 * credential. */
static int rule_xml(struct context *c, size_t i)
{
	const char *t = c->t;
	size_t len = c->len, p = i + 1, ne, v, e;
	char w[32];

	ne = p;
	while (ne < len && (is_word((unsigned char) t[ne]) || t[ne] == '-') && ne - p < 31)
		ne++;
	/* a namespace prefix ("<wsse:Password>", "<ns2:apiKey>"): the local name counts */
	if (AT(ne) == ':' && ne > p && is_alpha(AT(ne + 1))) {
		p = ne + 1;
		ne = p;
		while (ne < len && (is_word((unsigned char) t[ne]) || t[ne] == '-') && ne - p < 31)
			ne++;
	}
	if (ne == p || AT(ne) != '>' || !credential_fold(t + p, ne - p, w, sizeof(w)))
		return 0;
	if (role_of(w, ne - p) != ROLE_PASSWORD && role_of(w, ne - p) != ROLE_PIN &&
	    !credential_key_name(t, p, ne))
		return 0;
	v = ne + 1;
	e = v;
	while (e < len && t[e] != '<' && t[e] != '\n' && e - v < 200)
		e++;
	if (AT(e) != '<' || AT(e + 1) != '/' || e - v < 3 || credential_is_placeholder(t + v, e - v))
		return 0;
	return add_match(c, DETECT_SECRET, v, e);
}

/* "orders:Vx7pQ2mLk9Wd@tcp(10.1.2.3:3306)/orders": user:password@ without a scheme (Go's
 * MySQL DSN, git remotes written short). The token starts at i. */
static int rule_userinfo(struct context *c, size_t i, size_t e)
{
	const char *t = c->t;
	const char *colon = memchr(t + i, ':', e - i), *at;

	if (!colon || colon == t + i)
		return 0;
	at = memchr(colon, '@', (size_t) (t + e - colon));
	if (!at || at - colon < 5)
		return 0;
	for (const char *q = t + i; q < colon; q++)
		if (!is_alnum(*q) && *q != '_' && *q != '-' && *q != '.')
			return 0;
	for (const char *q = colon + 1; q < at; q++)
		if (*q == '/' || *q == ':' || *q == '@')
			return 0;
	if (at + 1 >= t + e || !is_alnum(at[1]) ||
	    !strong_value(colon + 1, (size_t) (at - colon - 1)))
		return 0;
	return add_match(c, DETECT_SECRET, (size_t) (colon + 1 - t), (size_t) (at - t));
}

/* "net use P: \\srv\share /user:DOM\ana Secret#1": the word after /user:NAME. */
static int rule_net_use(struct context *c, size_t i)
{
	const char *t = c->t;
	size_t len = c->len, p = i, v, e;

	if (i + 6 > len || (memcmp(t + i, "/user:", 6) != 0 && memcmp(t + i, "/USER:", 6) != 0 &&
			    memcmp(t + i, "/u:", 3) != 0))
		return 0;
	while (p < len && !is_space(t[p]))
		p++;
	while (p < len && t[p] == ' ')
		p++;
	v = e = p;
	while (e < len && !is_space(t[e]))
		e++;
	if (e - v < 4 || t[v] == '/' || credential_is_placeholder(t + v, e - v) ||
	    !strong_value_shape(t + v, e - v))
		return 0;
	return add_match(c, DETECT_SECRET, v, e);
}

/* "chiave_api": "X", "clave_secreta=X", "password_db: X": a key name whose first part is the
 * key word (Italian and Spanish put it first), then ':' or '=', then a strong value. */
static int rule_prefixed_key(struct context *c, size_t i, size_t e)
{
	static const char *const firsts[] = {
		"chiave", "clave", "password", "contrasena", "contrase\xc3\xb1" "a", "pwd", "passwd",
		"token", "secret", "secreto", "segreto", "apikey", "codice", "pin", NULL,
	};
	const char *t = c->t;
	size_t len = c->len, u = i, p, v, ve;
	char w[16];

	bool suffix;

	while (u < e && t[u] != '_' && t[u] != '-')
		u++;
	if (u == e || u - i >= sizeof(w) || u == i)
		return 0;
	/* "MAIL_PASSWORD=vxqe mkzr hplt bwoa": the grammar reads the rest of such names */
	suffix = credential_key_name(t, i, e);
	if (!suffix && (!credential_fold(t + i, u - i, w, sizeof(w)) || !in_list(w, u - i, firsts)))
		return 0;
	p = e;
	if (AT(p) == '"' || AT(p) == '\'')
		p++;
	while (p < len && t[p] == ' ')
		p++;
	if (AT(p) != ':' && AT(p) != '=')
		return 0;
	p++;
	while (p < len && t[p] == ' ')
		p++;
	if (AT(p) == '"' || AT(p) == '\'')
		p++;
	v = ve = p;
	if ((ve = app_password_end(t, len, v)))
		return add_match(c, DETECT_SECRET, v, ve);
	if (suffix)
		return 0;
	ve = v;
	while (ve < len && !is_space(t[ve]) && t[ve] != '"' && t[ve] != '\'' && t[ve] != ',' &&
	       t[ve] != ';' && t[ve] != '}')
		ve++;
	if (!strong_value_shape(t + v, ve - v) && !passphrase_token(t + v, ve - v))
		return 0;
	return add_match(c, DETECT_SECRET, v, ve);
}

/* A bit per (first byte, length) of the words the walk below looks up (role words, account
 * names, number words, define/setenv/putenv): most words fail this before they are folded. */
static uint64_t gate[256];
static pthread_once_t gate_once = PTHREAD_ONCE_INIT;

static void gate_add(const char *w)
{
	size_t n = strlen(w);
	unsigned char c = (unsigned char) w[0];

	if (n < 64) {
		gate[c] |= 1ull << n;
		if (c >= 'a' && c <= 'z')
			gate[c - 32] |= 1ull << n; /* a capital first letter */
	}
}

static void gate_init(void)
{
	static const char *const calls[] = { "define", "setenv", "putenv", "putenv_s", NULL };
	const char *const *lists[] = { account_names, number_words, calls };

	for (size_t k = 0; k < ELEMENTSOF(role_words); k++) {
		uint32_t i = word_hash(role_words[k].w, strlen(role_words[k].w)) & (ROLE_SLOTS - 1);
		gate_add(role_words[k].w);
		while (role_slot[i])
			i = (i + 1) & (ROLE_SLOTS - 1);
		role_slot[i] = (uint8_t) (k + 1);
	}
	for (size_t l = 0; l < ELEMENTSOF(lists); l++)
		for (const char *const *w = lists[l]; *w; w++)
			gate_add(*w);
	/* upper-case words: "PASSWORD", "PIN" (their first byte is a capital already) */
	for (int c = 'A'; c <= 'Z'; c++)
		gate[c] |= gate[c + 32];
}

int credential_scan_context(const char *t, size_t len, struct detect_matches *m, size_t first,
			    credential_add_fn add)
{
	struct context c = { .t = t, .len = len, .m = m, .first = first, .add = add };
	struct table_state ts = { 0 };
	int r = 0;

	if (!t)
		return 0;
	(void) pthread_once(&gate_once, gate_init);
	/* lines: .pgpass, tables */
	for (size_t ls = 0; ls < len;) {
		const char *nl = memchr(t + ls, '\n', len - ls);
		size_t le = nl ? (size_t) (nl - t) : len;
		size_t e = le;
		while (e > ls && t[e - 1] == '\r')
			e--;
		if (memchr(t + ls, ':', e - ls) && (r = rule_pgpass(&c, ls, e)) < 0)
			return r;
		if ((r = rule_table(&c, &ts, ls, e)) < 0)
			return r;
		ls = le + 1;
	}
	/* tokens with a symbol in them */
	if ((r = rule_tokens(&c)) < 0)
		return r;
	/* words */
	for (size_t i = 0; i < len;) {
		unsigned char b = (unsigned char) t[i];
		size_t e;
		char w[32];

		if (b == '$' || b == '{' || b == '?' || b == '&' || b == '<' || b == '/' ||
		    (b == ' ' && i + 1 < len && is_alnum(t[i + 1]) && i + 2 < len)) {
			if (b == '$' || b == '{')
				r = rule_hash(&c, i);
			else if (b == '?' || b == '&' || b == ' ')
				r = rule_query(&c, i);
			else if (b == '<')
				r = rule_xml(&c, i);
			else
				r = rule_net_use(&c, i);
			if (r < 0)
				return r;
			i++;
			continue;
		}
		if (!is_word(b) || (i > 0 && is_word((unsigned char) t[i - 1]))) {
			i++;
			continue;
		}
		e = i;
		while (e < len && (is_word((unsigned char) t[e]) || (t[e] == '-' && e + 1 < len &&
								       is_alpha(t[e + 1]))))
			e++;
		if (e - i > 4 && (r = rule_prefixed_key(&c, i, e)) < 0)
			return r;
		if (e - i >= 2 && e - i < sizeof(w) && (gate[b] >> (e - i) & 1) &&
		    credential_fold(t + i, e - i, w, sizeof(w))) {
			size_t n = e - i, pn;
			enum role role = role_of(w, n);
			char pw[32];

			if (role == ROLE_NONE && in_list(w, n, number_words) &&
			    word_before(t, i, pw, sizeof(pw), &pn) && in_list(pw, pn, secret_adjectives))
				role = ROLE_CODE; /* "security number", "número secreto" */
			if (role == ROLE_NONE) {
				if (in_list(w, n, account_names))
					r = rule_account(&c, i, e);
				else if (w[0] == 'd' || w[0] == 's' || w[0] == 'p')
					r = rule_define(&c, i);
			} else if ((AT(e) == ' ' || AT(e) == '-') && e + 1 < len &&
				   is_word(AT(e + 1)) && role != ROLE_SEED && role != ROLE_CODES) {
				/* "password manager", "PIN pad" */
				size_t q = e + 1, qe = q;
				char nw[32];
				while (qe < len && is_word((unsigned char) t[qe]))
					qe++;
				if (qe - q < sizeof(nw) &&
				    credential_fold(t + q, qe - q, nw, sizeof(nw)) &&
				    credential_is_compound(nw, qe - q))
					role = ROLE_NONE;
			}
			if (role != ROLE_NONE && word_before(t, i, pw, sizeof(pw), &pn) &&
			    credential_is_compound_before(pw, pn))
				role = ROLE_NONE;
			/* a value spelled out near a key word, before it or after it */
			if (role == ROLE_PASSWORD || role == ROLE_PIN || role == ROLE_CODE ||
			    role == ROLE_LOCK) {
				size_t from = MAX(c.spelled_until, i > 300 ? i - 300 : 0);
				size_t to = MIN(len, e + 300);
				if (from < to && (r = rule_spelled(&c, from, to)) < 0)
					return r;
				c.spelled_until = MAX(c.spelled_until, to);
			}
			switch (role) {
			case ROLE_PASSWORD:
				if (n == 10 && memcmp(w, "passphrase", 10) == 0 &&
				    (r = rule_phrase_after(&c, e)) != 0) {
					if (r < 0)
						return r;
					break;
				}
				if ((r = rule_after(&c, i, e, role,
						    in_list(w, n, weak_heads) &&
							    !access_near(t, len, i, e, NULL))) >= 0)
					r = rule_before(&c, i);
				break;
			case ROLE_PIN:
				r = rule_after(&c, i, e, role, false);
				break;
			case ROLE_CODE:
				if (access_near(t, len, i, e, NULL))
					r = rule_after(&c, i, e, role, false);
				break;
			case ROLE_CODES:
				if (access_near(t, len, i, e, recovery_words)) {
					/* the list after the name, or before it ("... (they're my
					 * Google backup codes)") */
					size_t from = i > 300 ? i - 300 : 0;
					r = rule_codes(&c, e, MIN(len, e + 300));
					if (r >= 0 && !overlaps_any(&c, from, i))
						r = rule_codes(&c, from, i);
				}
				else if (access_near(t, len, i, e, NULL))
					r = rule_after(&c, i, e, ROLE_CODE, false);
				break;
			case ROLE_SEED:
				r = rule_seed(&c, e);
				/* "frase segreta", "secret phrase", "cifrada con la frase": a
				 * passphrase, whatever its words */
				if (r == 0 && secret_phrase(t, len, i, e, w, n))
					r = rule_after(&c, i, e, ROLE_PASSWORD, false);
				break;
			case ROLE_LOCK:
				/* "the safe was set to 7391": no access word needed, the copula is */
				r = rule_after(&c, i, e, role, false);
				break;
			case ROLE_NONE:
				break;
			}
			if (r < 0)
				return r;
		}
		i = e;
	}
	return 0;
}
