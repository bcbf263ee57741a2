/* SPDX-License-Identifier: MIT */
/*
 * credential.c: see credential.h. Character classes are ASCII; bytes >= 0x80 (UTF-8) count
 * as letters, as in detect.c. Every scanner reads at most a bounded window past its start.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../basic/macro.h"
#include "ascii-class.h"
#include "bip39-words.h"
#include "credential-private.h"
#include "credential.h"

/* ---- bytes ---- */

#define AT(i) ((i) < len ? (unsigned char) t[i] : 0)

static bool prefix_at(const char *t, size_t len, size_t i, const char *p)
{
	for (size_t k = 0; p[k]; k++)
		if (i + k >= len || t[i + k] != p[k])
			return false;
	return true;
}

/* Lower-cases ASCII and the Latin-1 capitals of UTF-8 (C3 80..9E, but for the sign x C3 97)
 * into w; returns false when the word does not fit. */
static bool fold(const char *s, size_t n, char *w, size_t size)
{
	if (n >= size)
		return false;
	for (size_t k = 0; k < n; k++) {
		unsigned char c = (unsigned char) s[k];
		if (k > 0 && (unsigned char) s[k - 1] == 0xc3 && c >= 0x80 && c <= 0x9e &&
		    c != 0x97)
			c += 0x20;
		w[k] = (char) to_lower(c);
	}
	w[n] = 0;
	return true;
}

/* w (n bytes, folded) is one of list's NULL-terminated entries. */
static bool in_list(const char *w, size_t n, const char *const *list)
{
	for (; *list; list++)
		if ((*list)[0] == w[0] && strnlen(*list, n + 1) == n && memcmp(*list, w, n) == 0)
			return true;
	return false;
}

/* ---- the word lists of the phrase grammar ---- */

/* What a head word accepts as its value (see value_ok()). */
#define HF_ALPHA  0x001u /* a plain word after a copula ("the password is sunflower") */
#define HF_DIGITS 0x002u /* digits only, 4+ */
#define HF_MIXED  0x004u /* two classes of character from 4 bytes ("hunter2!") */
#define HF_LONG   0x008u /* a token: 12+ bytes of two classes */
#define HF_CODE   0x010u /* an access code: digits in groups, "2580#", "7f3a2-91c4b" */
#define HF_QUAL   0x020u /* ... only with an access word near ("door code", "codice del cancello") \
			  */
#define HF_PHRASE    0x040u  /* several plain words to the end of the clause */
#define HF_SUFFIX    0x080u  /* also as the last part of an identifier (DB_PASSWORD, apiKey) */
#define HF_ORDINE    0x100u  /* "parola" only as "parola d'ordine" */
#define HF_PAIR      0x200u  /* "login: user / password" */
#define HF_SCHEME    0x400u  /* "Authorization: Bearer X", "Basic X" */
#define HF_WORDS     0x800u  /* a passphrase may start with any word ("correct horse ...") */
#define HF_DIGITONLY 0x2000u /* digit codes only (a code with no access word: "the code is 7261") \
			      */
#define HF_VERB   0x4000u    /* "opens with 1962", "si apre con 1958", "se abre con 1971" */
#define HF_LABEL  0x8000u    /* a device or service: "router: admin / X", "wifi: HomeNet / X" */
#define HF_MARKED 0x1000u    /* no quoted value without a copula or a mark ("pass \"-v\" on") */

struct head {
	const char *w;
	unsigned flags;
};

/* The tables and word lists keep their layout. */
/* clang-format off */
#define PW (HF_ALPHA | HF_DIGITS | HF_MIXED | HF_PHRASE | HF_SUFFIX)
#define PIN (HF_CODE | HF_DIGITS | HF_SUFFIX)
#define CODE (HF_CODE | HF_QUAL)
#define KEY (HF_LONG | HF_SUFFIX)

static const struct head heads[] = {
	{ "password", PW }, { "passwords", PW }, { "passwd", PW }, { "passcode", PW },
	{ "passphrase", PW | HF_WORDS }, { "pwd", PW }, { "pw", PW & ~HF_SUFFIX },
	{ "pass", (PW & ~HF_ALPHA) | HF_MARKED }, { "pswd", PW }, { "psw", PW }, { "passwort", PW },
	{ "senha", PW }, { "contrase\xc3\xb1" "a", PW }, { "contrase\xc3\xb1" "as", PW },
	{ "contrasena", PW }, { "parola", PW | HF_ORDINE },
	{ "clave", HF_DIGITS | HF_MIXED | HF_SUFFIX },
	{ "chiave", HF_DIGITS | HF_MIXED | HF_SUFFIX }, { "wpa", HF_MIXED | HF_LONG },
	{ "pin", PIN }, { "pins", PIN }, { "puk", PIN }, { "cvv", PIN }, { "cvc", PIN },
	{ "cvv2", PIN }, { "otp", PIN | HF_MIXED }, { "totp", PIN }, { "pincode", PIN },
	{ "code", CODE | HF_SUFFIX }, { "codes", CODE }, { "codice", CODE }, { "codici", CODE },
	{ "c\xc3\xb3" "digo", CODE }, { "c\xc3\xb3" "digos", CODE }, { "codigo", CODE },
	{ "combination", HF_CODE }, { "combinazione", HF_CODE }, { "combinaci\xc3\xb3n", HF_CODE },
	{ "combinacion", HF_CODE }, { "combo", HF_CODE },
	/* locks named for their code: "bike lock 4-4-0-9", "the keypad is 6318" */
	{ "lock", HF_CODE }, { "padlock", HF_CODE }, { "keypad", HF_CODE }, { "lockbox", HF_CODE },
	{ "keycode", HF_CODE }, { "doorcode", HF_CODE }, { "lucchetto", HF_CODE },
	{ "tastierino", HF_CODE }, { "candado", HF_CODE }, { "teclado", HF_CODE },
	{ "opens", HF_CODE | HF_VERB }, { "open", HF_CODE | HF_VERB },
	{ "unlock", HF_CODE | HF_VERB }, { "unlocks", HF_CODE | HF_VERB },
	{ "disarm", HF_CODE | HF_VERB }, { "apre", HF_CODE | HF_VERB },
	{ "aprire", HF_CODE | HF_VERB }, { "sblocca", HF_CODE | HF_VERB },
	{ "abre", HF_CODE | HF_VERB }, { "abrir", HF_CODE | HF_VERB },
	{ "desbloquea", HF_CODE | HF_VERB }, { "disinserire", HF_CODE | HF_VERB },
	{ "disattivare", HF_CODE | HF_VERB }, { "desactivar", HF_CODE | HF_VERB },
	{ "desarmar", HF_CODE | HF_VERB }, { "deactivate", HF_CODE | HF_VERB },
	{ "disattiva", HF_CODE | HF_VERB }, { "disinserisce", HF_CODE | HF_VERB },
	{ "desactiva", HF_CODE | HF_VERB }, { "disarms", HF_CODE | HF_VERB },
	{ "key", KEY }, { "keys", KEY }, { "token", KEY },
	{ "tokens", KEY }, { "sessionid", KEY }, { "phpsessid", KEY }, { "jsessionid", KEY },
	{ "sessid", KEY }, { "sid", KEY & ~HF_SUFFIX }, { "session_id", KEY },
	{ "session-id", KEY }, { "secret", KEY }, { "secrets", KEY }, { "segreto", KEY },
	{ "secreto", KEY }, { "apikey", KEY }, { "accesskey", KEY }, { "auth", KEY | HF_SCHEME },
	{ "authorization", KEY | HF_SCHEME }, { "bearer", KEY }, { "credential", KEY | HF_PAIR },
	{ "credentials", KEY | HF_PAIR }, { "creds", HF_PAIR | HF_LONG },
	{ "credenziali", HF_PAIR | HF_LONG }, { "credenciales", HF_PAIR | HF_LONG },
	{ "login", HF_PAIR }, { "router", HF_PAIR | HF_LABEL }, { "wifi", HF_PAIR | HF_LABEL },
	{ "wi-fi", HF_PAIR | HF_LABEL }, { "modem", HF_PAIR | HF_LABEL },
	{ "admin", HF_PAIR | HF_LABEL }, { "account", HF_PAIR | HF_LABEL },
	{ "vpn", HF_PAIR | HF_LABEL }, { "ssh", HF_PAIR | HF_LABEL }, { "ftp", HF_PAIR | HF_LABEL },
	{ "sftp", HF_PAIR | HF_LABEL }, { "nas", HF_PAIR | HF_LABEL }, { "db", HF_PAIR | HF_LABEL },
	{ "database", HF_PAIR | HF_LABEL }, { "server", HF_PAIR | HF_LABEL },
	{ "email", HF_PAIR | HF_LABEL }, { "mail", HF_PAIR | HF_LABEL },
	{ "smtp", HF_PAIR | HF_LABEL }, { "imap", HF_PAIR | HF_LABEL },
	{ "cuenta", HF_PAIR | HF_LABEL }, { "conto", HF_PAIR | HF_LABEL },
	{ "m\xc3\xb3" "dem", HF_PAIR | HF_LABEL },
};

/* Words that tell that a "code" opens something (before it in English, after it in Italian
 * and Spanish; "dell'allarme" is looked up as "allarme"). */
static const char *const access_words[] = {
	"door", "doors", "gate", "alarm", "safe", "lock", "locker", "padlock", "access", "security",
	"entry", "garage", "building", "keypad", "pin", "verification", "confirmation", "2fa",
	"mfa", "otp", "totp", "backup", "recovery", "authentication", "auth", "login", "unlock",
	"intercom", "one-time", "sms", "cvv", "cvc", "secret", "vault", "lockbox", "house", "front",
	"porta", "portone", "cancello", "allarme", "cassaforte", "citofono", "accesso", "sicurezza",
	"sblocco", "verifica", "conferma", "lucchetto", "box", "segreto", "recupero", "puerta",
	"portal", "port\xc3\xb3n", "alarma", "caja", "fuerte", "acceso", "seguridad", "desbloqueo",
	"verificaci\xc3\xb3n", "verificacion", "confirmaci\xc3\xb3n", "candado", "secreto",
	"recuperaci\xc3\xb3n", "respaldo", "telefonillo", "interfono", "armadietto", "taquilla",
	"open", "aprire", "abrir", "garaje", "cochera", "buz\xc3\xb3n", "trastero", "bancomat",
	"sim", "tarjeta", "carta", "card", "atm", "bank", "wifi", "wi-fi", "sbloccare", "sblocca",
	"desbloquear", "desbloquea", "unlocks", "phone", "telefono", "tel\xc3\xa9" "fono",
	"cupboard", "cabinet", "drawer", "armadio", "armario", "cassetto", "caj\xc3\xb3n", "barrier",
	"barriera", "sbarra", "barrera", "turnstile", "tornello", "torniquete", "activation",
	"attivazione", "activaci\xc3\xb3n", "activacion", "disarm", "disinserimento",
	"desactivaci\xc3\xb3n", "override", "cassetta", "keybox", "keysafe", NULL,
};

/* Words that make a code something other than a way in ("error code 404", "codice
 * fiscale", "código postal"): a code with neither these nor an access word near still counts
 * when its value is digits after a copula or a mark. */
static const char *const code_deny[] = {
	"error", "errors", "status", "exit", "return", "response", "http", "area", "zip", "postal",
	"post", "country", "dialing", "dial", "calling", "promo", "promotional", "discount",
	"coupon", "voucher", "referral", "gift", "product", "item", "sku", "tracking", "order",
	"reference", "ref", "source", "bar", "barcode", "qr", "colour", "color", "html", "ascii",
	"unicode", "char", "character", "key", "language", "currency", "airport", "iata", "icao",
	"iso", "region", "sort", "swift", "bic", "routing", "bank", "vat", "tax", "hs", "naics",
	"sic", "zone", "language", "exception", "fault", "diagnostic", "obd", "dtc", "trouble",
	"machine", "op", "opcode", "byte", "morse", "dress", "zip+4", "postcode", "pin-code",
	"fiscale", "postale", "avviamento", "sconto", "errore", "stato", "uscita", "prodotto",
	"articolo", "ordine", "riferimento", "tracciamento", "sorgente", "colore", "catastale",
	"ateco", "destinatario", "abi", "cab", "cap", "postal", "descuento", "cup\xc3\xb3n",
	"cupon", "estado", "salida", "producto", "art\xc3\xad" "culo", "articulo", "pedido",
	"referencia", "seguimiento", "fuente", "swift", "bancario", "iban", "nif", "cif",
	"returns", "returned", "devuelve", "devolvi\xc3\xb3", "restituisce", "risponde",
	"responde", NULL,
};

