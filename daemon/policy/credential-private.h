/* SPDX-License-Identifier: MIT */
/*
 * credential-private.h: the phrase grammar's word tests (credential.c), shared with the
 * context pass (credential-context.c) so that both read words the same way. Words are
 * folded with credential_fold() (ASCII and Latin-1 capitals to lower case) first.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* What a value is made of: byte counts by kind (UTF-8 bytes apart; sym counts the symbols
 * passwords use, "!#$%&*+=?@^~", among other) and the length. */
struct value_shape {
	unsigned lower, upper, digit, other, utf8, sym, n;
};
struct value_shape credential_shape_of(const char *s, size_t n);

bool credential_fold(const char *s, size_t n, char *w, size_t size);
/* "is", "è", "es", "was", ... */
bool credential_is_copula(const char *w, size_t n);
/* A noun that makes a compound with a head word before it ("password manager") or after
 * it ("gestore di password"). */
bool credential_is_compound(const char *w, size_t n);
bool credential_is_compound_before(const char *w, size_t n);
/* A word a value cannot be ("wrong", "the", "stessa") or a placeholder word ("changeme"). */
bool credential_is_not_value(const char *w, size_t n);
/* "door", "gate", "alarm", "cancello", "puerta", ... */
bool credential_is_access_word(const char *w, size_t n);
/* "<your-password>", "${PW}", "***", "changeme", "--quiet" (not folded). */
bool credential_is_placeholder(const char *s, size_t n);
/* "os.environ", "getpass()", "user_password": code or a name, not a value (not folded). */
bool credential_is_code_like(const char *s, size_t n);
/* "force_zip64", "db_password": lower-case parts joined by '_' (not folded). */
bool credential_is_snake_name(const char *s, size_t n);
/* Digits in groups at p ("4471", "1 9 7 3", "2580#"): the end, or 0. */
size_t credential_digit_code_end(const char *t, size_t len, size_t p);
/* A unit after a number that ends at e ("4 digits", "8 caratteri")? */
bool credential_unit_follows(const char *t, size_t len, size_t e);
/* The BIP-39 languages of the word at p (any case), its end in *ret_end; 0 if none. */
unsigned credential_seed_word(const char *t, size_t len, size_t p, size_t *ret_end);
/* "sha256", "ed25519", "fail2ban": a technology's name with digits, never a value. */
bool credential_is_tech_word(const char *s, size_t n);
/* Does the identifier [i, e) name a password, key or token ("DB_PASSWORD", "apiKey")? */
bool credential_key_name(const char *t, size_t i, size_t e);
