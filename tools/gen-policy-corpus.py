#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Generates tests/data/policy-corpus/generated.txt: the labelled evaluation corpus of the
policy detectors (English, Italian, Spanish), positives and hard negatives.

Format (shared with handwritten.txt): one sample per line; a labelled value is written
{{kind|value}}; everything else is plain text that must not produce a finding. Lines
starting with '#' are comments.

The templates and the seed here are separate from the examples in tests/test-detect.c that
were used while writing the detectors, so the corpus measures them rather than restating
them. Run: tools/gen-policy-corpus.py > tests/data/policy-corpus/generated.txt

With --requests N [SEED] it writes N generated requests (JSON lines) for the end-to-end test
of the policy through the daemon instead.
"""
import random
import string
import sys

SEED = 60613
N_PER_KIND = 120
N_NEGATIVE = 900

rnd = random.Random(SEED)

FIRST = ["anna", "marco", "lucia", "javier", "carmen", "john", "emily", "giulia", "pablo",
         "sofia", "liam", "olivia", "matteo", "elena", "diego", "chloe"]
LAST = ["rossi", "bianchi", "garcia", "martinez", "smith", "johnson", "ferrari", "lopez",
        "brown", "romano", "fernandez", "taylor", "esposito", "sanchez"]
DOMAINS = ["example.com", "mail.example.org", "correo.example.es", "posta.example.it",
           "corp.example.co.uk", "uni.example.edu"]


def luhn_digit(body):
    s = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        s += d
    return str((10 - s % 10) % 10)


def card(valid=True):
    kind = rnd.choice(["visa", "mc", "amex", "disc"])
    if kind == "visa":
        body = "4" + "".join(rnd.choice(string.digits) for _ in range(14))
    elif kind == "mc":
        body = str(rnd.randint(51, 55)) + "".join(rnd.choice(string.digits) for _ in range(13))
    elif kind == "amex":
        body = rnd.choice(["34", "37"]) + "".join(rnd.choice(string.digits) for _ in range(12))
    else:
        body = "6011" + "".join(rnd.choice(string.digits) for _ in range(11))
    check = luhn_digit(body)
    if not valid:
        check = str((int(check) + rnd.randint(1, 9)) % 10)
    num = body + check
    style = rnd.choice(["space", "dash", "plain"])
    if kind == "amex":
        groups = [num[:4], num[4:10], num[10:]]
    else:
        groups = [num[i:i + 4] for i in range(0, len(num), 4)]
    if style == "space":
        return " ".join(groups)
    if style == "dash":
        return "-".join(groups)
    return num


IBAN_FMT = {"IT": ("A", 5, 5, 12), "ES": (None, 4, 4, 12), "DE": (None, 8, 0, 10),
            "FR": (None, 5, 5, 13), "GB": ("AAAA", 6, 0, 8), "NL": ("AAAA", 0, 0, 10),
            "BE": (None, 12, 0, 0), "PT": (None, 21, 0, 0)}


def iban(valid=True):
    cc = rnd.choice(list(IBAN_FMT))
    letters, a, b, c = IBAN_FMT[cc]
    bban = ""
    if letters:
        bban += "".join(rnd.choice(string.ascii_uppercase) for _ in letters)
    bban += "".join(rnd.choice(string.digits) for _ in range(a + b + c))
    num = "".join(str(int(ch, 36)) for ch in bban + cc + "00")
    check = 98 - int(num) % 97
    if not valid:
        check = (check + rnd.randint(1, 50)) % 97 + 2
        if check > 98:
            check = 2
    s = "%s%02d%s" % (cc, check, bban)
    if rnd.random() < 0.5:
        s = " ".join(s[i:i + 4] for i in range(0, len(s), 4))
    return s


CF_ODD = [1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 2, 4, 18, 20, 11, 3, 6, 8, 12, 14, 16, 10, 22, 25,
          24, 23]


def cf_check(s15):
    total = 0
    for i, ch in enumerate(s15):
        v = int(ch) if ch.isdigit() else ord(ch) - 65
        total += CF_ODD[v] if i % 2 == 0 else v
    return chr(65 + total % 26)


def codice_fiscale(valid=True):
    L = string.ascii_uppercase
    s = "".join(rnd.choice(L) for _ in range(6))
    s += "%02d" % rnd.randint(0, 99)
    s += rnd.choice("ABCDEHLMPRST")
    day = rnd.randint(1, 28) + rnd.choice([0, 40])
    s += "%02d" % day
    s += rnd.choice(L) + "%03d" % rnd.randint(1, 999)
    if rnd.random() < 0.2:  # omocodia: replace digits from the right
        s = list(s)
        for pos in [14, 13, 12][:rnd.randint(1, 3)]:
            s[pos] = "LMNPQRSTUV"[int(s[pos])]
        s = "".join(s)
    ch = cf_check(s)
    if not valid:
        ch = chr(65 + (ord(ch) - 65 + rnd.randint(1, 25)) % 26)
    return s + ch


DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def dni():
    n = rnd.randint(10000000, 99999999)
    sep = rnd.choice(["", "", "-"])
    return "%d%s%s" % (n, sep, DNI_LETTERS[n % 23])


def nie():
    p = rnd.choice("XYZ")
    n = rnd.randint(0, 9999999)
    return "%s%07d%s" % (p, n, DNI_LETTERS[int(str("XYZ".index(p)) + "%07d" % n) % 23])


def ssn():
    while True:
        a = rnd.randint(1, 899)
        if a != 666:
            break
    return "%03d-%02d-%04d" % (a, rnd.randint(1, 99), rnd.randint(1, 9999))


def email():
    u = rnd.choice(FIRST) + rnd.choice([".", "_", ""]) + rnd.choice(LAST)
    if rnd.random() < 0.3:
        u += str(rnd.randint(1, 99))
    return u + "@" + rnd.choice(DOMAINS)


def d(n):
    return "".join(rnd.choice(string.digits) for _ in range(n))


def phone():
    f = rnd.randint(0, 9)
    if f == 0:
        return "+39 3%s %s %s" % (d(2), d(3), d(4))
    if f == 1:
        return "+34 6%s %s %s" % (d(2), d(3), d(3))
    if f == 2:
        return "+1 (%d%s) %d%s-%s" % (rnd.randint(2, 9), d(2), rnd.randint(2, 9), d(2), d(4))
    if f == 3:
        return "(%d%s) %d%s-%s" % (rnd.randint(2, 9), d(2), rnd.randint(2, 9), d(2), d(4))
    if f == 4:
        return "3%s %s %s" % (d(2), d(3), d(4))
    if f == 5:
        return "0%d %s %s" % (rnd.randint(2, 9), d(4), d(4))
    if f == 6:
        return "9%s %s %s" % (d(1), d(3), d(2) + " " + d(2))
    if f == 7:
        return "+44 20 %s %s" % (d(4), d(4))
    if f == 8:
        return "07%s %s" % (d(3), d(6))
    return "%d%s-%d%s-%s" % (rnd.randint(2, 9), d(2), rnd.randint(2, 9), d(2), d(4))


def ip():
    if rnd.random() < 0.7:
        return ".".join(str(rnd.randint(1, 254)) for _ in range(4))
    groups = ["%x" % rnd.randint(0, 0xffff) for _ in range(8)]
    if rnd.random() < 0.5:
        return "2001:db8::%x:%x" % (rnd.randint(1, 0xffff), rnd.randint(1, 0xffff))
    return ":".join(groups)


IT_STREETS = ["Via Roma", "Via Giuseppe Verdi", "Viale dei Mille", "Piazza Garibaldi",
              "Corso Vittorio Emanuele", "Via della Repubblica", "Largo Augusto"]
IT_CITIES = [("Milano", "20121", "MI"), ("Torino", "10121", "TO"), ("Napoli", "80133", "NA"),
             ("Bologna", "40121", "BO")]
ES_STREETS = ["Calle Mayor", "Avenida de la Paz", "Plaza de España", "Calle de Serrano",
              "Paseo de Gracia", "Calle Real"]
ES_CITIES = [("Madrid", "28013"), ("Barcelona", "08007"), ("Sevilla", "41004"),
             ("Valencia", "46002")]
EN_STREETS = ["Baker Street", "Oak Avenue", "Elm Road", "Maple Drive", "High Street",
              "Sunset Boulevard", "Park Lane"]


def address():
    f = rnd.randint(0, 2)
    if f == 0:
        city, cap, pr = rnd.choice(IT_CITIES)
        s = "%s %d" % (rnd.choice(IT_STREETS), rnd.randint(1, 200))
        if rnd.random() < 0.6:
            s += ", %s %s" % (cap, city)
            if rnd.random() < 0.5:
                s += " (%s)" % pr
        return s
    if f == 1:
        city, cp = rnd.choice(ES_CITIES)
        s = "%s%s %d" % (rnd.choice(ES_STREETS), rnd.choice([",", ""]), rnd.randint(1, 150))
        if rnd.random() < 0.6:
            s += ", %s %s" % (cp, city)
        return s
    s = "%d %s" % (rnd.randint(1, 9999), rnd.choice(EN_STREETS))
    if rnd.random() < 0.5:
        s += ", Springfield, IL %s" % d(5)
    return s


B62 = string.ascii_letters + string.digits


def rs(n, alphabet=B62):
    while True:
        s = "".join(rnd.choice(alphabet) for _ in range(n))
        if any(c.isdigit() for c in s) and any(c.isalpha() for c in s):
            return s


def api_key():
    f = rnd.randint(0, 6)
    if f == 0:
        return "sk-proj-" + rs(40, B62 + "_-")
    if f == 1:
        return "AKIA" + rs(16, string.ascii_uppercase + string.digits)
    if f == 2:
        return "ghp_" + rs(36)
    if f == 3:
        return "xoxb-%s-%s-%s" % (d(12), d(13), rs(24))
    if f == 4:
        return "glpat-" + rs(20, B62 + "_-")
    if f == 5:
        return "AIza" + rs(35, B62 + "_-")
    return "sk-" + rs(48)


def jwt():
    return "eyJ" + rs(30, B62 + "_-") + ".eyJ" + rs(60, B62 + "_-") + "." + rs(43, B62 + "_-")


def private_key():
    body = "\\n".join(rs(64, B62 + "+/") for _ in range(3))
    kind = rnd.choice(["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY"])
    return "-----BEGIN %s-----%s-----END %s-----" % (kind, body, kind)


def secret_value():
    return rs(rnd.randint(20, 40), B62 + "+/_")


def isbn13():
    body = rnd.choice(["978", "979"]) + d(9)
    s = sum((1 if i % 2 == 0 else 3) * int(c) for i, c in enumerate(body))
    full = body + str((10 - s % 10) % 10)
    return "%s-%s-%s-%s-%s" % (full[:3], full[3], full[4:8], full[8:12], full[12]) \
        if rnd.random() < 0.5 else full


def uuid():
    h = "0123456789abcdef"
    g = ["".join(rnd.choice(h) for _ in range(n)) for n in (8, 4, 4, 4, 12)]
    return "-".join(g)


def git_hash():
    return "".join(rnd.choice("0123456789abcdef") for _ in range(rnd.choice([7, 12, 40])))


def version():
    return rnd.choice(["v", "", "version "]) + ".".join(str(rnd.randint(0, 20))
                                                       for _ in range(rnd.randint(2, 3)))


def order_number():
    # Bare digit runs are only order numbers with a word that says so: "612345678" alone
    # is a Spanish mobile number.
    f = rnd.randint(0, 3)
    if f == 0:
        return "ORD-%d-%s" % (rnd.randint(2019, 2025), d(6))
    if f == 1:
        return "#" + d(rnd.randint(8, 11))
    word = rnd.choice(["order", "Order no.", "ordine n.", "pedido", "Invoice", "fattura",
                       "factura", "Ref.", "tracking", "n.", "Nr."])
    if f == 2:
        return "%s %s-%s-%s" % (word, d(3), d(7), d(7))
    return "%s %s" % (word, d(rnd.randint(9, 12)))


def date():
    y, m, dd = rnd.randint(1990, 2030), rnd.randint(1, 12), rnd.randint(1, 28)
    return rnd.choice(["%02d/%02d/%d" % (dd, m, y), "%d-%02d-%02d" % (y, m, dd),
                       "%02d.%02d.%d" % (dd, m, y)])


POS_TEMPLATES = {
    "en": ["Please update my record: {v}.", "For the claim, use {v} thanks",
           "The customer wrote '{v}' in the form", "Forwarding details -> {v} (urgent)",
           "Can you check whether {v} is correct?"],
    "it": ["Per favore aggiorna il dato: {v}.", "Il cliente ha scritto {v} nel modulo",
           "Dati del richiedente: {v}, grazie", "Puoi verificare se {v} è corretto?"],
    "es": ["Por favor actualiza el dato: {v}.", "El cliente escribió {v} en el formulario",
           "Datos del solicitante: {v}, gracias", "¿Puedes comprobar si {v} es correcto?"],
}
CTX = {
    "phone": {"en": "phone", "it": "telefono", "es": "teléfono"},
    "email": {"en": "email", "it": "e-mail", "es": "correo"},
    "iban": {"en": "IBAN", "it": "IBAN", "es": "IBAN"},
    "card": {"en": "card", "it": "carta", "es": "tarjeta"},
    "us_ssn": {"en": "SSN", "it": "SSN", "es": "SSN"},
    "it_codice_fiscale": {"en": "tax code", "it": "codice fiscale", "es": "código fiscal"},
    "es_dni": {"en": "DNI", "it": "DNI", "es": "DNI"},
    "es_nie": {"en": "NIE", "it": "NIE", "es": "NIE"},
    "ip": {"en": "server", "it": "server", "es": "servidor"},
    "address": {"en": "address", "it": "indirizzo", "es": "dirección"},
    "api_key": {"en": "the token", "it": "il token", "es": "el token"},
    "jwt": {"en": "header", "it": "header", "es": "cabecera"},
    "private_key": {"en": "key file", "it": "file chiave", "es": "fichero clave"},
}
GEN = {"email": email, "phone": phone, "iban": iban, "card": card, "us_ssn": ssn,
       "it_codice_fiscale": codice_fiscale, "es_dni": dni, "es_nie": nie, "ip": ip,
       "address": address, "api_key": api_key, "jwt": jwt, "private_key": private_key}
SECRET_CTX = ["password: {v}", "api_key={v}", "client_secret = \"{v}\"",
              "la contraseña es {v}", "la password è {v}", "AUTH_TOKEN={v}"]
NEG = [lambda: card(False), lambda: iban(False), lambda: codice_fiscale(False), isbn13, uuid,
       git_hash, version, order_number, date]
NEG_TEMPLATES = ["Reference {v} in the ledger.", "Rif. pratica {v} del fornitore",
                 "Ver {v} en el registro", "see {v}", "build {v} passed", "ordine {v} spedito",
                 "pedido {v} enviado", "commit {v} fixed it", "ISBN {v}", "id {v}",
                 "Il valore {v} non è valido", "El número {v} no vale"]


def main():
    out = sys.stdout
    out.write("# generated by tools/gen-policy-corpus.py (seed %d); do not edit\n" % SEED)
    for kind, gen in GEN.items():
        for i in range(N_PER_KIND):
            lang = rnd.choice(["en", "it", "es"])
            v = gen()
            t = rnd.choice(POS_TEMPLATES[lang])
            if rnd.random() < 0.5:
                v_l = "%s {{%s|%s}}" % (CTX[kind][lang], kind, v)
            else:
                v_l = "{{%s|%s}}" % (kind, v)
            out.write(t.replace("{v}", v_l) + "\n")
    for i in range(N_PER_KIND):
        v = secret_value()
        t = rnd.choice(SECRET_CTX)
        out.write(t.replace("{v}", "{{secret|%s}}" % v) + "\n")
    for i in range(N_NEGATIVE):
        v = rnd.choice(NEG)()
        out.write(rnd.choice(NEG_TEMPLATES).replace("{v}", v) + "\n")


def requests(n, seed):
    """--requests N: N JSON lines {"text", "values", "public"} for the end-to-end policy test
    (tests/integration/route-policy.sh): a third public (hard negatives, no finding), the rest
    with one or two planted values of every kind (the values listed), each with a unique
    marker (PUBnnnnn / PRIVnnnnn) so a log can be matched to its request. Texts stay under
    about 400 bytes."""
    import json
    global rnd
    rnd = random.Random(seed)
    kinds = list(GEN.keys())
    out = sys.stdout
    for i in range(n):
        if i % 3 == 0:
            v = rnd.choice(NEG)()
            text = rnd.choice(NEG_TEMPLATES).replace("{v}", v) + " PUB%05d" % i
            out.write(json.dumps({"text": text, "values": [], "public": True}) + "\n")
            continue
        values, parts = [], []
        # At most 2 values and 360 bytes: a small local model (512 tokens of context) must
        # take every request the policy keeps on this machine.
        for _ in range(rnd.choice([1, 1, 2])):
            if sum(len(p) for p in parts) > 120:
                break
            if rnd.random() < 0.1:
                v = secret_value()
                parts.append(rnd.choice(SECRET_CTX).replace("{v}", v))
            else:
                kind = kinds[rnd.randrange(len(kinds))]
                lang = rnd.choice(["en", "it", "es"])
                v = GEN[kind]()
                t = rnd.choice(POS_TEMPLATES[lang])
                parts.append(t.replace("{v}", "%s %s" % (CTX[kind][lang], v)))
            values.append(v)
        text = " ".join(parts) + " PRIV%05d" % i
        out.write(json.dumps({"text": text, "values": values, "public": False}) + "\n")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--requests":
        requests(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else SEED)
    else:
        main()