/* Linking words: "is", "è", "es", and the ones that may follow them ("is now", "è stata
 * cambiata in", "se cambió a"). */
static const char *const copulas[] = {
	"is", "was", "are", "were", "'s", "\xc3\xa8", "e'", "\xc3\xa9", "era", "sar\xc3\xa0",
	"sono", "erano", "es", "fue", "ser\xc3\xa1", "son", "eran", "reads", "equals", "remains",
	"rimane", "resta", "sigue", NULL,
};
static const char *const copula_more[] = {
	"now", "still", "currently", "just", "simply", "actually", "always", "set", "changed",
	"updated", "to", "be", "will", "has", "been", "ora", "adesso", "ancora", "sempre", "stata",
	"stato", "cambiata", "cambiato", "impostata", "impostato", "diventata", "in", "ahora",
	"todav\xc3\xad" "a", "siempre", "actualmente", "simplemente", "cambiada", "cambiado",
	"puesta", "a", "sigue", "siendo", "solo", "soltanto", "semplicemente", NULL,
};
/* Nouns that make a compound with the head word before them: the phrase is about the
 * compound ("password manager", "PIN pad", "token bucket"), not the credential. */
static const char *const compounds[] = {
	"manager", "managers", "reset", "resets", "field", "fields", "policy", "policies", "hint",
	"hints", "strength", "length", "change", "changes", "generator", "hash", "hashes", "prompt",
	"box", "form", "input", "rule", "rules", "requirement", "requirements", "expiry",
	"expiration", "protection", "protected", "pad", "entry", "bucket", "count", "limit",
	"limits", "budget", "usage", "window", "size", "type", "types", "format", "rotation",
	"file", "store", "storage", "dialog", "screen", "page", "link", "email", "mail", "login",
	"authentication", "auth", "complexity", "history", "lockout", "attempts", "spraying",
	"cracking", "cracker", "leak", "leaks", "dump", "list", "lists", "points", "holder",
	"holders", "exchange", "economy", "sale", "price", "error", "errors", "validation", "check",
	"checks", "checker", "meter", "flow", "grant", "endpoint", "server", "service", "refresh",
	"expires", "expired", "fingerprint", "fingerprints", "id", "ids", "identifier", "public", "publica", "p\xc3\xba" "blica",
	"pubblica", "pub", NULL,
};

/* Nouns that make a compound with the head word after them ("gestore di password", "gestor
 * de contraseñas", "password" in "reset password link" is not one: only these). */
static const char *const compounds_before[] = {
	"gestore", "gestori", "gestor", "gestores", "generatore", "generador", "reimpostazione",
	"recupero", "recuperaci\xc3\xb3n", "cambio", "campo", "requisiti", "requisitos",
	"lunghezza", "longitud", "politica", "pol\xc3\xadtica", NULL,
};

/* Qualifier words after which a value may follow without a copula ("come password ho messo X",
 * "I set the password to X" is a copula already). */
static const char *const setting_verbs[] = {
	"messo", "impostato", "scelto", "usato", "uso", "puesto", "elegido", "usado", "use",
	"using", "usando", "set", "chose", "picked", "try", "prova", "prueba", "ho", "ha", "he",
	"hemos", "abbiamo", "i", "i've", "we", "have", "my", "mia", "mio", "mi", "new", "nuova",
	"nueva", "your", NULL,
};

/* Words that a value cannot be: the complements of "the password is ..." that describe it,
 * articles, pronouns, prepositions. Also the first word of a would-be passphrase. */
static const char *const not_values[] = {
	/* English */
	"expired", "wrong", "incorrect", "correct", "required", "missing", "invalid", "valid",
	"too", "short", "long", "strong", "weak", "empty", "blank", "set", "unset", "not", "reset",
	"changed", "updated", "saved", "stored", "encrypted", "hashed", "hidden", "protected",
	"case", "sensitive", "optional", "mandatory", "needed", "necessary", "secure", "insecure",
	"safe", "unsafe", "same", "different", "new", "old", "the", "a", "an", "your", "my", "his",
	"her", "their", "our", "this", "that", "these", "those", "it", "what", "which", "who",
	"sent", "shown", "displayed", "below", "above", "here", "there", "in", "on", "at", "for",
	"of", "to", "from", "with", "by", "being", "been", "still", "also", "now", "always",
	"never", "generated", "provided", "given", "visible", "printed", "logged", "very", "quite",
	"really", "pretty", "easy", "hard", "simple", "complex", "complicated", "good", "bad",
	"fine", "ok", "okay", "secret", "unknown", "known", "forgotten", "lost", "locked",
	"blocked", "disabled", "enabled", "active", "inactive", "working", "broken", "used",
	"unused", "something", "anything", "nothing", "default", "usually", "generally",
	"typically", "only", "just", "probably", "maybe", "definitely", "actually", "available",
	"unavailable", "accepted", "rejected", "revoked", "rotated", "leaked", "compromised",
	"exposed", "public", "private", "personal", "shared", "unique", "random", "temporary",
	"permanent", "important", "useless", "why", "how", "where", "when", "whatever", "somewhere",
	"written", "attached", "included", "inside", "under", "over", "behind", "like", "as", "and",
	"or", "but", "if", "so", "then", "no", "yes", "all", "any", "some", "one", "two", "three",
	"four", "five", "six", "eight", "ten", "twelve", "at", "least", "more", "less", "than",
	"about", "around", "case-sensitive", "hard-coded", "hardcoded", "encoded", "plain",
	"plaintext", "cleartext", "clear", "stolen", "guessable", "obvious", "predictable",
	"common", "easy-to-guess", "impossible", "possible", "similar", "identical", "mine",
	"yours", "ours", "theirs", "fake", "real", "correctly", "incorrectly", "ready", "done",
	"gone", "back", "up", "down", "out", "off", "due", "about", "coming", "changing",
	"expiring", "getting", "going", "we", "you", "they", "he", "she", "i", "open", "closed",
	"aperto", "aperta", "chiuso", "chiusa", "abierto", "abierta", "cerrado", "cerrada",
	/* Italian */
	"scaduta", "scaduto", "sbagliata", "sbagliato", "errata", "errato", "corretta", "corretto",
	"obbligatoria", "obbligatorio", "richiesta", "richiesto", "mancante", "vuota", "vuoto",
	"troppo", "corta", "corto", "lunga", "lungo", "debole", "forte", "sicura", "sicuro",
	"insicura", "insicuro", "insicure", "insicuri", "insegura", "inseguro", "pericoloso",
	"peligroso", "rischioso", "arriesgado",
	"valida", "valido", "non", "cambiata", "cambiato", "modificata", "scritta", "salvata",
	"nascosta", "segreta", "segreto", "nuova", "nuovo", "vecchia", "vecchio", "stata", "stato",
	"la", "il", "lo", "le", "gli", "un", "una", "uno", "di", "del", "della", "che", "quella",
	"quello", "sempre", "ancora", "ora", "adesso", "diversa", "uguale", "stessa", "stesso",
	"necessaria", "protetta", "bloccata", "disattivata", "attiva", "composta", "formata",
	"sotto", "sopra", "dentro", "fuori", "nel", "nella", "sul", "sulla", "dietro", "davanti",
	"qui", "qua", "l\xc3\xac", "l\xc3\xa0", "come", "cosa", "quale", "dove", "quando",
	"perch\xc3\xa9", "mia", "mio", "tua", "tuo", "sua", "suo", "nostra", "vostra", "questa",
	"questo", "semplice", "facile", "difficile", "complessa", "personale", "temporanea",
	"casuale", "scritto", "salvato", "memorizzata", "criptata", "cifrata", "inviata",
	"arrivata", "diverso", "giusta", "giusto", "pubblica", "privata", "in", "per", "con", "su",
	"da", "a", "e", "o", "ma", "se", "solo", "proprio", "gi\xc3\xa0", "appena", "sbloccata",
	"scadente", "pronta",
	/* Spanish */
	"caducada", "caducado", "incorrecta", "incorrecto", "correcta", "correcto", "obligatoria",
	"obligatorio", "requerida", "requerido", "necesaria", "necesario", "vac\xc3\xad" "a",
	"vacia", "vac\xc3\xado", "corta", "larga", "largo", "d\xc3\xa9" "bil", "debil", "fuerte",
	"segura", "seguro", "v\xc3\xa1lida", "valida", "inv\xc3\xa1lida", "invalida", "cambiada",
	"modificada", "guardada", "oculta", "secreta", "nueva", "vieja", "antigua", "el", "los",
	"las", "de", "que", "siempre", "todav\xc3\xad" "a", "ahora", "diferente", "igual", "misma",
	"mismo", "protegida", "bloqueada", "muy", "demasiado", "distinta", "sensible", "mi", "tu",
	"su", "nuestra", "esta", "este", "esa", "ese", "aqu\xc3\xad", "ah\xc3\xad", "all\xc3\xad",
	"debajo", "encima", "dentro", "fuera", "detr\xc3\xa1s", "c\xc3\xb3mo", "como", "qu\xc3\xa9",
	"cu\xc3\xa1l", "d\xc3\xb3nde", "cuando", "sencilla", "f\xc3\xa1" "cil", "facil",
	"dif\xc3\xad" "cil", "personal", "temporal", "aleatoria", "escrita", "enviada", "expirada",
	"err\xc3\xb3nea", "p\xc3\xba" "blica", "privada", "en", "para", "por", "con", "sin", "y",
	"pero", "si", "ya", "solo", "s\xc3\xb3lo", "lista", "desactivada", "activa", "usada",
	"olvidada", NULL,
};

/* Words after a number that make it a length or a count ("4 digits", "5 cifre"). */
static const char *const unit_words[] = {
	"digits", "digit", "cifre", "cifra", "d\xc3\xadgitos", "digitos", "characters", "character",
	"chars", "caratteri", "caracteres", "letters", "lettere", "letras", "numbers", "numeri",
	"n\xc3\xbameros", "times", "volte", "veces", "attempts", "tentativi", "intentos", "tries",
	"minutes", "minuti", "minutos", "seconds", "secondi", "segundos", "hours", "ore", "horas",
	"days", "giorni", "d\xc3\xad" "as", "months", "mesi", "meses", "years", "anni",
	"a\xc3\xb1os", "euro", "euros", "dollars", "bytes", "bits", "positions", "posizioni",
	"posiciones", "long", "numbers", "words", "parole", "palabras", "chiffres", "x", "users",
	"people", "persone", "personas", "items", "requests", "rows", "lines", "righe",
	"l\xc3\xadneas", "files", "permissions", "ms", "kb", "mb", "gb", "px", "pixels", NULL,
};

/* Whole values that stand for one ("changeme", "xxx", "none") or are a type ("string"). */
static const char *const placeholders[] = {
	"changeme", "change_me", "change-me", "changeit", "password", "passwd", "pass", "secret",
	"token", "apikey", "api_key", "key", "null", "nil", "none", "undefined", "empty", "blank",
	"redacted", "hidden", "removed", "omitted", "masked", "todo", "tbd", "fixme", "example",
	"sample", "dummy", "placeholder", "foo", "bar", "foobar", "baz", "test", "testing", "true",
	"false", "yes", "no", "string", "str", "int", "integer", "number", "bool", "boolean",
	"text", "varchar", "char", "bytes", "secretstr", "optional", "any", "object", "value",
	"required", "required|string", "contrase\xc3\xb1" "a", "clave", "chiave", "segreto",
	"secreto", "mypassword", "yourpassword", "your_password", "your-password", "pwd", "env",
	"xxxxxx", "os.environ", "getenv", "input", "prompt", NULL,
};

/* Words after a value that end its clause ("the password is sunflower and the pin ..."). */
static const char *const clause_words[] = {
	"and", "but", "or", "so", "then", "please", "thanks", "if", "because", "for", "e", "ma",
	"o", "quindi", "per", "perch\xc3\xa9", "grazie", "se", "y", "pero", "o", "por", "para",
	"gracias", "porque", "si", "ok", "okay", "lol", "btw", "until", "since", "but", "while",
	"don't", "dont", "non", "no", "ed", "ma", "(", "-", NULL,
};

static const char *const wifi_words[] = {
	"wifi", "wi-fi", "wpa", "wpa2", "wpa3", "wlan", "wireless", "network", "router", "psk",
	"wep", "hotspot", NULL,
};
static const struct head wifi_key = { "key", PW & ~HF_SUFFIX };
/* "the storeroom code is 7261": no access word, but no word that makes it another code */
static const struct head weak_code = { "code", HF_CODE | HF_DIGITONLY };
/* "opens with [the code] 1962" */
static const char *const with_words[] = {
	"with", "using", "con", "col", "usando", "mediante", "type", "enter", "punch", "digita",
	"digitare", "digiti", "inserisci", "inserire", "teclea", "teclear", "marca", "marcar",
	"introduce", "introducir", "press", "premi", "pulsa", NULL,
};
static const char *const with_fill[] = {
	"the", "code", "pin", "combination", "il", "codice", "la", "combinazione", "el",
	"c\xc3\xb3" "digo", "combinaci\xc3\xb3n", "in", "si", "se", "poi", "then", "luego",
	"numero", "n\xc3\xbamero", "number", NULL,
};

