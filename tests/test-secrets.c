/* SPDX-License-Identifier: MIT */
/*
 * test-secrets: the credential detectors (daemon/policy/credential.c) on the labelled corpus
 * tests/data/secrets-corpus/ and on examples.
 *
 * Corpus format: LANG<TAB>text, LANG one of en, it, es. {{kind|value}} marks a credential
 * that must be found: some finding of class secret must overlap it (the kind is what the
 * corpus writer expected, printed when it differs with MOLLY_TEST_VERBOSE=1). A line
 * without marks is a hard negative: it must give no finding of class secret. "\n" in a line
 * is a newline.
 *
 * Three files: train-handwritten.txt (by hand, seen while tuning), train-generated.txt
 * (tools/gen-secrets-corpus.py, seen while tuning) and heldout.txt (written before the
 * detectors were tuned, in another style, and not changed to make them pass). Per file and
 * language the test prints recall (marked values found), negatives kept public, and
 * precision (secret findings that overlap a mark). Thresholds: 0.95 on the training files;
 * the held-out numbers are the estimate of how it generalises, checked against a lower floor
 * (0.85) so that a regression shows, not tuned to pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/credential.h"
#include "policy/detect.h"
#include "policy/policy.h"
#include "policy/vault.h"
#include "test.h"

/* ---- examples ---- */

static const char *scan_str(const char *text)
{
	static char out[4096];
	struct detect_matches m = { 0 };
	size_t o = 0;

	out[0] = 0;
	if (detect_scan(text, strlen(text), &m) < 0)
		return "(error)";
	for (size_t i = 0; i < m.n && o < sizeof(out); i++)
		o += (size_t) snprintf(out + o, sizeof(out) - o, "%s%s=[%.*s]", i ? " " : "",
				       detect_kind_name(m.v[i].kind),
				       (int) (m.v[i].end - m.v[i].start), text + m.v[i].start);
	detect_matches_done(&m);
	return out;
}

#define EXPECT(text, want) ASSERT_STREQ(scan_str(text), want)

TEST(issue_14_examples)
{
	EXPECT("My database password is: Zq9!vL2#xPw7", "secret=[Zq9!vL2#xPw7]");
	EXPECT("The wifi password for the office is sunflower42", "secret=[sunflower42]");
	EXPECT("postgres://admin:S3cr3tPass@db.internal:5432/app", "url_credentials=[S3cr3tPass]");
	EXPECT("la mia password del wifi è Gatto!Nero42", "secret=[Gatto!Nero42]");
	EXPECT("il PIN del bancomat è 40291", "access_code=[40291]");
	EXPECT("el PIN de la tarjeta es 5092", "access_code=[5092]");
	EXPECT("El código de la puerta es 4321.", "access_code=[4321]");
	EXPECT("la parola d'ordine è girasole-blu-88", "secret=[girasole-blu-88]");
	EXPECT("the password is sunflower", "secret=[sunflower]");
	EXPECT("my passphrase is correct horse battery staple",
	       "secret=[correct horse battery staple]");
	return 0;
}

TEST(hard_negatives)
{
	static const char *const neg[] = {
		"How do I choose a strong password?",
		"Il PIN deve avere 5 cifre?",
		"\xc2\xbf"
		"C\xc3\xb3mo cambio mi contrase\xc3\xb1"
		"a?",
		"Password is required",
		"password = request.form['password']",
		"if (password.length < 8) return;",
		"const char *pw = getenv(\"DB_PASSWORD\");",
		"password: <your-password>",
		"password: ${DB_PASSWORD}",
		"PASSWORD=$DB_PASSWORD",
		"password = \"your_password_here\"",
		"password: ***",
		"password: changeme",
		"api_key: xxxxxxxxxxxxxxxx",
		"the password is wrong",
		"the password is expired",
		"the password is correct",
		"password is incorrect",
		"the PIN is 4 digits long",
		"La password \xc3\xa8 scaduta.",
		"La contrase\xc3\xb1\x61 es incorrecta.",
		"The error code is 404.",
		"Use promo code SUMMER20 at checkout.",
		"La parola chiave \xc3\xa8 sostenibilit\xc3\xa0.",
		"my password is the name of my dog followed by 1987",
		"password: string;",
		"$password = $_POST['password'];",
	};
	for (size_t k = 0; k < ELEMENTSOF(neg); k++)
		EXPECT(neg[k], "");
	return 0;
}

