#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""gen-secrets-corpus.py: writes tests/data/secrets-corpus/train-generated.txt, labelled
credential sentences (and hard negatives) in English, Italian and Spanish from templates and
random values, for tests/test-secrets.c.

    python3 tools/gen-secrets-corpus.py > tests/data/secrets-corpus/train-generated.txt

Deterministic (fixed seed). Format: LANG<TAB>text, {{kind|value}} marks a credential; a line
without marks is a hard negative. The held-out file (heldout.txt) is not made from these
templates.
"""
import random

R = random.Random(1414)

WORDS = ["sunflower", "tiger", "marmalade", "pizza", "rocket", "falcon", "maple", "gatto",
         "girasole", "luna", "tortilla", "paella", "sevilla", "roma", "dragon", "coffee",
         "fiore", "estrella", "mare", "sol", "blue", "nebula", "orso", "lobo"]
SYMS = "!#$%&*@?-_."


def password():
    k = R.randrange(6)
    w = R.choice(WORDS)
    if k == 0:
        return w.capitalize() + str(R.randrange(10, 9999))
    if k == 1:
        return w + R.choice(SYMS) + str(R.randrange(1, 99))
    if k == 2:
        return "".join(R.choice("abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789!#%&")
                       for _ in range(R.randrange(8, 16)))
    if k == 3:
        return w.capitalize() + R.choice(SYMS) + R.choice(WORDS).capitalize() + str(R.randrange(1, 99))
    if k == 4:
        return "".join(c.upper() if R.random() < .3 else c for c in w).replace("o", "0").replace("e", "3") + str(R.randrange(1, 9))
    return w + str(R.randrange(1, 99)) + R.choice(SYMS)


def pin(n=None):
    n = n or R.choice([4, 4, 5, 6])
    return "".join(R.choice("0123456789") for _ in range(n))


def token(n=32):
    return "".join(R.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
                   for _ in range(n))


def hexs(n):
    return "".join(R.choice("0123456789abcdef") for _ in range(n))


def vendor():
    k = R.randrange(10)
    if k == 0:
        return "ghp_" + token(36)
    if k == 1:
        return "glpat-" + token(20)
    if k == 2:
        return "sk-proj-" + token(40)
    if k == 3:
        return "sk_live_" + token(24)
    if k == 4:
        return "AKIA" + "".join(R.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16))
    if k == 5:
        return "xoxb-" + pin(11) + "-" + pin(12) + "-" + token(24)
    if k == 6:
        return "hf_" + token(34)
    if k == 7:
        return "AIza" + token(35)
    if k == 8:
        return "npm_" + token(36)
    return "sk-ant-api03-" + token(80)


EN_POS = [
    ("secret", "my {q}password is {v}", password),
    ("secret", "the {q}password is: {v}", password),
    ("secret", "{Q}password: {v}", password),
    ("secret", "The password for {place} is {v}", password),
    ("secret", "our {place} password is now {v}", password),
    ("secret", "login with password {v}", password),
    ("secret", "pwd {v}", password),
    ("secret", "use passphrase \"{v}\" to unlock it", lambda: " ".join(R.sample(WORDS, 4))),
    ("secret", "the wifi key is {v}", password),
    ("secret", "{Q}pass = {v}", password),
    ("secret", "my api key: {v}", lambda: token(32)),
    ("secret", "client secret is {v}", lambda: token(40)),
    ("secret", "export DB_PASSWORD={v}", password),
    ("secret", "\"password\": \"{v}\"", password),
    ("secret", "password was changed to {v}", password),
    ("access_code", "my {bank}PIN is {v}", pin),
    ("access_code", "PIN: {v}", pin),
    ("access_code", "the {door} code is {v}", pin),
    ("access_code", "{door} code {v}", pin),
    ("access_code", "the CVV is {v}", lambda: pin(3)),
    ("access_code", "your OTP is {v}, do not share it", lambda: pin(6)),
    ("access_code", "the 2FA backup codes are {v}", lambda: " ".join(hexs(5) + "-" + hexs(5) for _ in range(3))),
    ("access_code", "verification code: {v}", lambda: pin(6)),
    ("url_credentials", "{scheme}://{user}:{v}@{host}/app", password),
    ("api_key", "token {v}", vendor),
    ("api_key", "here is my key {v}", vendor),
    ("seed_phrase", "my recovery phrase: {v}", lambda: " ".join(R.sample(BIP_EN, 12))),
]
EN_NEG = [
    "How do I choose a strong {q}password?",
    "the {q}password is {adj}",
    "Password is required",
    "{Q}password must be at least {n} characters",
    "the PIN is {n} digits long",
    "password = request.form['password']",
    "if (password.length < {n}) return false;",
    "token = os.getenv(\"API_TOKEN\")",
    "password: ${{DB_PASSWORD}}",
    "PASSWORD=<your-password>",
    "api_key = \"your_api_key_here\"",
    "the error code is {n}0{n}",
    "use promo code SAVE{n}0 at checkout",
    "what's the zip code for {place}?",
    "reset your password from the settings page",
    "the key point is that {place} is far away",
    "I forgot my {bank}PIN, what should I do?",
    "the token expired after {n} hours",
    "the password manager is {adj}",
    "the secret ingredient is love",
]
IT_POS = [
    ("secret", "la mia password {iq}è {v}", password),
    ("secret", "la password {iq}è: {v}", password),
    ("secret", "password {iq}= {v}", password),
    ("secret", "la parola d'ordine è {v}", password),
    ("secret", "la chiave del wifi è {v}", password),
    ("secret", "accedi con la password {v}", password),
    ("secret", "il token di accesso è {v}", lambda: token(32)),
    ("access_code", "il PIN {ibank}è {v}", pin),
    ("access_code", "il codice {idoor} è {v}", pin),
    ("access_code", "codice {idoor}: {v}", pin),
    ("access_code", "il codice OTP è {v}", lambda: pin(6)),
    ("access_code", "il CVV della carta è {v}", lambda: pin(3)),
    ("url_credentials", "la stringa di connessione è {scheme}://{user}:{v}@{host}/db", password),
    ("api_key", "la mia chiave API è {v}", vendor),
    ("seed_phrase", "le parole di recupero: {v}", lambda: " ".join(R.sample(BIP_IT, 12))),
]
IT_NEG = [
    "Come si cambia la password {iq}?",
    "La password {iq}è {itadj}",
    "Il PIN deve avere {n} cifre",
    "La password deve contenere almeno {n} caratteri",
    "Ho dimenticato il PIN {ibank}",
    "Il codice fiscale è sul tesserino",
    "Il codice di errore è E0{n}",
    "Il codice sconto non funziona",
    "La chiave è nel cassetto",
    "password = input(\"Password: \")",
    "La parola chiave è innovazione",
    "Il token scade dopo {n} ore",
    "Non ricordo la password del wifi",
]
ES_POS = [
    ("secret", "mi contraseña {eq}es {v}", password),
    ("secret", "la contraseña {eq}es: {v}", password),
    ("secret", "contraseña {eq}= {v}", password),
    ("secret", "mi clave {eq}es {v}", password),
    ("secret", "entra con la contraseña {v}", password),
    ("secret", "el token de acceso es {v}", lambda: token(32)),
    ("access_code", "el PIN {ebank}es {v}", pin),
    ("access_code", "el código {edoor} es {v}", pin),
    ("access_code", "código {edoor}: {v}", pin),
    ("access_code", "el código de verificación es {v}", lambda: pin(6)),
    ("access_code", "el CVV de la tarjeta es {v}", lambda: pin(3)),
    ("url_credentials", "la cadena de conexión es {scheme}://{user}:{v}@{host}/db", password),
    ("api_key", "mi clave de API es {v}", vendor),
    ("seed_phrase", "mis palabras de recuperación: {v}", lambda: " ".join(R.sample(BIP_ES, 12))),
]
ES_NEG = [
    "¿Cómo cambio mi contraseña {eq}?",
    "La contraseña {eq}es {esadj}",
    "El PIN tiene {n} dígitos",
    "La contraseña debe tener al menos {n} caracteres",
    "Olvidé mi PIN {ebank}",
    "El código postal es 280{n}3",
    "El código de error es {n}0{n}",
    "Necesito un código de descuento",
    "La clave está en el cajón",
    "contraseña = request.form.get(\"contraseña\")",
    "La clave del éxito es la constancia",
    "El token caduca en {n} horas",
    "No recuerdo la contraseña del wifi",
]

Q = ["", "wifi ", "email ", "database ", "VPN ", "admin ", "root ", "router "]
PLACES = ["the office", "the guest network", "my laptop", "the NAS", "the server", "grandma's wifi"]
BANKS = ["", "bank ", "debit card ", "ATM ", "SIM "]
DOORS = ["door", "gate", "alarm", "safe", "garage door", "front door", "locker"]
ADJ = ["wrong", "expired", "incorrect", "too short", "required", "case sensitive", "weak",
       "not working", "the same as before", "stored in the vault"]
IQ = ["", "del wifi ", "della mail ", "del router ", "di amministratore ", "del server "]
IBANK = ["", "del bancomat ", "della carta ", "della SIM "]
IDOOR = ["del cancello", "della porta", "dell'allarme", "della cassaforte", "del portone",
         "di accesso", "di sicurezza"]
ITADJ = ["scaduta", "sbagliata", "errata", "obbligatoria", "troppo corta", "debole",
         "cambiata ieri", "la stessa di prima"]
EQ = ["", "del wifi ", "del correo ", "del router ", "de administrador ", "del servidor "]
EBANK = ["", "de la tarjeta ", "del cajero ", "de la SIM "]
EDOOR = ["de la puerta", "del portal", "de la alarma", "de la caja fuerte", "de acceso",
         "de seguridad", "del garaje"]
ESADJ = ["incorrecta", "caducada", "obligatoria", "demasiado corta", "débil",
         "la misma de antes", "nueva"]
SCHEMES = ["postgres", "postgresql", "mysql", "mongodb", "mongodb+srv", "redis", "amqp", "ftp",
           "smtp", "https"]
USERS = ["admin", "app", "root", "etl", "svc_web", "deploy"]
HOSTS = ["db.internal:5432", "10.0.0.12", "cluster0.example.net", "mq.local:5672",
         "files.example.org"]


def load_bip(lang):
    words = []
    try:
        import unicodedata
        with open("/usr/lib/python3/dist-packages/mnemonic/wordlist/%s.txt" % lang,
                  encoding="utf-8") as f:
            words = [unicodedata.normalize("NFC", w.strip()) for w in f if w.strip()]
    except OSError:
        pass
    return words or ["abandon", "ability", "able", "about", "above", "absent", "absorb",
                     "abstract", "absurd", "abuse", "access", "accident", "account"]


BIP_EN, BIP_IT, BIP_ES = load_bip("english"), load_bip("italian"), load_bip("spanish")


def fill(tmpl, v=None):
    return tmpl.format(
        q=R.choice(Q), Q=R.choice(Q).capitalize() or "", place=R.choice(PLACES),
        bank=R.choice(BANKS), door=R.choice(DOORS), adj=R.choice(ADJ), n=R.randrange(4, 9),
        iq=R.choice(IQ), ibank=R.choice(IBANK), idoor=R.choice(IDOOR), itadj=R.choice(ITADJ),
        eq=R.choice(EQ), ebank=R.choice(EBANK), edoor=R.choice(EDOOR), esadj=R.choice(ESADJ),
        scheme=R.choice(SCHEMES), user=R.choice(USERS), host=R.choice(HOSTS),
        v="{{%s|%s}}" % v if v else "")


def main():
    seen = set()
    print("# Generated by tools/gen-secrets-corpus.py (seed 1414); do not edit by hand.")
    for lang, pos, neg in (("en", EN_POS, EN_NEG), ("it", IT_POS, IT_NEG), ("es", ES_POS, ES_NEG)):
        lines = []
        for _ in range(4):
            for kind, tmpl, gen in pos:
                lines.append(fill(tmpl, (kind, gen())))
        for _ in range(5):
            for tmpl in neg:
                lines.append(fill(tmpl))
        for line in lines:
            if line not in seen:
                seen.add(line)
                print("%s\t%s" % (lang, line))


if __name__ == "__main__":
    main()