/* clang-format on */
/* ---- heads ---- */

/* By last byte of the head word, its entries in heads[] (by_last[c] .. by_last[c + 1]). */
static uint8_t head_order[ELEMENTSOF(heads)];
static uint8_t head_len[ELEMENTSOF(heads)];
static uint8_t head_by_last[257];
/* A bit per last two bytes (folded) of some head: most words fail here. */
static uint64_t head_end2[65536 / 64];

static inline unsigned fold_byte(unsigned char c)
{
	return is_upper(c) ? c + 32u : (c >= 0x80 && c <= 0x9e && c != 0x97) ? c + 0x20u : c;
}

size_t credential_n_heads(void)
{
	return ELEMENTSOF(heads);
}

const char *credential_head(size_t k)
{
	return k < ELEMENTSOF(heads) ? heads[k].w : NULL;
}

static const struct head *head_lookup(const char *w, size_t n)
{
	if (n == 0)
		return NULL;
	unsigned char c = (unsigned char) w[n - 1];
	for (unsigned j = head_by_last[c]; j < head_by_last[c + 1]; j++) {
		const struct head *h = &heads[head_order[j]];
		if (head_len[head_order[j]] == n && memcmp(h->w, w, n) == 0)
			return h;
	}
	return NULL;
}

bool credential_is_head(const char *w, size_t n)
{
	return head_lookup(w, n) != NULL;
}

/* ---- BIP-39 ---- */

#define SEED_SLOTS 8192u               /* a power of two over 3 * 2048 / 0.75 */
static uint16_t seed_slot[SEED_SLOTS]; /* 0: empty, else 1 + index into seed_word */
static const char *seed_word[3 * BIP39_WORDS];
static uint8_t seed_len[3 * BIP39_WORDS];
static uint8_t seed_lang[3 * BIP39_WORDS];

static uint32_t seed_hash(const char *w, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t k = 0; k < n; k++)
		h = (h ^ (unsigned char) w[k]) * 16777619u;
	return h ^ (h >> 15);
}

unsigned credential_bip39_langs(const char *w, size_t n)
{
	for (uint32_t s = seed_hash(w, n) & (SEED_SLOTS - 1);; s = (s + 1) & (SEED_SLOTS - 1)) {
		unsigned e = seed_slot[s];
		if (!e)
			return 0;
		e--;
		if (seed_len[e] == n && memcmp(seed_word[e], w, n) == 0)
			return 1u << seed_lang[e];
	}
}

/* A bit per (first three bytes, length) of the BIP-39 words, hashed to 16 bits: a tenth of
 * the bits are set, so most other words fail this before the word is hashed whole. */
static uint64_t seed_tri[65536 / 64];

static inline unsigned seed_tri_key(const char *w, size_t n)
{
	uint32_t k = (uint32_t) (unsigned char) w[0] | (uint32_t) (unsigned char) w[1] << 8 |
		     (uint32_t) (unsigned char) w[2] << 16 | (uint32_t) n << 24;
	return (k * 2654435761u) >> 16;
}

static void seed_init(void)
{
	const char *const lists[3] = { bip39_english, bip39_italian, bip39_spanish };
	unsigned n = 0;

	for (unsigned l = 0; l < 3; l++) {
		const char *p = lists[l];
		for (unsigned k = 0; k < BIP39_WORDS; k++) {
			size_t wl = strlen(p);
			uint32_t s = seed_hash(p, wl) & (SEED_SLOTS - 1);
			while (seed_slot[s])
				s = (s + 1) & (SEED_SLOTS - 1);
			seed_word[n] = p;
			seed_len[n] = (uint8_t) wl;
			seed_lang[n] = (uint8_t) l;
			seed_slot[s] = (uint16_t) (n + 1);
			seed_tri[seed_tri_key(p, wl) >> 6] |= 1ull << (seed_tri_key(p, wl) & 63);
			n++;
			p += wl + 1;
		}
	}
}

/* The end of a word of letters (ASCII, UTF-8 bytes) from p, at most 12 bytes: lower case,
 * capitalised or all capitals ("ORBIT CANVAS", "Abandon ability"); p when the word is not
 * one (a digit or '_' in it, capitals inside a lower-case word). */
static size_t seed_word_end(const char *t, size_t len, size_t p)
{
	size_t e = p;
	unsigned upper = 0, lower = 0;

	while (e < len && (is_alpha(t[e]) || (unsigned char) t[e] >= 0x80) && e - p <= 12) {
		upper += is_upper(t[e]) && e > p;
		lower += is_lower(t[e]);
		e++;
	}
	if (e == p || e - p > 12 || (e < len && is_word((unsigned char) t[e])) ||
	    (upper && lower))
		return p;
	return e;
}

/* The BIP-39 languages of the word at p (0: none, or no word), its end in *ret_end. */
static unsigned seed_word_at(const char *t, size_t len, size_t p, size_t *ret_end)
{
	size_t e = seed_word_end(t, len, p);
	unsigned key;
	char w[16];

	if (e - p < 3 || !fold(t + p, e - p, w, sizeof(w)))
		return 0;
	key = seed_tri_key(w, e - p);
	if (!(seed_tri[key >> 6] >> (key & 63) & 1))
		return 0;
	*ret_end = e;
	return credential_bip39_langs(w, e - p);
}

/* A word that may stand in a seed phrase that someone copied with one word wrong ("almond"
 * for "almost"): 3 to 8 letters, in one case. */
static bool seed_stray_word(const char *t, size_t len, size_t p, size_t *ret_end)
{
	size_t e = seed_word_end(t, len, p);

	if (e - p < 3 || e - p > 8)
		return false;
	for (size_t k = p; k < e; k++)
		if ((unsigned char) t[k] >= 0x80)
			return false;
	*ret_end = e;
	return true;
}

/* The separator after a word of a run: white space and at most one ',' or '-', or a
 * number ("2." "3)"). Returns where the next word starts (e when there is none). */
static size_t seed_separator(const char *t, size_t len, size_t e)
{
	size_t q = e;

	while (q < len && q - e < 8 && (is_space(t[q]) || t[q] == ',' || t[q] == '-'))
		q++;
	if (is_digit(AT(q))) {
		size_t d = q;
		while (q < len && is_digit(t[q]) && q - d < 2)
			q++;
		if (AT(q) == '.' || AT(q) == ')' || AT(q) == ':')
			q++;
		while (q < len && q - e < 14 && is_space(t[q]))
			q++;
	}
	return q;
}

/* The run of words of a common language from p, with at most one stray word (see
 * seed_stray_word()) between two list words; returns the count of words in it (list words
 * and the stray one), *ret_stray set when there is one, the last word's end in *ret_last and
 * in *ret_break the start of what ended the run. */
static unsigned seed_run(const char *t, size_t len, size_t p, unsigned langs, size_t *ret_last,
			 size_t *ret_break, bool *ret_stray)
{
	unsigned count = 0;
	bool stray = false;

	for (;;) {
		size_t e = p, q;
		unsigned l = seed_word_at(t, len, p, &e);
		if (!(l & langs)) {
			/* one stray word, if a list word follows it */
			size_t se, nq, ne;
			if (stray || count == 0 || !seed_stray_word(t, len, p, &se))
				break;
			nq = seed_separator(t, len, se);
			ne = nq;
			if (nq == se || !(seed_word_at(t, len, nq, &ne) & langs))
				break;
			stray = true;
			count++;
			p = nq;
			continue;
		}
		langs &= l;
		count++;
		*ret_last = e;
		q = seed_separator(t, len, e);
		if (q == e || q >= len) {
			p = q;
			break;
		}
		p = q;
	}
	*ret_break = p;
	*ret_stray = stray;
	return count;
}

/* The start of the word that ends at or before p, skipping a separator back (white space,
 * ',', '-', a number with '.', ')' or ':'); lo if none at or after lo. */
static size_t seed_word_before(const char *t, size_t p, size_t lo)
{
	size_t q = p, e;

	while (q > lo && p - q < 14 &&
	       (is_space(t[q - 1]) || strchr(",-.):", t[q - 1]) || is_digit(t[q - 1])))
		q--;
	e = q;
	while (q > lo && e - q <= 12 && (is_alpha(t[q - 1]) || (unsigned char) t[q - 1] >= 0x80))
		q--;
	if (q == e || e - q > 12 || (q > lo && is_word((unsigned char) t[q - 1])))
		return lo;
	return q;
}

size_t credential_scan_seed(const char *t, size_t len, size_t lo, size_t i, size_t *ret_start,
			    size_t *ret_next)
{
	size_t e = i, starts[4], last = 0, brk = i;
	unsigned langs = seed_word_at(t, len, i, &e), n = 0;

	*ret_next = i + 1;
	if (!langs)
		return 0;
	/* the caller samples one word in four: a run of twelve has such a word within its
	 * first four, so look back over three words for where it may start */
	starts[n++] = i;
	for (int k = 0; k < 3; k++) {
		size_t b = seed_word_before(t, starts[n - 1], lo), be = b;
		unsigned l;
		if (b >= starts[n - 1] || !(l = seed_word_at(t, len, b, &be)) || !(l & langs))
			break;
		starts[n++] = b;
	}
	/* from the earliest; a start inside a run already tried (before its break) gives no
	 * longer run than that one */
	for (unsigned k = n; k-- > 0;) {
		if (k + 1 < n && starts[k] < brk)
			continue;
		bool stray;
		size_t b;
		unsigned n_run = seed_run(t, len, starts[k], 7, &last, &brk, &stray);
		if (n_run >= 12) {
			*ret_start = starts[k];
			return last;
		}
		/* eleven list words and a stray one just before or after them ("almond rescue
		 * tide ...") */
		if (n_run == 11 && !stray) {
			size_t be = 0, ae = 0, q = seed_separator(t, len, last);
			b = seed_word_before(t, starts[k], lo);
			if (b < starts[k] && seed_stray_word(t, len, b, &be) &&
			    seed_separator(t, len, be) == starts[k]) {
				*ret_start = b;
				return last;
			}
			if (q > last && seed_stray_word(t, len, q, &ae)) {
				*ret_start = starts[k];
				return ae;
			}
		}
	}
	*ret_next = MAX(brk, i + 1);
	return 0;
}

/* ---- vendor tokens ---- */

static bool alnum(int c)
{
	return is_alnum(c);
}
static bool alnum_us(int c)
{
	return is_alnum(c) || c == '_';
}
static bool upper_digit(int c)
{
	return is_upper(c) || is_digit(c);
}
static bool alnum_dash(int c)
{
	return is_alnum(c) || c == '-';
}
static bool hex(int c)
{
	return is_hex(c);
}
static bool b64url_dot(int c)
{
	return is_b64url(c) || c == '.';
}
static bool b64(int c)
{
	return is_alnum(c) || c == '+' || c == '/' || c == '=' || c == '-' || c == '_';
}

/* Prefix, body, body length; mixed: the body holds a digit and a letter (so that a plain
 * word never passes, which detect.c's plain-word shortcut relies on). The formats follow
 * the vendors' documentation as summarised by gitleaks and detect-secrets. */