TEST(assignments_and_headers)
{
	EXPECT("DB_PASSWORD=hunter2_prod", "secret=[hunter2_prod]");
	EXPECT("{\"password\": \"s3cr3t-Sauce!\", \"user\": \"ops\"}", "secret=[s3cr3t-Sauce!]");
	EXPECT("  password: Tr0ub4dor&3\n", "secret=[Tr0ub4dor&3]");
	EXPECT("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	       "secret=[wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY]");
	EXPECT("Authorization: Basic dXNlcjpwYXNzd29yZA==", "secret=[dXNlcjpwYXNzd29yZA==]");
	EXPECT("Authorization: Bearer a8F3kL9qZ2xW7vB5nM1pR4tY6uI0oE3s",
	       "secret=[a8F3kL9qZ2xW7vB5nM1pR4tY6uI0oE3s]");
	EXPECT("DefaultEndpointsProtocol=https;AccountName=acme;AccountKey="
	       "Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4ZnJvYg==;"
	       "EndpointSuffix=core.windows.net",
	       "secret=[Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4ZnJvYg==]");
	return 0;
}

TEST(urls)
{
	EXPECT("mysql://root:toor1234@localhost/shop", "url_credentials=[toor1234]");
	EXPECT("redis://:Cach3Secreta@10.0.0.5:6379",
	       "url_credentials=[Cach3Secreta] ip=[10.0.0.5]");
	EXPECT("amqp://guest:Gu3st!Rabbit@mq:5672/", "url_credentials=[Gu3st!Rabbit]");
	EXPECT("smtp://mailer:M4il3r-pw@smtp.example.com:587", "url_credentials=[M4il3r-pw]");
	EXPECT("https://deploy:ghp_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa@github.com/acme/app",
	       "api_key=[ghp_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa]");
	/* no password, or a stand-in for one (what is left of "user:password@example.com" looks
	 * like an e-mail address to the e-mail detector: personal, not secret) */
	EXPECT("postgres://localhost:5432/mydb and https://user:password@example.com/ and "
	       "postgres://u:${PGPASSWORD}@db/x",
	       "email=[password@example.com]");
	return 0;
}

TEST(tokens_and_keys)
{
	EXPECT("glpat-Xy7Pq2Rs9Tu4Vw6Zb1Cd", "api_key=[glpat-Xy7Pq2Rs9Tu4Vw6Zb1Cd]");
	EXPECT("sk-ant-api03-Zq8Xw7Vu6Ts5Rq4Po3Nm2Lk1Ji0HgFeDcBa98765",
	       "api_key=[sk-ant-api03-Zq8Xw7Vu6Ts5Rq4Po3Nm2Lk1Ji0HgFeDcBa98765]");
	EXPECT("SG.aBcDeFgHiJkLmNoPqRsTuV.wXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZabc",
	       "api_key=[SG.aBcDeFgHiJkLmNoPqRsTuV.wXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZabc]");
	EXPECT("AGE-SECRET-KEY-1QYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQY",
	       "private_key=[AGE-SECRET-KEY-"
	       "1QYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQY]");
	EXPECT("PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nPrivate-Lines: 1\nAAAA\n"
	       "Private-MAC: 0123abcd\nthanks",
	       "private_key=[PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nPrivate-Lines: "
	       "1\nAAAA\nPrivate-MAC: 0123abcd]");
	EXPECT("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHzBJBgkq\n-----END ENCRYPTED PRIVATE "
	       "KEY-----",
	       "private_key=[-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHzBJBgkq\n-----END "
	       "ENCRYPTED PRIVATE KEY-----]");
	EXPECT("-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----",
	       "private_key=[-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n-----END PGP PRIVATE "
	       "KEY BLOCK-----]");
	EXPECT("https://hooks.slack.com/services/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",
	       "api_key=[T024BE7LD/B08AB1CD2EF/xYzAbC123dEf456GhI789jKl]");
	return 0;
}

TEST(seed_phrases)
{
	struct detect_matches m = { 0 };

	/* the word lists are hashed on the first scan */
	ASSERT_OK(detect_scan("x", 1, &m));
	detect_matches_done(&m);
	ASSERT_EQ(credential_bip39_langs("abandon", 7), 1u);
	ASSERT_EQ(credential_bip39_langs("abaco", 5), 2u);
	ASSERT_EQ(credential_bip39_langs("\xc3\xa1"
					 "baco",
					 6),
		  4u);
	ASSERT_EQ(credential_bip39_langs("the", 3), 0u);
	EXPECT("seed: abandon ability able about above absent absorb abstract absurd abuse access "
	       "accident, thanks",
	       "seed_phrase=[abandon ability able about above absent absorb abstract absurd abuse "
	       "access accident]");
	EXPECT(
	    "1. legal 2. winner 3. thank 4. year 5. wave 6. sausage 7. worth 8. useful 9. legal "
	    "10. winner 11. thank 12. yellow",
	    "seed_phrase=[legal 2. winner 3. thank 4. year 5. wave 6. sausage 7. worth 8. useful "
	    "9. legal 10. winner 11. thank 12. yellow]");
	/* wherever the run starts: the walk samples one word in four */
	for (int k = 0; k < 8; k++) {
		static const char *const pre[] = { "",
						   "So ",
						   "So the ",
						   "so the is ",
						   "ok, the is on ",
						   "x y z w ",
						   "x, y, z, w, v ",
						   "ok: " };
		char text[512], want[512];
		snprintf(text, sizeof(text),
			 "%sbamboo bean behave belt bench benefit best betray "
			 "better between beyond bicycle, thanks",
			 pre[k]);
		snprintf(want, sizeof(want),
			 "seed_phrase=[bamboo bean behave belt bench benefit best "
			 "betray better between beyond bicycle]");
		EXPECT(text, want);
	}
	/* eleven words, and English prose */
	EXPECT("abandon ability able about above absent absorb abstract absurd abuse access", "");
	EXPECT("we often forget that the quick brown fox jumps over the lazy dog every single "
	       "morning before breakfast and after lunch",
	       "");
	return 0;
}

/* The whole request is secret, the values (not the key phrases) are redacted for T3, and the
 * placeholders of the new kinds come back. */
TEST(redaction_keeps_the_sentence)
{
	static const char text[] =
	    "my password is Zq9!vL2#xPw7, the gate code is 4471 and the db is "
	    "postgres://admin:S3cr3tPass@db.internal:5432/app";
	static const char want[] =
	    "my password is \xe2\x9f\xa8SECRET_1\xe2\x9f\xa9, the gate code is "
	    "\xe2\x9f\xa8"
	    "CODE_1\xe2\x9f\xa9 and the db is postgres://admin:"
	    "\xe2\x9f\xa8URL_PASSWORD_1\xe2\x9f\xa9@db.internal:5432/app";
	_cleanup_(policy_freep) struct policy *p = NULL;
	_cleanup_(vault_freep) struct vault *v = NULL;
	struct policy_decision d;
	char *red = NULL, *back = NULL;
	size_t n_red = 0, n_back = 0;

	ASSERT_OK(policy_new_defaults(&p));
	ASSERT_OK(
	    policy_evaluate(p, &(struct policy_request){ .text = text, .len = strlen(text) }, &d));
	ASSERT_EQ(d.class, POLICY_CLASS_SECRET);
	ASSERT_EQ(d.n_findings, 3u);
	ASSERT_OK(vault_new(&v));
	ASSERT_OK(vault_redact(v, text, strlen(text), d.findings, d.n_findings,
			       POLICY_CLASS_PERSONAL, &red, &n_red));
	ASSERT_TRUE(n_red == strlen(want) && memcmp(red, want, n_red) == 0);
	ASSERT_OK(vault_restore(v, red, n_red, &back, &n_back));
	ASSERT_TRUE(n_back == strlen(text) && memcmp(back, text, n_back) == 0);
	free(red);
	free(back);
	policy_decision_done(&d);
	return 0;
}

/* Every prefix of a text full of credential candidates, in a buffer of exactly that size, and
 * with a NUL byte planted at each position: no read past the end (ASan), spans inside. Two
 * fuzzer finds (a value at the very end after "Bearer ", a NUL inside a value) are in it. */
TEST(context_pass)
{
	EXPECT("ho cambiato la password, adesso è Girasole_2024, segnatela",
	       "secret=[Girasole_2024]");
	EXPECT("hunter2025 — that's the new root password on the NAS", "secret=[hunter2025]");
	EXPECT("correct horse battery staple is literally my bank password",
	       "secret=[correct horse battery staple]");
	EXPECT("| device | user | password |\n| --- | --- | --- |\n| router | admin | Gr8Wall#77 |",
	       "secret=[Gr8Wall#77]");
	EXPECT("localhost:5432:contabilita:admin:C0nt@b1l3_24", "secret=[C0nt@b1l3_24]");
	EXPECT("define( 'DB_PASSWORD', 'Carbon4ra!88' );", "secret=[Carbon4ra!88]");
	EXPECT("jsmith:$apr1$Qw8zLk3R$yV7uNc2pHf0aTm9Xe1bKd/",
	       "secret=[$apr1$Qw8zLk3R$yV7uNc2pHf0aTm9Xe1bKd/]");
	EXPECT("the hotel room safe was set to 7391 and now", "access_code=[7391]");
	EXPECT("setup key: JBSW Y3DP EHPK 3PXP KQ4T 6MZR", "secret=[JBSW Y3DP EHPK 3PXP KQ4T 6MZR]");
	EXPECT("sshpass -p 'Winter2024!' ssh deploy", "secret=[Winter2024!]");
	EXPECT("mysql -u root -pS3cureRoot_77 -h db", "secret=[S3cureRoot_77]");
	EXPECT("ORBIT CANVAS TIMBER LOYAL FROST HABIT SPEAK MARBLE ELDER PUZZLE VACANT ROBUST",
	       "seed_phrase=[ORBIT CANVAS TIMBER LOYAL FROST HABIT SPEAK MARBLE ELDER PUZZLE VACANT "
	       "ROBUST]");
	/* spelled out, letter by letter */
	EXPECT("password spelled NATO: Kilo-Echo-Romeo-Nine-Four-Zulu-Lima. thanks",
	       "secret=[Kilo-Echo-Romeo-Nine-Four-Zulu-Lima]");
	EXPECT("La chiave: Ancona, Bologna, sette, Milano, due, punto esclamativo. Ricostruiscila",
	       "secret=[Ancona, Bologna, sette, Milano, due, punto esclamativo]");
	EXPECT("password: m a r g o t 1 9 7 7 ! (spaces for the filter)",
	       "secret=[m a r g o t 1 9 7 7 !]");
	EXPECT("<wsse:Password>Anpr!Sub2024x</wsse:Password>", "secret=[Anpr!Sub2024x]");
	EXPECT("la impresora tiene el panel con admin/Imprime2019.", "secret=[Imprime2019]");
	EXPECT("cifrada con la frase \"naranja-puente-lluvia-73-faro\". Pasos?",
	       "secret=[naranja-puente-lluvia-73-faro]");
	EXPECT("the garage door, it's 1 9 8 4 and everybody knows it", "access_code=[1 9 8 4]");
	EXPECT("client.run(\"MTE4NzQ1OTI4MzA1MjE3NzQwOA.GkR7aZ.vP3xQ9LmT2nW8yB5cF1hJ6dS0uE4rK7oA\")",
	       "api_key=[MTE4NzQ1OTI4MzA1MjE3NzQwOA.GkR7aZ.vP3xQ9LmT2nW8yB5cF1hJ6dS0uE4rK7oA]");
	EXPECT("name,username,temp_password\nPriya,priya.r,Welcome!2291", "secret=[Welcome!2291]");
	EXPECT("Tengo la clave API de Holded 5c9e2a7f1b4d8e3a6f0c2b9d7e1a4f8c, ¿cómo?",
	       "api_key=[5c9e2a7f1b4d8e3a6f0c2b9d7e1a4f8c]");
	EXPECT("closing: lights off, set alarm 6-0-3-3 then OFF", "access_code=[6-0-3-3]");
	EXPECT("school portal: ella.ward09 / Unicorn77. I can log in", "secret=[Unicorn77]");
	EXPECT("BitLocker 413622-078914-552301-667890-201134-998765-114422-350019 asks",
	       "secret=[413622-078914-552301-667890-201134-998765-114422-350019]");
	EXPECT("the activation code from the letter, 7KQ2-PM9X-44TB, is used",
	       "access_code=[7KQ2-PM9X-44TB]");
	EXPECT("login on the fridge (jake.m.2011 / Maple.Owl.47) and", "secret=[Maple.Owl.47]");
	EXPECT("passphrase della chiave gpg: tre camion rossi sotto la pioggia di agosto. ok?",
	       "secret=[tre camion rossi sotto la pioggia di agosto]");
	EXPECT("cancello del condominio 1478#, grazie", "access_code=[1478#]");
	EXPECT("The Xbox parental passkey is 8265 and", "access_code=[8265]");
	/* and what stays public */
	EXPECT("forwarded netflix.com to 1.1.1.1 and 8.8.8.8", "");
	EXPECT("the passphrase: what should it be? I need ideas", "");
	EXPECT("see python3.11 / Python3.12 notes; input / Output2", "");
	EXPECT("¿cómo genero una clave SSH ed25519? ¿y fail2ban?", "");
	EXPECT("passare la password con -p è insicuro", "");
	EXPECT("id,password_hash\n1,5f4dcc3b5aa765d61d8327deb882cf99", "");
	EXPECT("the alarm 2024-05-01 log; locker 214 is free", "");
	EXPECT("Milano, Torino, Roma, Napoli, Bologna e Firenze: la chiave del successo", "");
	EXPECT("Write a story with the phrase \"once upon a time\" in it", "");
	EXPECT("come si resetta la password di amministratore di un Fritz!Box?", "");
	EXPECT("$ read -s -p \"Password: \" PW", "");
	EXPECT("<input type=\"password\" autoComplete=\"new-password\" value={pw} />", "");
	EXPECT("password_verify($_POST['pw'], $riga['hash'])", "");
	EXPECT("user \"admin\": password mismatch, client: x, request: \"GET / HTTP/1.1\"", "");
	EXPECT("(pego la contraseña y Ctrl+D)", "");
	EXPECT("abbiamo oscurato le password così: P********1. Basta?", "");
	EXPECT("see debian/rules2024", "");
	EXPECT("passwords like \"password123\" and \"qwerty\" are the most common ones", "");
	EXPECT("Deprecated --password flag in favor of --password-stdin", "");
	EXPECT("see debian/libbz2-dev.install and lib32stdc++6", "");
	EXPECT("Host key fingerprint is SHA256:4Lq9vKx2Tz7Pn8Rw1Yc6Hd0Js5Fe3UaBgKmXv2Qw0E.", "");
	EXPECT("reset your password (ticket INC0012345, commit 3f9a1c7e)", "");
	EXPECT("Se vende caja fuerte pequeña con llave, 30€", "");
	return 0;
}

TEST(bounds)
{
	static const char t[] =
	    "password: Zq9!vL2# the PIN is 4821 door code 2580 codice del cancello "
	    "\xc3\xa8 1357 postgres://u:p4ss@h/x -u a:b12345 Authorization: Bearer "
	    "abandon ability able about above absent absorb abstract absurd abuse access "
	    "accident AKIAIOSFODNN7EXAMPL2 / aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5oQ7s "
	    "router: admin / Fritz!Box2024 opens with 1962 PuTTY-User-Key-File-2: x "
	    "the wifi password? It's Caramel-9 pass \"--x\" \"password\": \"x\" Bearer ";
	for (size_t n = 0; n <= sizeof(t) - 1; n++) {
		/* z: where the NUL goes, every 18th byte (enough to reach each scanner); n: none */
		for (size_t z = 0;; z = z + 18 < n ? z + 18 : n) {
			char *c = malloc(n ? n : 1);
			struct detect_matches m = { 0 };
			memcpy(c, t, n);
			if (z < n)
				c[z] = 0;
			ASSERT_OK(detect_scan(c, n, &m));
			for (size_t i = 0; i < m.n; i++)
				ASSERT_TRUE(m.v[i].start < m.v[i].end && m.v[i].end <= n);
			detect_matches_done(&m);
			free(c);
			if (z == n)
				break;
		}
	}
	return 0;
}

/* ---- the corpus ---- */

struct mark {
	size_t start, end;
	char kind[24];
	bool hit;
};

struct tally {
	unsigned marks, found, negatives, kept, findings, correct;
};

static const char *const langs[] = { "en", "it", "es" };

static int parse(const char *line, char *text, struct mark *marks, size_t *n_marks)
{
	size_t o = 0, n = 0;

	for (const char *p = line; *p;) {
		if (p[0] == '{' && p[1] == '{') {
			const char *bar = strchr(p, '|'), *end = bar ? strstr(bar, "}}") : NULL;
			if (!bar || !end || n >= 16 ||
			    (size_t) (bar - p - 2) >= sizeof(marks[n].kind))
				return -EINVAL;
			memcpy(marks[n].kind, p + 2, (size_t) (bar - p - 2));
			marks[n].kind[bar - p - 2] = 0;
			marks[n].start = o;
			for (const char *q = bar + 1; q < end; q++) {
				if (q[0] == '\\' && q[1] == 'n') {
					text[o++] = '\n';
					q++;
				} else
					text[o++] = *q;
			}
			marks[n].end = o;
			marks[n].hit = false;
			n++;
			p = end + 2;
		} else if (p[0] == '\\' && p[1] == 'n') {
			text[o++] = '\n';
			p += 2;
		} else
			text[o++] = *p++;
	}
	text[o] = 0;
	*n_marks = n;
	return 0;
}

static int eval_file(const char *name, struct tally t[3])
{
	char path[512], line[8192], text[8192];
	bool verbose = getenv("MOLLY_TEST_VERBOSE") != NULL;
	FILE *f;

	snprintf(path, sizeof(path), "%s/tests/data/secrets-corpus/%s", MOLLY_SOURCE_DIR, name);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		struct mark marks[16];
		struct detect_matches m = { 0 };
		size_t n = 0, l = strlen(line), lang;
		char *tab;
		bool secret = false;

		if (l && line[l - 1] == '\n')
			line[--l] = 0;
		if (!l || line[0] == '#')
			continue;
		tab = strchr(line, '\t');
		for (lang = 0; lang < 3; lang++)
			if (tab && (size_t) (tab - line) == 2 && memcmp(line, langs[lang], 2) == 0)
				break;
		if (lang == 3 || parse(tab + 1, text, marks, &n) < 0) {
			fprintf(stderr, "  %s: bad line: %s\n", name, line);
			fclose(f);
			return -EINVAL;
		}
		if (detect_scan(text, strlen(text), &m) < 0) {
			fclose(f);
			return -ENOMEM;
		}
		for (size_t i = 0; i < m.n; i++) {
			bool ok = false;
			if (detect_kind_class(m.v[i].kind) != POLICY_CLASS_SECRET)
				continue;
			secret = true;
			for (size_t j = 0; j < n; j++)
				if (m.v[i].start < marks[j].end && marks[j].start < m.v[i].end) {
					marks[j].hit = true;
					ok = true;
					if (verbose &&
					    strcmp(marks[j].kind, detect_kind_name(m.v[i].kind)))
						fprintf(stderr, "  %s: kind %s, marked %s: %s\n",
							name, detect_kind_name(m.v[i].kind),
							marks[j].kind, text);
				}
			t[lang].findings++;
			t[lang].correct += ok;
			if (!ok && verbose)
				fprintf(stderr, "  %s: false %s [%.*s] in: %s\n", name,
					detect_kind_name(m.v[i].kind),
					(int) (m.v[i].end - m.v[i].start), text + m.v[i].start,
					text);
		}
		if (n == 0) {
			t[lang].negatives++;
			t[lang].kept += !secret;
		}
		for (size_t j = 0; j < n; j++) {
			t[lang].marks++;
			t[lang].found += marks[j].hit;
			if (!marks[j].hit && verbose)
				fprintf(stderr, "  %s: missed %s [%.*s] in: %s\n", name,
					marks[j].kind, (int) (marks[j].end - marks[j].start),
					text + marks[j].start, text);
		}
		detect_matches_done(&m);
	}
	fclose(f);
	return 0;
}