static const struct token_format {
	const char *prefix;
	bool (*body)(int);
	uint16_t min, max;
	bool mixed;
} tokens[] = {
	/* clang-format off */
	{ "sk-", is_b64url, 20, 220, true }, /* OpenAI (sk-proj-, sk-svcacct-), Anthropic (sk-ant-) */
	{ "sk_live_", alnum, 16, 120, false }, /* Stripe */
	{ "sk_test_", alnum, 16, 120, false }, { "rk_live_", alnum, 16, 120, false },
	{ "rk_test_", alnum, 16, 120, false }, { "whsec_", alnum, 24, 80, true },
	{ "AKIA", upper_digit, 14, 18, false }, /* AWS access key ids */
	{ "ASIA", upper_digit, 14, 18, false }, { "ABIA", upper_digit, 16, 16, false },
	{ "ACCA", upper_digit, 16, 16, false },
	{ "ghp_", alnum, 30, 60, false }, /* GitHub */
	{ "gho_", alnum, 30, 60, false }, { "ghs_", alnum, 30, 60, false },
	{ "ghu_", alnum, 30, 60, false }, { "ghr_", alnum, 30, 60, false },
	{ "github_pat_", alnum_us, 22, 120, false },
	{ "glpat-", is_b64url, 20, 80, false }, /* GitLab */
	{ "gldt-", is_b64url, 20, 80, false }, { "glptt-", is_b64url, 20, 80, false },
	{ "glrt-", is_b64url, 20, 80, false }, { "glsoat-", is_b64url, 20, 80, false },
	{ "GR1348941", is_b64url, 20, 80, false },
	{ "xoxb-", alnum_dash, 10, 200, false }, /* Slack */
	{ "xoxp-", alnum_dash, 10, 200, false }, { "xoxa-", alnum_dash, 10, 200, false },
	{ "xoxr-", alnum_dash, 10, 200, false }, { "xoxs-", alnum_dash, 10, 200, false },
	{ "xoxe-", alnum_dash, 10, 200, false }, { "xoxe.xoxp-", alnum_dash, 10, 200, false },
	{ "xapp-", alnum_dash, 10, 200, false },
	{ "AIza", is_b64url, 30, 40, false }, /* Google */
	{ "GOCSPX-", is_b64url, 22, 34, false }, { "ya29.", b64url_dot, 30, 400, true },
	{ "hf_", alnum, 30, 60, true }, /* Hugging Face */
	{ "api_org_", alnum, 30, 40, true }, { "npm_", alnum, 30, 42, false },
	{ "pypi-AgEIcHlwaS5vcmc", is_b64url, 50, 300, false },
	{ "SG.", b64url_dot, 60, 80, false }, /* SendGrid: SG.<22>.<43> */
	{ "SK", hex, 32, 32, true },	      /* Twilio API key */
	{ "key-", hex, 32, 32, true },	      /* Mailgun */
	{ "dop_v1_", hex, 56, 72, false },    /* DigitalOcean */
	{ "doo_v1_", hex, 64, 64, false }, { "dor_v1_", hex, 64, 64, false },
	{ "shpat_", hex, 32, 32, true }, /* Shopify */
	{ "shpca_", hex, 32, 32, true }, { "shppa_", hex, 32, 32, true },
	{ "shpss_", hex, 32, 32, true },
	{ "dapi", hex, 32, 32, true },		/* Databricks */
	{ "gsk_", alnum, 44, 60, true },	/* Groq */
	{ "r8_", alnum, 37, 40, true },		/* Replicate */
	{ "pplx-", alnum, 40, 56, true },	/* Perplexity */
	{ "xai-", alnum, 70, 90, true },	/* xAI */
	{ "lin_api_", alnum, 34, 46, true },	/* Linear */
	{ "PMAK-", alnum_dash, 59, 59, false }, /* Postman */
	{ "NRAK-", upper_digit, 27, 27, false }, /* New Relic */
	{ "hvs.", is_b64url, 24, 200, true },	/* HashiCorp Vault */
	{ "hvb.", is_b64url, 24, 200, true },
	{ "sq0atp-", is_b64url, 22, 22, false },	/* Square */
	{ "sq0csp-", is_b64url, 43, 43, false }, { "EAAA", is_b64url, 60, 60, true },
	{ "EAA", alnum, 32, 400, true },	/* Meta Graph API (Facebook, WhatsApp Business) */
	{ "IGQV", is_b64url, 60, 400, true },	/* Instagram Graph API */
	{ "IGQW", is_b64url, 60, 400, true }, { "IGAA", is_b64url, 60, 400, true },
	{ "ck_", hex, 40, 40, true },		/* WooCommerce REST consumer key and secret */
	{ "cs_", hex, 40, 40, true },
	{ "sbp_", hex, 40, 40, true },		/* Supabase */
	{ "glc_", is_b64url, 32, 200, true },	/* Grafana */
	{ "glsa_", alnum_us, 32, 64, true },
	{ "sntrys_", b64, 60, 300, true },	/* Sentry */
	{ "ATATT3", b64, 100, 300, true },	/* Atlassian */
	{ "dckr_pat_", is_b64url, 22, 34, false }, /* Docker Hub */
	{ "ntn_", alnum, 40, 50, true },	/* Notion */
	{ "secret_", alnum, 43, 43, true },
	{ "dp.pt.", alnum, 43, 43, false },	/* Doppler */
	{ "fo1_", is_b64url, 43, 43, false },	/* Fly.io */
	{ "pul-", hex, 40, 40, true },		/* Pulumi */
	{ "ops_eyJ", b64url_dot, 100, 2000, false }, /* 1Password service accounts */
	{ "tskey-", alnum_dash, 20, 80, true }, /* Tailscale */
	{ "figd_", is_b64url, 40, 60, true },	/* Figma */
	{ "oy2", alnum, 43, 43, true },		/* NuGet */
	{ "CLOJARS_", hex, 60, 60, true }, { "rubygems_", hex, 48, 48, true },
	{ "AGE-SECRET-KEY-1", upper_digit, 58, 58, false }, /* age: a private key */
	/* clang-format on */
};
/* By first byte, the formats (token_order[token_start[c] .. token_start[c + 1]]); and a bit
 * per first two bytes that some format (or PuTTY) starts with, so that most words are passed
 * over after one lookup. */
static uint8_t token_order[ELEMENTSOF(tokens)];
static uint8_t token_start[257];
static uint64_t token_pair[65536 / 64];

/* "PuTTY-User-Key-File-2: ssh-rsa ... Private-MAC: <hex>", to the end of the MAC line (or
 * of the text: a truncated key is still a key). */
static size_t scan_putty(const char *t, size_t len, size_t i)
{
	const char *mac;
	size_t p;

	if (!prefix_at(t, len, i, "PuTTY-User-Key-File-"))
		return 0;
	mac = memmem(t + i, MIN(len - i, (size_t) 16384), "Private-MAC:", 12);
	if (!mac) {
		const char *priv =
		    memmem(t + i, MIN(len - i, (size_t) 16384), "Private-Lines:", 14);
		return priv ? len : 0;
	}
	p = (size_t) (mac - t) + 12;
	while (p < len && t[p] != '\n' && t[p] != '\r')
		p++;
	return p;
}

static bool all_digits(const char *s, size_t n)
{
	for (size_t k = 0; k < n; k++)
		if (!is_digit(s[k]))
			return false;
	return true;
}

size_t credential_scan_token(const char *t, size_t len, size_t i, enum detect_kind *kind)
{
	unsigned char c = (unsigned char) t[i];

	if (is_digit(c)) {
		size_t p = i, e;
		unsigned groups = 0;
		/* BitLocker recovery keys: eight groups of six digits joined by '-' */
		for (e = i; groups < 8 && e + 6 <= len && all_digits(t + e, 6);) {
			groups++;
			e += 6;
			if (groups == 8 || AT(e) != '-')
				break;
			e++;
		}
		if (groups == 8 && (e >= len || !is_word((unsigned char) t[e]))) {
			*kind = DETECT_SECRET;
			return e;
		}
		/* Telegram bot tokens: <bot id>:<35 base64url> */
		while (p < len && is_digit(t[p]) && p - i <= 10)
			p++;
		if (p - i < 8 || p - i > 10 || AT(p) != ':')
			return 0;
		e = ++p;
		while (e < len && is_b64url(t[e]) && e - p <= 35)
			e++;
		if (e - p != 35 || (e < len && is_word((unsigned char) t[e])))
			return 0;
		*kind = DETECT_API_KEY;
		return e;
	}
	{
		unsigned pair = (unsigned) c << 8 | AT(i + 1);
		if (!(token_pair[pair >> 6] >> (pair & 63) & 1))
			return 0;
	}
	if (c == 'P') {
		size_t e = scan_putty(t, len, i);
		if (e) {
			*kind = DETECT_PRIVATE_KEY;
			return e;
		}
	}
	for (unsigned j = token_start[c]; j < token_start[c + 1]; j++) {
		const struct token_format *f = &tokens[token_order[j]];
		size_t n, e, body;
		bool d = false, a = false;
		if (!prefix_at(t, len, i, f->prefix))
			continue;
		n = strlen(f->prefix);
		e = i + n;
		while (e < len && f->body((unsigned char) t[e]) && e - i - n <= f->max)
			e++;
		/* a body that may hold '.' or '=' does not end with the sentence's '.' */
		while (e > i + n && t[e - 1] == '.')
			e--;
		body = e - i - n;
		if (body < f->min || body > f->max || (e < len && is_word((unsigned char) t[e])))
			continue;
		if (f->mixed) {
			for (size_t q = i + n; q < e; q++) {
				d |= is_digit(t[q]);
				a |= is_alpha(t[q]);
			}
			if (!d || !a)
				continue;
		}
		*kind = f->prefix[0] == 'A' && f->prefix[1] == 'G' ? DETECT_PRIVATE_KEY
								   : DETECT_API_KEY;
		return e;
	}
	return 0;
}

/* ---- URLs ---- */

static bool is_scheme(int c)
{
	return is_alnum(c) || c == '+' || c == '.' || c == '-';
}

/* Is the password part of a URL a stand-in ("password", "pass", "<pass>", "${PW}", "***")? */
static bool url_placeholder(const char *s, size_t n)
{
	char w[32];

	if (n == 0 || s[0] == '<' || s[0] == '$' || s[0] == '{' || s[0] == '%' || s[0] == '[')
		return true;
	if (n >= sizeof(w))
		return false;
	fold(s, n, w, sizeof(w));
	if (in_list(w, n, placeholders) || strcmp(w, "pw") == 0 || strcmp(w, "pwd") == 0 ||
	    strcmp(w, "user") == 0 || strcmp(w, "username") == 0)
		return true;
	for (size_t k = 1; k < n; k++)
		if (s[k] != s[0])
			return false;
	return !is_digit(s[0]); /* "***", "xxxx" */
}

size_t credential_scan_url(const char *t, size_t len, size_t i, enum detect_kind *kind,
			   size_t *ret_start)
{
	size_t p = i, host, at = 0, colon = 0, q;

	/* scheme: letters, digits, + . -, one ':' inside ("jdbc:mysql"), then "://"; most
	 * words end in a space or punctuation after their letters */
	while (p < len && p - i < 24 && is_alpha(t[p]))
		p++;
	if (p >= len ||
	    (t[p] != ':' && t[p] != '+' && t[p] != '.' && t[p] != '-' && !is_digit(t[p])))
		return 0;
	while (p < len && p - i < 24 && (is_scheme(t[p]) || (t[p] == ':' && AT(p + 1) != '/')))
		p++;
	if (p == i || !is_alpha(t[i]) || !prefix_at(t, len, p, "://"))
		return 0;
	host = p + 3;
	/* webhooks: the whole URL is the credential */
	if (prefix_at(t, len, host, "hooks.slack.com/services/") ||
	    prefix_at(t, len, host, "discord.com/api/webhooks/") ||
	    prefix_at(t, len, host, "discordapp.com/api/webhooks/")) {
		size_t s = (size_t) ((const char *) memchr(t + host, '/', len - host) - t);
		q = s;
		while (q < len && (is_b64url(t[q]) || t[q] == '/') && q - s < 300)
			q++;
		if (q - s < 30)
			return 0;
		*kind = DETECT_API_KEY;
		*ret_start = s + 1 + (t[host] == 'h' ? 9 : 13);
		return q;
	}
	/* the authority: up to '/', '?', '#' or a space; its last '@' ends the user info (a
	 * password written with a raw '?' or '#' in it is still taken: an '@' follows it
	 * before any '/' or space) */
	for (q = host; q < len && q - host < 300; q++) {
		int c = (unsigned char) t[q];
		if (c == '/' || is_space(c) || c == '"' || c == '\'' || c == '`' || c == '<' ||
		    c == '>')
			break;
		if ((c == '?' || c == '#') && !memchr(t + q, '@', MIN(len - q, (size_t) 128)))
			break;
		if (c == '@')
			at = q;
		else if (c == ':' && !at && !colon)
			colon = q;
	}
	if (!at || !colon || colon > at || at + 1 >= len || !is_alnum(t[at + 1]))
		return 0;
	if (url_placeholder(t + colon + 1, at - colon - 1))
		return 0;
	{
		enum detect_kind k;
		size_t e = credential_scan_token(t, len, colon + 1, &k);
		*kind = e == at ? k : DETECT_URL_CREDENTIALS;
	}
	*ret_start = colon + 1;
	return at;
}

/* ---- the phrase grammar ---- */

struct word {
	size_t s, e; /* [s, e) in the text */
	char w[32];  /* folded */
	size_t n;
};

/* The word at p: letters, digits, UTF-8, and ' ’ - _ . ( ) inside; false when none or too
 * long. */
static bool read_word(const char *t, size_t len, size_t p, struct word *w)
{
	size_t e = p;

	while (e < len && e - p < 31) {
		unsigned char c = (unsigned char) t[e];
		if (is_word(c) || c == '\'' || c == '-' || c == '(' || c == ')' ||
		    (c == '.' && e + 1 < len && is_word((unsigned char) t[e + 1])))
			e++;
		else
			break;
	}
	if (e == p || e - p >= 31 || (e < len && is_word((unsigned char) t[e])))
		return false;
	w->s = p;
	w->e = e;
	w->n = e - p;
	return fold(t + p, e - p, w->w, sizeof(w->w));
}

/* Is the folded word an access word, after "dell'", "de l'", "(" or before ")"? */
static bool access_word(const char *w, size_t n)
{
	const char *a = memchr(w, '\'', n);
	char b[32];
	size_t m;

	if (a) {
		n -= (size_t) (a + 1 - w);
		w = a + 1;
	}
	if (n >= 3 && memcmp(w + n - 3, "\xe2\x80\x99", 3) == 0)
		n -= 3;
	while (n && (w[0] == '(' || w[0] == '-')) {
		w++;
		n--;
	}
	while (n && (w[n - 1] == ')' || w[n - 1] == ':')) {
		n--;
	}
	m = n;
	if (!m || m >= sizeof(b))
		return false;
	memcpy(b, w, m);
	b[m] = 0;
	return in_list(b, m, access_words);
}

/* Looks back from i over at most three words on the same line for a word of list ("front
 * door code", "2FA backup code", "DOOR_CODE", "wifi key"). */
static bool word_before(const char *t, size_t i, const char *const *list)
{
	size_t p = i, lim = i > 48 ? i - 48 : 0;

	for (int words = 0; words < 3 && p > lim; words++) {
		size_t e;
		char w[32];
		while (p > lim && (t[p - 1] == ' ' || t[p - 1] == '_' || t[p - 1] == '-' ||
				   t[p - 1] == ':' || t[p - 1] == ','))
			p--;
		e = p;
		while (p > lim && (is_word((unsigned char) t[p - 1]) || t[p - 1] == '\'') &&
		       t[p - 1] != '_')
			p--;
		if (e == p || e - p >= sizeof(w))
			return false;
		fold(t + p, e - p, w, sizeof(w));
		if (list ? in_list(w, e - p, list) : access_word(w, e - p))
			return true;
		if (p > lim && t[p - 1] != ' ' && t[p - 1] != '_' && t[p - 1] != '-' &&
		    t[p - 1] != ':' && t[p - 1] != ',')
			return false;
	}
	return false;
}

static bool is_quote(const char *t, size_t len, size_t p, size_t *ret_n, const char **ret_close)
{
	static const struct {
		const char *open, *close;
	} q[] = {
		{ "\"", "\"" },
		{ "'", "'" },
		{ "`", "`" },
		{ "\xc2\xab", "\xc2\xbb" },
		{ "\xe2\x80\x9c", "\xe2\x80\x9d" },
		{ "\xe2\x80\x98", "\xe2\x80\x99" },
	};
	for (size_t k = 0; k < ELEMENTSOF(q); k++)
		if (prefix_at(t, len, p, q[k].open)) {
			*ret_n = strlen(q[k].open);
			*ret_close = q[k].close;
			return true;
		}
	return false;
}

/* Does the clause end at p (after a value)? The end, a line end, punctuation, or a word that
 * starts another clause ("and", "e", "y", "please"). */
static bool clause_end(const char *t, size_t len, size_t p)
{
	struct word w;

	while (p < len && (t[p] == ' ' || t[p] == '\t'))
		p++;
	if (p >= len || strchr("\r\n.,;!?)]}:(-", t[p]) || (unsigned char) t[p] == 0xe2)
		return true;
	return read_word(t, len, p, &w) && in_list(w.w, w.n, clause_words);
}

static unsigned count_in(const char *s, size_t n, const char *set)
{
	unsigned k = 0;

	for (size_t i = 0; i < n; i++)
		k += s[i] && strchr(set, s[i]) != NULL;
	return k;
}

/* A snake_case name: lower-case letters and digits in parts joined by single '_'
 * ("force_zip64", "max_len"). */
static bool snake_name(const char *s, size_t n)
{
	bool us = false;

	if (n == 0 || !is_lower(s[0]) || s[n - 1] == '_')
		return false;
	for (size_t i = 1; i < n; i++) {
		if (s[i] == '_') {
			if (s[i - 1] == '_')
				return false;
			us = true;
		} else if (!is_lower(s[i]) && !is_digit(s[i]))
			return false;
	}
	return us;
}

struct value_shape credential_shape_of(const char *s, size_t n)
{
	struct value_shape h = { .n = (unsigned) n };

	for (size_t k = 0; k < n; k++) {
		int c = (unsigned char) s[k];
		if (is_lower(c))
			h.lower++;
		else if (is_upper(c))
			h.upper++;
		else if (is_digit(c))
			h.digit++;
		else if (c >= 0x80)
			h.utf8++;
		else {
			h.other++;
			h.sym += strchr("!#$%&*+=?@^~", c) != NULL;
		}
	}
	return h;
}

static unsigned classes(const struct value_shape *h)
{
	return (h->lower + h->utf8 > 0) + (h->upper > 0) + (h->digit > 0) + (h->other > 0);
}

/* A token for a key, a token or a secret: letters with digits, or both cases over 16 bytes
 * ("__name__", "include-system-site-packages", "1.3.6.1.5.5.7.3.1" are not). */
static bool token_like(const struct value_shape *h, bool strict)
{
	if (h->n < 12)
		return false;
	return (h->digit >= (strict ? 2u : 1u) && h->lower + h->upper >= 2) ||
	       (h->upper > 0 && h->lower > 0 && h->n >= 16 && h->upper * 5 >= h->n);
}

/* Stands for a value rather than being one: "<your-password>", "${DB_PASSWORD}", "$PW",
 * "%PW%", "{{ vault_pw }}", "***", "xxxx", "changeme", "your_password_here", "!vault". */
static bool placeholder(const char *s, size_t n)
{
	char w[64];
	bool same = true;

	if (n == 0)
		return true;
	if (s[0] == '-' && n > 1 && (is_alpha(s[1]) || s[1] == '-'))
		return true; /* a command-line option: "--quiet", "-v" */
	if (strchr("<[{$%!|>(", s[0]) || (n >= 3 && memcmp(s, "\xe2\x9f\xa8", 3) == 0) ||
	    (n >= 3 && memcmp(s, "\xe2\x80\xa2", 3) == 0) ||
	    (n >= 3 && memcmp(s, "\xe2\x80\xa6", 3) == 0))
		return true;
	for (size_t k = 1; k < n; k++)
		same &= s[k] == s[0];
	if (same && !is_digit(s[0]))
		return true;
	if (n >= sizeof(w))
		return false;
	fold(s, n, w, sizeof(w));
	if (in_list(w, n, placeholders))
		return true;
	/* "xxxx-xxxx", "XXX123"? no: only runs of x with separators */
	{
		bool xs = true;
		for (size_t k = 0; k < n; k++)
			xs &=
			    w[k] == 'x' || w[k] == '*' || w[k] == '-' || w[k] == '.' || w[k] == '_';
		if (xs)
			return true;
	}
	if ((strstr(w, "your") || strstr(w, "tua") == w || strstr(w, "tu_") == w ||
	     strstr(w, "my_") == w || strstr(w, "insert") || strstr(w, "enter") == w ||
	     strstr(w, "inserisci") || strstr(w, "introduce")) &&
	    (strstr(w, "pass") || strstr(w, "key") || strstr(w, "token") || strstr(w, "secret") ||
	     strstr(w, "pwd") || strstr(w, "contrase") || strstr(w, "clave") || strstr(w, "here")))
		return true;
	if (n > 5 && (strcmp(w + n - 5, "_here") == 0 || strcmp(w + n - 5, "-here") == 0))
		return true;
	return false;
}

/* Looks like code, not a value: "request.form['password']", "getpass()", "os.environ",
 * "user_password", "self.pw", "hash(pw)". */
static bool code_like(const char *s, size_t n, int next, int next2)
{
	size_t k = 0;
	bool dot = false, us = false, digit = false, upper = false;

	if (next == '(' || next == '[' || (next == '.' && (is_alpha(next2) || next2 == '_')))
		return true;
	while (k < n && (is_alnum(s[k]) || s[k] == '_' || s[k] == '.')) {
		dot |= s[k] == '.';
		us |= s[k] == '_';
		digit |= is_digit(s[k]);
		upper |= is_upper(s[k]);
		k++;
	}
	if (k < n && k > 0 && (s[k] == '(' || s[k] == '[') && (is_alpha(s[0]) || s[0] == '_'))
		return true; /* a call or an index */
	if (k == n && is_alpha(s[0]) && !digit) {
		/* a dotted path or a snake_case name of lower-case letters */
		if (dot && s[n - 1] != '.')
			return true;
		if (us && !upper)
			return true;
	}
	return false;
}

/* The unquoted value at p: up to white space, a quote, '<', '>' or ';', or ',' before a space;
 * then the sentence's punctuation taken off its end. */
static size_t value_end(const char *t, size_t len, size_t p)
{
	size_t v = p;
	int paren = 0;

	while (v < len && v - p < 200) {
		int c = (unsigned char) t[v];
		if (is_space(c) || c == '"' || c == '`' || c == '\'' || c == '<' || c == '>' ||
		    c == ';')
			break;
		if (c == ',' && (v + 1 >= len || is_space(t[v + 1])))
			break;
		if (c == '(')
			paren++;
		if (c == ')' && --paren < 0)
			break;
		if (c == 0xe2 && (AT(v + 1) == 0x80 || AT(v + 1) == 0x9f))
			break; /* ” ’ … — and our own ⟨placeholders⟩ */
		v++;
	}
	while (v > p && strchr(".,:;?", t[v - 1]))
		v--;
	return v;
}

/* Digits in groups: "4471", "1 9 7 3", "12-38-07", "2580#"; returns the end or 0. */
static size_t digit_code_end(const char *t, size_t len, size_t p)
{
	size_t q = p, e = 0, digits = 0;

	for (int groups = 0; groups < 8; groups++) {
		size_t s = q;
		while (q < len && is_digit(t[q]) && q - s < 12)
			q++;
		if (q == s || (q < len && is_alpha(t[q])))
			break;
		digits += q - s;
		e = q;
		if (q + 1 < len && (t[q] == ' ' || t[q] == '-' || t[q] == '.') &&
		    is_digit(t[q + 1]) && (t[q] != ' ' || q - s <= 4)) {
			q++;
			continue;
		}
		break;
	}
	if (!e || digits < 3 || digits > 16)
		return 0;
	if (e < len && (t[e] == '#' || t[e] == '*'))
		e++;
	if (e < len && is_word((unsigned char) t[e]))
		return 0;
	return e;
}

/* A number followed by a unit ("4 digits", "5 cifre", "8 caratteri")? */
static bool unit_follows(const char *t, size_t len, size_t e)
{
	struct word w;

	while (e < len && t[e] == ' ')
		e++;
	if (e < len && t[e] == '%')
		return true;
	return read_word(t, len, e, &w) && in_list(w.w, w.n, unit_words);
}

/* The first run of letters in the value is a describing word ("required|min:8")? */
static bool starts_with_not_value(const char *s, size_t n)
{
	size_t k = 0;
	char w[32];

	while (k < n && k < sizeof(w) - 1 && (is_alpha(s[k]) || (unsigned char) s[k] >= 0x80))
		k++;
	if (k == 0 || k >= sizeof(w) - 1 || (k < n && (is_alnum(s[k]) || s[k] == '_')))
		return false; /* a whole word only: "required|min:8", not "i2XP", "mi_super_x" */
	if (k == 1 && k < n && s[k] != ' ')
		return false; /* "y", "e", "a" are words only before a space: not "Y_4dQ", "e/GW3" */
	fold(s, k, w, sizeof(w));
	return in_list(w, k, not_values) || in_list(w, k, placeholders);
}

/* A word that describes a value rather than being one: "wrong", "required", and
 * participles and adverbs ("reset", "changed", "cambiata", "cambiada", "usually"). */