static double ratio(unsigned a, unsigned b)
{
	return b ? (double) a / b : 1.0;
}

/* Prints the table for one file; returns how many numbers are below floor. */
static int report(const char *name, const struct tally t[3], double floor)
{
	struct tally all = { 0 };
	int bad = 0;

	printf("  %-22s %4s %6s %7s %6s %7s %9s\n", name, "lang", "marks", "recall", "negs",
	       "public", "precision");
	for (int l = 0; l <= 3; l++) {
		const struct tally *x = l < 3 ? &t[l] : &all;
		double r = ratio(x->found, x->marks), k = ratio(x->kept, x->negatives),
		       p = ratio(x->correct, x->findings);
		bool low = r < floor || k < floor || p < floor;
		if (l < 3) {
			all.marks += x->marks;
			all.found += x->found;
			all.negatives += x->negatives;
			all.kept += x->kept;
			all.findings += x->findings;
			all.correct += x->correct;
		}
		printf("  %-22s %4s %6u %7.3f %6u %7.3f %9.3f%s\n", "", l < 3 ? langs[l] : "all",
		       x->marks, r, x->negatives, k, p, low ? "  BELOW" : "");
		bad += low;
	}
	return bad;
}

TEST(corpus)
{
	static const struct {
		const char *file;
		double floor;
		unsigned min_marks; /* per language: the file is there and whole */
	} files[] = {
		{ "train-handwritten.txt", 0.95, 20 }, { "train-generated.txt", 0.95, 50 },
		{ "heldout.txt", 0.85, 20 },           { "heldout-2.txt", 0.85, 10 },
		{ "heldout-3.txt", 0.85, 7 },          { "heldout-4.txt", 0.85, 5 },
		{ "heldout-5.txt", 0.85, 5 },
	};
	int bad = 0;

	for (size_t k = 0; k < ELEMENTSOF(files); k++) {
		struct tally t[3] = { { 0 } };
		if (getenv("MOLLY_SECRETS_FILE") &&
		    strcmp(getenv("MOLLY_SECRETS_FILE"), files[k].file))
			continue;
		ASSERT_OK(eval_file(files[k].file, t));
		bad += report(files[k].file, t, files[k].floor);
		for (int l = 0; l < 3; l++)
			ASSERT_TRUE(t[l].marks >= files[k].min_marks && t[l].negatives >= 4);
	}
	ASSERT_EQ(bad, 0);
	return 0;
}