static bool describing(const char *w, size_t n, unsigned utf8)
{
	if (in_list(w, n, not_values))
		return true;
	return n >= 6 && utf8 == 0 &&
	       (strcmp(w + n - 2, "ed") == 0 || strcmp(w + n - 3, "ing") == 0 ||
		strcmp(w + n - 2, "ly") == 0 || strcmp(w + n - 3, "ata") == 0 ||
		strcmp(w + n - 3, "ato") == 0 || strcmp(w + n - 3, "ada") == 0 ||
		strcmp(w + n - 3, "ado") == 0 || strcmp(w + n - 3, "ida") == 0 ||
		strcmp(w + n - 3, "ita") == 0 || strcmp(w + n - 4, "ente") == 0 ||
		strcmp(w + n - 4, "ible") == 0 || strcmp(w + n - 4, "able") == 0);
}

enum sep { SEP_NONE, SEP_MARK, SEP_COPULA };

/*
 * The value at p for head h, after a separator of kind sep. Returns its end and sets
 * *ret_start, or 0. Without a separator (SEP_NONE) only a strong value passes.
 */
static size_t value_at(const char *t, size_t len, size_t p, const struct head *h, enum sep sep,
		       size_t *ret_start)
{
	size_t qn, v, n;
	const char *close;
	struct value_shape sh;

	if (p >= len)
		return 0;
	if (is_quote(t, len, p, &qn, &close)) {
		/* a quoted value: any bytes to the closing quote on the same line */
		size_t s = p + qn, e = s;
		const char *nl;
		while (e < len && e - s < 160 && t[e] != '\n' && !prefix_at(t, len, e, close))
			e++;
		if (!prefix_at(t, len, e, close) || e - s < 3 || placeholder(t + s, e - s))
			return 0;
		if (sep == SEP_NONE && (h->flags & HF_MARKED))
			return 0;
		if ((h->flags & HF_DIGITONLY) && digit_code_end(t, len, s) != e)
			return 0;
		nl = memchr(t + s, ' ', e - s);
		sh = credential_shape_of(t + s, e - s);
		if (h->flags & HF_CODE && !(h->flags & HF_DIGITS) && sh.digit == 0)
			return 0;
		if (nl && !(h->flags & (HF_PHRASE | HF_ALPHA)))
			return 0; /* several words: a passphrase only */
		if (starts_with_not_value(t + s, e - s)) {
			/* "too short" describes; "el gato come pescado" is a passphrase */
			unsigned spaces = 0;
			for (size_t k = s; k < e; k++)
				spaces += t[k] == ' ';
			if (spaces < 2 || !(h->flags & HF_PHRASE))
				return 0;
		}
		if (!nl && code_like(t + s, e - s, 0, 0) && sh.digit == 0)
			return 0;
		if ((h->flags & (HF_LONG | HF_MIXED | HF_ALPHA | HF_DIGITS | HF_PHRASE)) ==
			HF_LONG &&
		    !token_like(&sh, sep == SEP_NONE))
			return 0;
		{
			/* "x" + y, "x".format(), "x" % y, "x"[0]: code around a string */
			size_t a = e + strlen(close);
			while (a < len && t[a] == ' ')
				a++;
			if (a < len && strchr("+.%[*", t[a]) &&
			    !(t[a] == '.' && (a + 1 >= len || is_space(t[a + 1]))))
				return 0;
		}
		*ret_start = s;
		return e;
	}
	/* access codes: digits in groups, or letters and digits ("7f3a2-91c4b") in a list */
	if (h->flags & HF_CODE) {
		size_t e = digit_code_end(t, len, p), last = 0;
		if (e && !unit_follows(t, len, e)) {
			*ret_start = p;
			return e;
		}
		for (size_t q = p; q < len && !(h->flags & HF_DIGITONLY);) {
			size_t ve = value_end(t, len, q);
			struct value_shape s2 = credential_shape_of(t + q, ve - q);
			if (ve - q < 4 || ve - q > 24 || s2.digit == 0 ||
			    s2.lower + s2.upper == 0 || s2.utf8 || placeholder(t + q, ve - q) ||
			    code_like(t + q, ve - q, AT(ve), AT(ve + 1)))
				break;
			last = ve;
			q = ve;
			while (q < len && (t[q] == ' ' || t[q] == ',' || t[q] == '\n'))
				q++;
		}
		if (last) {
			*ret_start = p;
			return last;
		}
		if (!(h->flags & (HF_MIXED | HF_DIGITS)))
			return 0;
	}
	v = value_end(t, len, p);
	n = v - p;
	if (n == 0 || placeholder(t + p, n) || code_like(t + p, n, AT(v), AT(v + 1)) ||
	    credential_is_tech_word(t + p, n))
		return 0;
	sh = credential_shape_of(t + p, n);
	/* digits only */
	if (sh.digit == n) {
		if (!(h->flags & (HF_DIGITS | HF_CODE)) || n < ((h->flags & HF_CODE) ? 3u : 4u) ||
		    n > 32 || unit_follows(t, len, v))
			return 0;
		if (sep == SEP_NONE && !(h->flags & HF_CODE))
			return 0; /* "password 1234" is too loose; "PIN 1234" is not */
		*ret_start = p;
		return v;
	}
	/* two classes or more */
	if (sh.digit + sh.other > 0 && sh.lower + sh.upper + sh.utf8 + sh.digit > 0 &&
	    classes(&sh) >= 2) {
		if (!(h->flags & (HF_MIXED | HF_LONG | HF_DIGITS | HF_ALPHA)))
			return 0;
		if (!(h->flags & (HF_MIXED | HF_DIGITS | HF_ALPHA)) &&
		    !token_like(&sh, sep == SEP_NONE))
			return 0;
		if (n < 4 || sh.other * 2 > n + 1 || starts_with_not_value(t + p, n))
			return 0;
		if (sep == SEP_NONE &&
		    (n < 5 || sh.digit == 0 || sh.lower + sh.upper + sh.utf8 == 0 ||
		     !is_alnum(t[p]) || snake_name(t + p, n)))
			return 0; /* without a copula: a strong value, not a name ("force_zip64") */
		*ret_start = p;
		return v;
	}
	/* letters only: a long random-looking token, a plain word, or a passphrase */
	if (sh.digit + sh.other == 0) {
		char w[32];
		if ((h->flags & HF_LONG) && n >= 16 && sh.upper && sh.lower && sh.upper * 4 >= n &&
		    sep != SEP_NONE) {
			*ret_start = p;
			return v;
		}
		if (!(h->flags & HF_ALPHA) || sep != SEP_COPULA || n < 4 || n >= sizeof(w))
			return 0;
		fold(t + p, n, w, sizeof(w));
		if (describing(w, n, sh.utf8) && !((h->flags & HF_WORDS) && !clause_end(t, len, v)))
			return 0;
		if (clause_end(t, len, v)) {
			*ret_start = p;
			return v;
		}
		/* "correct horse battery staple": 3 to 8 plain words, none a describing one, to
		 * the end of the clause */
		if (h->flags & HF_PHRASE) {
			size_t q = v, last = v;
			unsigned words = 1;
			struct word wd;
			while (words < 8 && q < len && t[q] == ' ' &&
			       read_word(t, len, q + 1, &wd)) {
				struct value_shape s2 = credential_shape_of(t + wd.s, wd.n);
				if (s2.digit + s2.other || wd.n < 3 ||
				    describing(wd.w, wd.n, s2.utf8) ||
				    in_list(wd.w, wd.n, clause_words) ||
				    in_list(wd.w, wd.n, unit_words))
					break;
				words++;
				last = q = wd.e;
			}
			if (words >= 3 && clause_end(t, len, last)) {
				*ret_start = p;
				return last;
			}
		}
	}
	return 0;
}

/* "user / password", "user:password", "user, password" after "login" or "credentials": the
 * password. */
static size_t pair_at(const char *t, size_t len, size_t p, bool strict, size_t *ret_start)
{
	size_t u = p, q;
	struct value_shape sh;
	size_t v;

	while (u < len && u - p < 64 && !is_space(t[u]) && t[u] != '/' && t[u] != ':' &&
	       t[u] != ',')
		u++;
	if (u == p || u >= len)
		return 0;
	q = u;
	while (q < len && q - u < 4 && (t[q] == ' ' || t[q] == '/' || t[q] == ':' || t[q] == ','))
		q++;
	if (q == u || (t[u] == ' ' && q == u + 1))
		return 0; /* "user password": too loose */
	v = value_end(t, len, q);
	if (v - q < 4 || placeholder(t + q, v - q) || code_like(t + q, v - q, AT(v), AT(v + 1)))
		return 0;
	sh = credential_shape_of(t + q, v - q);
	if (classes(&sh) < 2 || sh.digit + sh.other == 0)
		return 0;
	if (strict) {
		/* after a device or service label: a password, not "nginx / httpd-2.4" */
		unsigned punct = sh.other - count_in(t + q, v - q, ".-_");
		if (v - q < 6 || sh.lower + sh.upper < 2 || (sh.upper == 0 && punct == 0))
			return 0;
	}
	*ret_start = q;
	return v;
}

/* The end of the identifier at i (letters, digits, '_', '-', '.', UTF-8), or 0 when longer
 * than 48 bytes. */
static size_t identifier_end(const char *t, size_t len, size_t i)
{
	size_t e = i;

	while (e < len && (is_word((unsigned char) t[e]) || t[e] == '-' || t[e] == '.') &&
	       e - i < 48)
		e++;
	while (e > i && (t[e - 1] == '.' || t[e - 1] == '-'))
		e--;
	if (e - i >= 48 || (e < len && is_word((unsigned char) t[e])))
		return 0;
	return e;
}

/* The head word that ends the identifier [i, e) at a part boundary ("DB_PASSWORD",
 * "apiKey", "X-API-Key"), or the whole word; NULL for none. *ret_whole: the identifier is the
 * head word alone. */
/* Capitals and digits only ("PGPASSWORD", "MYSQL2PWD"). */
static bool all_caps(const char *s, size_t n)
{
	for (size_t k = 0; k < n; k++)
		if (!is_upper(s[k]) && !is_digit(s[k]) && s[k] != '_')
			return false;
	return true;
}

static const struct head *find_head(const char *t, size_t i, size_t e, bool *ret_whole)
{
	char w[49];
	size_t n = e - i;
	unsigned char last;

	if (n < 2 || n >= sizeof(w))
		return NULL;
	{
		unsigned pair =
		    fold_byte((unsigned char) t[e - 2]) << 8 | fold_byte((unsigned char) t[e - 1]);
		if (!(head_end2[pair >> 6] >> (pair & 63) & 1))
			return NULL;
	}
	last = (unsigned char) to_lower((unsigned char) t[e - 1]);
	fold(t + i, n, w, sizeof(w));
	for (unsigned j = head_by_last[last]; j < head_by_last[last + 1]; j++) {
		const struct head *h = &heads[head_order[j]];
		size_t hl = head_len[head_order[j]], s;
		if (hl > n || memcmp(w + n - hl, h->w, hl) != 0)
			continue;
		s = i + n - hl;
		if (s == i) {
			*ret_whole = true;
			return h;
		}
		if (!(h->flags & HF_SUFFIX))
			continue;
		if (strchr("_-.", t[s - 1]) || (is_upper(t[s]) && is_lower(t[s - 1])) ||
		    (hl >= 5 && all_caps(t + i, n))) {
			/* DB_PASSWORD, apiKey, X-API-Key, and PGPASSWORD, GHTOKEN */
			*ret_whole = false;
			return h;
		}
	}
	return NULL;
}

/* After the copula word at p (already read as w): more linking words ("is now", "è stata
 * cambiata in", "was changed to"), then ':'. Returns where the value may start. */
static size_t after_copula(const char *t, size_t len, size_t p)
{
	struct word w;

	for (int k = 0; k < 4; k++) {
		size_t q = p;
		while (q < len && t[q] == ' ')
			q++;
		if (!read_word(t, len, q, &w) || !in_list(w.w, w.n, copula_more))
			break;
		/* "to" and "a"/"in" only after a verb of change ("set to", "cambiata in") */
		p = w.e;
	}
	while (p < len && (t[p] == ' ' || t[p] == ':' || t[p] == '\t'))
		p++;
	return p;
}

/* The value at p for head h after sep (see value_at()), asking inner first. */
static size_t resolve(const char *t, size_t len, size_t p, const struct head *h, enum sep sep,
		      credential_inner_fn inner, enum detect_kind *kind, size_t *ret_start)
{
	size_t v = 0, vs = 0;

	if (p >= len)
		return 0;
	/* another detector may know the value better (sk-..., an e-mail, a JWT, a URL) */
	if (inner) {
		size_t q = p, qn, o;
		const char *close;
		if (is_quote(t, len, q, &qn, &close))
			q += qn;
		/* but digits after "PIN is" or "password is" are the credential, not a phone
		 * number, and after "code is" not a card either */
		if (q < len && (o = inner(t, len, q, kind, ret_start)) && *kind != DETECT_PHONE &&
		    !((h->flags & HF_CODE) && detect_kind_class(*kind) != POLICY_CLASS_SECRET))
			return o;
	}
	/* "Authorization: Bearer X", "Basic X", "token X" */
	if ((h->flags & HF_SCHEME) && sep != SEP_NONE) {
		static const char *const schemes[] = { "Bearer ", "bearer ", "Basic ",  "basic ",
						       "Token ",  "token ",  "Digest ", NULL };
		for (size_t k = 0; schemes[k]; k++)
			if (prefix_at(t, len, p, schemes[k])) {
				size_t q = p + strlen(schemes[k]), o;
				if (inner && q < len && (o = inner(t, len, q, kind, ret_start)))
					return o;
				v = q;
				while (v < len && (b64(t[v]) || t[v] == '.' || t[v] == '~') &&
				       v - q < 2000)
					v++;
				while (v > q && t[v - 1] == '.')
					v--;
				if (v - q < 8 || placeholder(t + q, v - q))
					return 0;
				vs = q;
				goto found;
			}
	}
	/* a label's mark is followed by a space: not "mail:x:8:8", "DB:45:3D" */
	if ((h->flags & HF_LABEL) && (p == 0 || !is_space(t[p - 1])))
		return 0;
	if ((h->flags & HF_PAIR) && sep != SEP_NONE)
		v = pair_at(t, len, p, (h->flags & HF_LABEL) != 0, &vs);
	if (!v && (h->flags & ~(HF_PAIR | HF_SUFFIX | HF_SCHEME | HF_LABEL)))
		v = value_at(t, len, p, h, sep, &vs);
	if (!v)
		return 0;
found:
	*kind = (h->flags & HF_CODE) ? DETECT_ACCESS_CODE : DETECT_SECRET;
	*ret_start = vs;
	return v;
}

size_t credential_scan_phrase(const char *t, size_t len, size_t i, credential_inner_fn inner,
			      enum detect_kind *kind, size_t *ret_start)
{
	const struct head *h;
	bool whole = false, access = false, deny = false, chain = true;
	enum sep sep = SEP_NONE;
	size_t e, p, v;
	struct word w;

	e = identifier_end(t, len, i);
	if (!e)
		return 0;
	h = find_head(t, i, e, &whole);
	if (!h)
		return 0;
	if (h->flags & HF_ORDINE) {
		/* "parola d'ordine", "parola d’ordine", "parola d'accesso" */
		if (prefix_at(t, len, e, " d'ordine"))
			e += 9;
		else if (prefix_at(t, len, e, " d\xe2\x80\x99ordine"))
			e += 11;
		else if (prefix_at(t, len, e, " d'accesso"))
			e += 10;
		else
			return 0;
	}
	if (h->flags & HF_VERB) {
		/* "opens with 1962", "si apre con il codice 1958", "unlock it using 4471" */
		size_t q = e;
		bool with = false;
		if (!whole)
			return 0;
		for (int k = 0; k < 5; k++) {
			size_t ve;
			while (q < len && t[q] == ' ')
				q++;
			if (with && (ve = digit_code_end(t, len, q)) && !unit_follows(t, len, ve)) {
				*kind = DETECT_ACCESS_CODE;
				*ret_start = q;
				return ve;
			}
			if (!read_word(t, len, q, &w))
				return 0;
			if (in_list(w.w, w.n, with_words))
				with = true;
			else if (with && !in_list(w.w, w.n, with_fill))
				return 0;
			q = w.e;
		}
		return 0;
	}
	if (whole && i >= 7 && prefix_at(t, len, i - 6, "arola ") &&
	    (t[i - 7] == 'p' || t[i - 7] == 'P'))
		return 0; /* "parola chiave": a keyword */
	/* "!pw" in "S3cret!pw" is no key word; "gestore di password" is about the manager;
	 * "${POSTGRES_PASSWORD:?set it}" is a variable's reference */
	if (i > 0 && strchr("!#$%&+/=@^|~\\", t[i - 1]))
		return 0;
	if (i > 1 && t[i - 1] == '{' && t[i - 2] == '$')
		return 0;
	if (whole && word_before(t, i, compounds_before))
		return 0;
	if (h->flags & HF_QUAL) {
		access = word_before(t, whole ? i : e - strlen(h->w), NULL);
		deny = word_before(t, whole ? i : e - strlen(h->w), code_deny);
	}
	/* "wifi key", "WPA key": a password, not an API key */
	if ((h->flags & HF_LONG) && h->w[0] == 'k' &&
	    word_before(t, whole ? i : e - strlen(h->w), wifi_words))
		h = &wifi_key;
	/* a label: "router: ", "router admin: ", "wifi = " or nothing */
	if (h->flags & HF_LABEL) {
		size_t q = e;
		while (q < len && t[q] == ' ')
			q++;
		if (AT(q) != ':' && AT(q) != '=') {
			while (q < len && is_word((unsigned char) t[q]) && q - e < 24)
				q++;
			if (AT(q) != ':' && AT(q) != '=')
				return 0;
		}
	}
	/* a quoted key: "password": "x", 'pw' => 'x' */
	p = e;
	if (i > 0 && (t[i - 1] == '"' || t[i - 1] == '\'') && AT(p) == t[i - 1])
		p++;

	/* up to seven qualifier words, short ones free ("password [for the office wifi] is X");
	 * while each of them
	 * is an access word, a head or a verb of choosing, a strong value may follow without a
	 * copula ("PIN 4821", "codice OTP 771203", "come password ho messo X") */
	for (int words = 0, content = 0; words < 10 && content < 7; words++) {
		size_t q = p;
		while (q < len && (t[q] == ' ' || t[q] == '\t'))
			q++;
		/* an apposition: "the same password, Fluffy2010, ..." */
		if (words == 0 && whole && q == p && AT(q) == ',' && AT(q + 1) == ' ' &&
		    !(h->flags & (HF_PAIR | HF_QUAL | HF_MARKED)) &&
		    (v = resolve(t, len, q + 2, h, SEP_NONE, inner, kind, ret_start)) &&
		    (v >= len || t[v] == ',' || t[v] == '.'))
			return v;
		if (q >= len || q - p > 2 || q == p)
			break;
		if (t[q] == ':' || t[q] == '=' || (t[q] == '-' && AT(q + 1) == '>') ||
		    prefix_at(t, len, q, "\xe2\x86\x92"))
			break;
		/* (an identifier, "EC_KEY", "#define X_KEY \"...\"", takes a value after a mark
		 * only) */
		/* "creds svc_backup / Bkp!2024-Q3" */
		if (words == 0 && (h->flags & HF_PAIR) && !(h->flags & HF_LABEL) &&
		    (v = pair_at(t, len, q, (h->flags & HF_LABEL) != 0, ret_start))) {
			*kind = DETECT_SECRET;
			return v;
		}
		if (chain && whole && !(h->flags & HF_PAIR) && (!(h->flags & HF_QUAL) || access) &&
		    (v = resolve(t, len, q, h, SEP_NONE, inner, kind, ret_start)))
			return v; /* SEP_NONE: value_at() wants a strong value */
		/* a label takes one word at most before its mark ("router admin: admin / X") */
		if ((h->flags & HF_LABEL) && words > 0)
			return 0;
		if (!read_word(t, len, q, &w))
			break;
		content += w.n > 3; /* "to", "the", "of", "del" do not count */
		if (in_list(w.w, w.n, copulas)) {
			if (h->flags & HF_LABEL)
				return 0;
			sep = SEP_COPULA;
			p = after_copula(t, len, w.e);
			break;
		}
		if (w.w[w.n - 1] == ')' && !memchr(w.w, '(', w.n))
			break;
		if (words == 0 && whole && in_list(w.w, w.n, compounds))
			return 0; /* "the password manager is open": about another thing */
		if ((h->flags & HF_QUAL) && access_word(w.w, w.n))
			access = true;
		if ((h->flags & HF_QUAL) && in_list(w.w, w.n, code_deny))
			deny = true;
		if (!(h->flags & HF_PAIR))
			chain = in_list(w.w, w.n, setting_verbs) || credential_is_head(w.w, w.n) ||
				access_word(w.w, w.n);
		p = w.e;
	}
	if (sep == SEP_NONE && AT(p) == '?' && AT(p + 1) == ' ') {
		/* a question and its answer: "the wifi password? It's X", "la password? È X" */
		static const char *const answers[] = { "it's ",
						       "It's ",
						       "it\xe2\x80\x99s ",
						       "It\xe2\x80\x99s ",
						       "it is ",
						       "It is ",
						       "\xc3\xa8 ",
						       "\xc3\x88 ",
						       "es ",
						       "Es ",
						       "era ",
						       "Era ",
						       "was ",
						       NULL };
		for (size_t k = 0; answers[k]; k++)
			if (prefix_at(t, len, p + 2, answers[k])) {
				sep = SEP_COPULA;
				p = after_copula(t, len, p + 2 + strlen(answers[k]) - 1);
				break;
			}
	}
	if (sep == SEP_NONE) {
		/* separators: ':', '=', ':=', '=>', '->', '→' */
		size_t q = p;
		while (q < len && (t[q] == ' ' || t[q] == '\t'))
			q++;
		if (AT(q) == ':' && (AT(q + 1) == '/' || AT(q + 1) == ':'))
			return 0; /* "https:", "key::" */
		if (AT(q) == '=' && AT(q + 1) == '=')
			return 0; /* "key == x": a comparison */
		if (AT(q) == ':' || AT(q) == '=') {
			q++;
			if (AT(q) == '=' || AT(q) == '>')
				q++;
		} else if (AT(q) == '-' && AT(q + 1) == '>')
			q += 2;
		else if (prefix_at(t, len, q, "\xe2\x86\x92"))
			q += 3;
		else
			return 0;
		if (AT(q) == '=')
			return 0; /* "==": a comparison */
		sep = SEP_MARK;
		while (q < len && (t[q] == ' ' || t[q] == '\t'))
			q++;
		/* a label on its own line, the value on the next ("Recovery codes:\n4829 1736") */
		{
			size_t nl = q + (AT(q) == '\r'), b = q;
			while (b > 0 && (t[b - 1] == ' ' || t[b - 1] == '\t'))
				b--;
			if (AT(nl) == '\n' && !(h->flags & (HF_LABEL | HF_PAIR)) && b > 0 &&
			    t[b - 1] == ':') {
				nl++;
				while (nl < len && (t[nl] == ' ' || t[nl] == '\t'))
					nl++;
				if (nl < len && t[nl] != '\n' && t[nl] != '\r')
					q = nl;
			}
		}
		p = q;
	}
	/* "Vault returns: Code: 403": a word that makes it another code wins over an access
	 * word further back */
	if ((h->flags & HF_QUAL) && access && deny && sep != SEP_COPULA)
		return 0;
	if ((h->flags & HF_QUAL) && !access) {
		/* in prose only ("the code is 7261"), not in code ("code = 200") */
		if (deny || !whole || sep != SEP_COPULA)
			return 0;
		h = &weak_code;
		/* and the clause ends with the value: not "the code is 404 when ..." */
		{
			size_t ve = digit_code_end(t, len, p);
			if (!ve || !clause_end(t, len, ve) ||
			    (ve < len && t[ve] == '.' && ve + 1 < len && is_digit(t[ve + 1])))
				return 0;
		}
	}
	return resolve(t, len, p, h, sep, inner, kind, ret_start);
}

size_t credential_scan_aws_secret(const char *t, size_t len, size_t e, size_t *ret_start)
{
	size_t p = e, q;
	struct value_shape sh;

	while (p < len && p - e < 4 && strchr(" \t/:,|;", t[p]))
		p++;
	if (p == e)
		return 0;
	q = p;
	while (q < len && (is_alnum(t[q]) || t[q] == '/' || t[q] == '+') && q - p <= 40)
		q++;
	if (q - p != 40 || (q < len && is_word((unsigned char) t[q])))
		return 0;
	sh = credential_shape_of(t + p, 40);
	if (!sh.digit || !sh.upper || !sh.lower)
		return 0;
	*ret_start = p;
	return q;
}

/* Is one of cmds a word of the line before i ("sshpass", "/usr/bin/mysql", "sudo mysql")? */
static bool line_command(const char *t, size_t i, const char *const *cmds)
{
	size_t p = i, lim = i > 240 ? i - 240 : 0;

	while (p > lim && t[p - 1] != '\n')
		p--;
	while (p < i) {
		size_t e = p;
		char w[24];
		while (e < i && (is_word((unsigned char) t[e]) || t[e] == '-' || t[e] == '.'))
			e++;
		if (e > p && e - p < sizeof(w) && fold(t + p, e - p, w, sizeof(w)) &&
		    in_list(w, e - p, cmds))
			return true;
		p = e + (e == p);
	}
	return false;
}

/* The value of an option at p: a quoted string or a word; its start in *ret_start. */
static size_t option_value(const char *t, size_t len, size_t p, size_t *ret_start)
{
	size_t v;

	if (AT(p) == '\'' || AT(p) == '"') {
		char q = t[p];
		v = ++p;
		while (v < len && v - p < 200 && t[v] != q && t[v] != '\n')
			v++;
		if (AT(v) != q)
			return 0;
	} else {
		v = p;
		while (v < len && v - p < 200 && !is_space(t[v]) && t[v] != '\'' && t[v] != '"' &&
		       t[v] != ';' && t[v] != '|' && t[v] != '&')
			v++;
	}
	*ret_start = p;
	return v;
}

/* A password given as an option's value: long enough, not an option, a variable or a
 * placeholder, not "-" or "stdin". */
static bool option_password(const char *t, size_t s, size_t v)
{
	bool word = true;

	if (v - s < 3 || placeholder(t + s, v - s) || (v - s == 5 && !memcmp(t + s, "stdin", 5)))
		return false;
	/* "the --password flag": prose about an option, not a value (a quoted word is one) */
	for (size_t k = s; k < v; k++)
		word &= is_lower(t[k]);
	return !word || (s > 0 && (t[s - 1] == '\'' || t[s - 1] == '"'));
}

/* clang-format off */
static const char *const cmd_sshpass[] = { "sshpass", NULL };
static const char *const cmd_mysql[] = {
	"mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mariadb",
	"mariadb-dump", "mysqlpump", "7z", "7za", "7zr", "unrar", "rar", NULL,
};
static const char *const cmd_upper_p[] = {
	"sqlcmd", "bcp", "osql", "zip", "mosquitto_pub", "mosquitto_sub", "mosquitto_rr", NULL,
};
static const char *const cmd_redis[] = { "redis-cli", "keydb-cli", NULL };
static const char *const cmd_ldap[] = {
	"ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldapwhoami", "ldappasswd",
	"ldapcompare", "ldapmodrdn", NULL,
};
static const char *const cmd_smb[] = { "smbclient", "rpcclient", "smbmap", "wmic", "net", "smbcacls", NULL };
static const char *const cmd_keygen[] = { "ssh-keygen", NULL };
static const char *const cmd_htpasswd[] = { "htpasswd", NULL };
static const char *const cmd_read[] = { "read", NULL }; /* the shell's: -p is its prompt */
/* long options whose value is a password, and those whose value is a token */
static const char *const long_pw[] = {
	"--password", "--passwd", "--pass", "--pw", "--pwd", "--db-password", "--admin-password",
	"--root-password", "--passphrase", "--http-password", "--ftp-password", "--proxy-password",
	"--contrasena", NULL,
};
static const char *const long_token[] = {
	"--token", "--api-key", "--apikey", "--access-token", "--auth-token", "--secret",
	"--client-secret", "--secret-key", "--access-key", NULL,
};
/* clang-format on */

/* The option at i ("--password") from list, its end in *ret_end. */
static bool long_option(const char *t, size_t len, size_t i, const char *const *list,
			size_t *ret_end)
{
	for (; *list; list++) {
		size_t n = strlen(*list);
		if (prefix_at(t, len, i, *list) && (AT(i + n) == ' ' || AT(i + n) == '=')) {
			*ret_end = i + n + 1;
			return true;
		}
	}
	return false;
}

size_t credential_scan_cli(const char *t, size_t len, size_t i, size_t *ret_start)
{
	size_t p, v, s;

	if (i > 0 && !is_space(t[i - 1]))
		return 0;
	/* "--password X", "--password=X", "--token X" */
	if (long_option(t, len, i, long_pw, &p)) {
		v = option_value(t, len, p, &s);
		if (!v || !option_password(t, s, v))
			return 0;
		*ret_start = s;
		return v;
	}
	if (long_option(t, len, i, long_token, &p)) {
		v = option_value(t, len, p, &s);
		if (!v || v - s < 8 || placeholder(t + s, v - s))
			return 0;
		*ret_start = s;
		return v;
	}
	/* "sshpass -p X": any value; "mysql -pX", "7z x -pX": attached */
	if (prefix_at(t, len, i, "-p") && AT(i + 2) != ' ' && !is_space(AT(i + 2)) &&
	    line_command(t, i, cmd_mysql)) {
		v = option_value(t, len, i + 2, &s);
		if (!v || !option_password(t, s, v))
			return 0;
		*ret_start = s;
		return v;
	}
	if ((prefix_at(t, len, i, "-p ") && line_command(t, i, cmd_sshpass)) ||
	    (prefix_at(t, len, i, "-P ") && line_command(t, i, cmd_upper_p)) ||
	    (prefix_at(t, len, i, "-a ") && line_command(t, i, cmd_redis)) ||
	    (prefix_at(t, len, i, "-w ") && line_command(t, i, cmd_ldap)) ||
	    (prefix_at(t, len, i, "-N ") && line_command(t, i, cmd_keygen))) {
		v = option_value(t, len, i + 3, &s);
		if (!v || !option_password(t, s, v))
			return 0;
		*ret_start = s;
		return v;
	}
	/* "smbclient -U user%password" */
	if (prefix_at(t, len, i, "-U ") && line_command(t, i, cmd_smb)) {
		const char *pc;
		v = option_value(t, len, i + 3, &s);
		if (!v || !(pc = memchr(t + s, '%', v - s)))
			return 0;
		s = (size_t) (pc - t) + 1;
		if (!option_password(t, s, v))
			return 0;
		*ret_start = s;
		return v;
	}
	/* "htpasswd -b[c] FILE USER PASSWORD" */
	if (prefix_at(t, len, i, "-") && line_command(t, i, cmd_htpasswd)) {
		size_t q = i + 1;
		bool b = false;
		while (q < len && is_alpha(t[q]))
			b |= t[q++] == 'b';
		if (!b || AT(q) != ' ')
			return 0;
		for (int k = 0; k < 3; k++) {
			while (q < len && t[q] == ' ')
				q++;
			v = option_value(t, len, q, &s);
			if (!v || v == s)
				return 0;
			q = v + (AT(v) == '\'' || AT(v) == '"');
		}
		if (!option_password(t, s, v))
			return 0;
		*ret_start = s;
		return v;
	}
	/* openssl's "-pass pass:X", "-passin pass:X", "-passout pass:X" */
	if ((prefix_at(t, len, i, "-pass ") || prefix_at(t, len, i, "-passin ") ||
	     prefix_at(t, len, i, "-passout ")) ) {
		p = i + 1;
		while (p < len && t[p] != ' ')
			p++;
		p++;
		if (!prefix_at(t, len, p, "pass:"))
			return 0;
		v = option_value(t, len, p + 5, &s);
		if (!v || !option_password(t, s, v))
			return 0;
		*ret_start = s;
		return v;
	}
	if (prefix_at(t, len, i, "-p ")) {
		/* "docker login -u bot -p X", "mysql -p X": a password, not "-p 8080:80" or
		 * "mkdir -p a/b2" */
		struct value_shape sh;
		p = i + 3;
		if (AT(p) == '\'' || AT(p) == '"') {
			/* quoted: a password unless it is a port mapping or a path */
			v = option_value(t, len, p, &s);
			if (!v || v - s < 4 || memchr(t + s, '/', v - s) ||
			    count_in(t + s, v - s, "0123456789:.") == v - s ||
			    placeholder(t + s, v - s))
				return 0;
			/* a prompt ("read -p \"Password: \"", "-p 'Passphrase?'"), not a value */
			{
				size_t b = v;
				while (b > s && t[b - 1] == ' ')
					b--;
				if (t[b - 1] == ':' || t[b - 1] == '?' || line_command(t, i, cmd_read))
					return 0;
			}
			*ret_start = s;
			return v;
		}
		v = value_end(t, len, p);
		sh = credential_shape_of(t + p, v - p);
		if (v - p < 6 || memchr(t + p, '/', v - p) || !sh.digit ||
		    sh.lower + sh.upper < 2 ||
		    (sh.upper == 0 && sh.other == count_in(t + p, v - p, ".-_:")) ||
		    placeholder(t + p, v - p))
			return 0;
		*ret_start = p;
		return v;
	}
	if (prefix_at(t, len, i, "-u ") || prefix_at(t, len, i, "--user ") ||
	    prefix_at(t, len, i, "--user="))
		p = i + (t[i + 1] == 'u' ? 3 : 7);
	else
		return 0;
	if (AT(p) == '"' || AT(p) == '\'')
		p++;
	v = p;
	while (v < len && v - p < 64 && !is_space(t[v]) && t[v] != ':' && t[v] != '"' &&
	       t[v] != '\'')
		v++;
	if (v == p || AT(v) != ':')
		return 0;
	p = ++v;
	v = value_end(t, len, p);
	if (v - p < 4 || placeholder(t + p, v - p))
		return 0;
	*ret_start = p;
	return v;
}

/* ---- for the context pass (credential-private.h) ---- */

bool credential_fold(const char *s, size_t n, char *w, size_t size)
{
	return fold(s, n, w, size);
}
bool credential_is_copula(const char *w, size_t n)
{
	return in_list(w, n, copulas);
}
bool credential_is_compound(const char *w, size_t n)
{
	return in_list(w, n, compounds);
}
bool credential_is_compound_before(const char *w, size_t n)
{
	return in_list(w, n, compounds_before);
}
bool credential_is_not_value(const char *w, size_t n)
{
	return in_list(w, n, not_values) || in_list(w, n, placeholders);
}
bool credential_is_access_word(const char *w, size_t n)
{
	return access_word(w, n);
}
bool credential_is_placeholder(const char *s, size_t n)
{
	return placeholder(s, n);
}
bool credential_is_code_like(const char *s, size_t n)
{
	return code_like(s, n, 0, 0);
}
bool credential_is_snake_name(const char *s, size_t n)
{
	return snake_name(s, n);
}
size_t credential_digit_code_end(const char *t, size_t len, size_t p)
{
	return digit_code_end(t, len, p);
}
bool credential_unit_follows(const char *t, size_t len, size_t e)
{
	return unit_follows(t, len, e);
}
unsigned credential_seed_word(const char *t, size_t len, size_t p, size_t *ret_end)
{
	return seed_word_at(t, len, p, ret_end);
}
bool credential_key_name(const char *t, size_t i, size_t e)
{
	bool whole;
	const struct head *h = find_head(t, i, e, &whole);

	return h && (h->flags & (HF_ALPHA | HF_LONG | HF_MIXED)) && !(h->flags & HF_CODE);
}

/* ---- init ---- */

void credential_init(void)
{
	unsigned count[256] = { 0 }, at[256], sum = 0;

	for (size_t k = 0; k < ELEMENTSOF(heads); k++)
		count[(unsigned char) heads[k].w[strlen(heads[k].w) - 1]]++;
	for (int c = 0; c < 256; c++) {
		head_by_last[c] = (uint8_t) sum;
		at[c] = sum;
		sum += count[c];
	}
	head_by_last[256] = (uint8_t) sum;
	for (size_t k = 0; k < ELEMENTSOF(heads); k++) {
		size_t n = strlen(heads[k].w);
		head_len[k] = (uint8_t) n;
		unsigned pair =
		    (unsigned char) heads[k].w[n - 2] << 8 | (unsigned char) heads[k].w[n - 1];
		head_end2[pair >> 6] |= 1ull << (pair & 63);
	}
	for (size_t k = 0; k < ELEMENTSOF(heads); k++)
		head_order[at[(unsigned char) heads[k].w[strlen(heads[k].w) - 1]]++] = (uint8_t) k;
	memset(count, 0, sizeof(count));
	for (size_t k = 0; k < ELEMENTSOF(tokens); k++) {
		unsigned pair =
		    (unsigned char) tokens[k].prefix[0] << 8 | (unsigned char) tokens[k].prefix[1];
		count[(unsigned char) tokens[k].prefix[0]]++;
		token_pair[pair >> 6] |= 1ull << (pair & 63);
	}
	token_pair[('P' << 8 | 'u') >> 6] |= 1ull << (('P' << 8 | 'u') & 63); /* PuTTY */
	for (int c = 0, sum2 = 0; c < 256; c++) {
		token_start[c] = (uint8_t) sum2;
		at[c] = (unsigned) sum2;
		sum2 += (int) count[c];
		token_start[c + 1] = (uint8_t) sum2;
	}
	for (size_t k = 0; k < ELEMENTSOF(tokens); k++)
		token_order[at[(unsigned char) tokens[k].prefix[0]]++] = (uint8_t) k;
	seed_init();
}
