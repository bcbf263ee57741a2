#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Generates tests/data/sensitive-corpus/generated.tsv: the templated part of the training
corpus of the special-category layer (daemon/policy/sensitive.c), English, Italian, Spanish.

Format (shared with handwritten-train.tsv and heldout.tsv): LABEL<TAB>LANG<TAB>TEXT per line,
'#' comments. LABEL is a category ("health", "sex_life", ...) when the text reveals that
category about the user or an identifiable person, "public" otherwise (the same topics
discussed in general, news, encyclopedic text, code, ordinary requests).

Positives: a fact about the writer ("I", "io", "yo") or an identifiable person (a relative,
a colleague, a named person) in one of several phrasings, alone or wrapped in a request.
Hard negatives: the same fillers in general questions, explanations, news, essays the writer
is working on, and code. The held-out split (heldout.tsv) is hand-written in a different
style and never produced here.

Run: tools/gen-sensitive-corpus.py > tests/data/sensitive-corpus/generated.tsv
"""
import random
import re
import sys

SEED = 141414
rnd = random.Random(SEED)

# ---------------------------------------------------------------- subjects
# (text, gender) for third persons; gender picks IT/ES endings {o} and EN possessive {his}.
SUBJ = {
    "en": [("my wife", "f"), ("my husband", "m"), ("my son", "m"), ("my daughter", "f"),
           ("my mother", "f"), ("my father", "m"), ("my brother", "m"), ("my sister", "f"),
           ("my boss", "m"), ("my colleague Anna", "f"), ("my neighbour", "m"),
           ("my best friend", "f"), ("my partner", "m"), ("my girlfriend", "f"),
           ("my boyfriend", "m"), ("my grandmother", "f"), ("my uncle", "m"),
           ("Marco", "m"), ("Sarah", "f"), ("John Miller", "m"), ("Laura", "f"),
           ("Mr. Thompson", "m"), ("Mrs. Garcia", "f"), ("our employee Tom", "m"),
           ("my patient", "f"), ("my tenant", "m"), ("my 15-year-old son", "m"),
           ("my flatmate", "f"), ("Dave from accounting", "m"), ("my mother-in-law", "f"),
           ("Jake", "m"), ("Priya", "f"), ("Connor", "m"), ("Aisha", "f"), ("Tyler", "m")],
    "it": [("mia moglie", "f"), ("mio marito", "m"), ("mio figlio", "m"), ("mia figlia", "f"),
           ("mia madre", "f"), ("mio padre", "m"), ("mio fratello", "m"), ("mia sorella", "f"),
           ("il mio capo", "m"), ("la mia collega Giulia", "f"), ("il mio vicino", "m"),
           ("la mia migliore amica", "f"), ("il mio compagno", "m"), ("la mia fidanzata", "f"),
           ("il mio ragazzo", "m"), ("mia nonna", "f"), ("mio zio", "m"), ("Marco", "m"),
           ("Francesca", "f"), ("Luca Bianchi", "m"), ("la signora Rossi", "f"),
           ("il dottor Ferri", "m"), ("un mio dipendente", "m"), ("una mia paziente", "f"),
           ("il mio inquilino", "m"), ("mia suocera", "f"), ("Paolo", "m"), ("Chiara", "f"),
           ("Giacomo", "m"), ("Ilaria", "f"), ("Tommaso", "m"), ("Noemi", "f")],
    "es": [("mi mujer", "f"), ("mi marido", "m"), ("mi hijo", "m"), ("mi hija", "f"),
           ("mi madre", "f"), ("mi padre", "m"), ("mi hermano", "m"), ("mi hermana", "f"),
           ("mi jefe", "m"), ("mi compañera Lucía", "f"), ("mi vecino", "m"),
           ("mi mejor amiga", "f"), ("mi pareja", "f"), ("mi novia", "f"), ("mi novio", "m"),
           ("mi abuela", "f"), ("mi tío", "m"), ("Javier", "m"), ("Carmen", "f"),
           ("Pablo Martínez", "m"), ("la señora López", "f"), ("el señor Ruiz", "m"),
           ("un empleado mío", "m"), ("una paciente mía", "f"), ("mi inquilino", "m"),
           ("mi suegra", "f"), ("Diego", "m"), ("Lucía", "f"), ("Iker", "m"), ("Ainhoa", "f"),
           ("Gonzalo", "m"), ("Nerea", "f")],
}

# ---------------------------------------------------------------- fillers
F = {
    "cond": {
        "en": ["diabetes", "type 2 diabetes", "HIV", "depression", "bipolar disorder",
               "breast cancer", "leukemia", "epilepsy", "multiple sclerosis", "anorexia",
               "schizophrenia", "an anxiety disorder", "Crohn's disease", "hepatitis C",
               "chronic kidney disease", "ADHD", "Parkinson's", "asthma", "lupus",
               "early-onset Alzheimer's", "a brain tumour", "endometriosis", "PTSD", "OCD"],
        "it": ["il diabete", "il diabete di tipo 2", "l'HIV", "la depressione",
               "il disturbo bipolare", "un tumore al seno", "la leucemia", "l'epilessia",
               "la sclerosi multipla", "l'anoressia", "la schizofrenia",
               "un disturbo d'ansia", "il morbo di Crohn", "l'epatite C",
               "un'insufficienza renale", "l'ADHD", "il Parkinson", "l'asma", "il lupus",
               "l'Alzheimer", "un tumore al cervello", "l'endometriosi", "la celiachia"],
        "es": ["diabetes", "diabetes tipo 2", "VIH", "depresión", "trastorno bipolar",
               "cáncer de mama", "leucemia", "epilepsia", "esclerosis múltiple", "anorexia",
               "esquizofrenia", "un trastorno de ansiedad", "la enfermedad de Crohn",
               "hepatitis C", "insuficiencia renal", "TDAH", "párkinson", "asma", "lupus",
               "alzhéimer", "un tumor cerebral", "endometriosis", "fibromialgia"],
    },
    "drug": {
        "en": ["insulin", "metformin", "antiretrovirals", "sertraline", "lithium", "Prozac",
               "methadone", "chemotherapy", "antidepressants", "Xanax", "PrEP",
               "antipsychotics", "Ritalin", "morphine", "levothyroxine"],
        "it": ["l'insulina", "la metformina", "gli antiretrovirali", "la sertralina",
               "il litio", "il Prozac", "il metadone", "la chemioterapia",
               "gli antidepressivi", "lo Xanax", "la PrEP", "gli antipsicotici",
               "il Ritalin", "la morfina", "l'Eutirox"],
        "es": ["insulina", "metformina", "antirretrovirales", "sertralina", "litio", "Prozac",
               "metadona", "quimioterapia", "antidepresivos", "Xanax", "PrEP",
               "antipsicóticos", "Ritalin", "morfina", "Eutirox"],
    },
    "party": {
        "en": ["the Labour Party", "the Conservatives", "the Greens", "the Democrats",
               "the Republicans", "the Lib Dems", "Reform UK", "the SNP", "the far right"],
        "it": ["il PD", "Fratelli d'Italia", "la Lega", "il Movimento 5 Stelle",
               "Forza Italia", "Alleanza Verdi e Sinistra", "Azione", "i comunisti"],
        "es": ["el PSOE", "el PP", "Vox", "Sumar", "Podemos", "ERC", "Junts", "el PNV",
               "Bildu"],
    },
    "religion": {
        "en": ["Muslim", "Catholic", "Jewish", "a Jehovah's Witness", "Buddhist", "Hindu",
               "an atheist", "Mormon", "evangelical Christian", "Sikh", "Orthodox Christian"],
        "it": ["musulman{o}", "cattolic{o}", "ebre{o}", "testimone di Geova", "buddist{a}",
               "induist{a}", "ate{o}", "evangelic{o}", "ortodoss{o}", "protestante"],
        "es": ["musulm{an}", "católic{o}", "judí{o}", "testigo de Jehová", "budista",
               "hindú", "ate{o}", "mormón", "evangélic{o}", "ortodox{o}", "protestante"],
    },
    "union": {
        "en": ["Unite", "the GMB", "Unison", "the Teamsters", "the teachers' union",
               "the nurses' union", "the RMT", "the AFL-CIO"],
        "it": ["la CGIL", "la CISL", "la UIL", "la FIOM", "i COBAS", "l'USB"],
        "es": ["CCOO", "UGT", "la CGT", "la CNT", "USO", "CSIF"],
    },
    "crime": {
        "en": ["drunk driving", "shoplifting", "assault", "fraud", "drug possession",
               "burglary", "domestic violence", "tax evasion", "theft", "dealing drugs"],
        "it": ["guida in stato di ebbrezza", "furto", "aggressione", "truffa",
               "spaccio di droga", "rapina", "maltrattamenti in famiglia", "evasione fiscale",
               "lesioni", "ricettazione"],
        "es": ["conducir ebrio", "hurto", "agresión", "estafa", "tráfico de drogas",
               "robo con violencia", "violencia doméstica", "fraude fiscal", "lesiones",
               "apropiación indebida"],
    },
    "ethnic": {
        "en": ["Roma", "Black", "of Moroccan origin", "Kurdish", "Aboriginal", "half Nigerian",
               "of Pakistani descent", "Latino", "mixed-race"],
        "it": ["rom", "ner{o}", "di origine marocchina", "curd{o}", "sinti",
               "di origini nigeriane", "di origine pakistana", "meticci{o}"],
        "es": ["gitan{o}", "negr{o}", "de origen marroquí", "kurd{o}",
               "de origen nigeriano", "de ascendencia paquistaní", "mestiz{o}", "indígena"],
    },
}

TIME = {"en": ["last year", "in March", "two weeks ago", "recently", "at 19", "last month"],
        "it": ["l'anno scorso", "a marzo", "due settimane fa", "di recente", "a 19 anni",
               "il mese scorso"],
        "es": ["el año pasado", "en marzo", "hace dos semanas", "hace poco", "a los 19",
               "el mes pasado"]}

MONTHS = {"en": ["January", "March", "May", "July", "September", "November"],
          "it": ["gennaio", "marzo", "maggio", "luglio", "settembre", "novembre"],
          "es": ["enero", "marzo", "mayo", "julio", "septiembre", "noviembre"]}


def date(lang):
    d, y = rnd.randint(1, 28), rnd.randint(1940, 2015)
    m = rnd.randint(1, 12)
    form = rnd.randint(0, 2)
    if form == 0:
        return "%02d/%02d/%d" % (d, m, y) if lang != "en" or rnd.random() < .5 else "%d/%d/%d" % (m, d, y)
    if form == 1:
        return "%d-%02d-%02d" % (y, m, d)
    mo = rnd.choice(MONTHS[lang])
    if lang == "en":
        return rnd.choice(["%s %d, %d" % (mo, d, y), "%d %s %d" % (d, mo, y)])
    if lang == "it":
        return "%d %s %d" % (d, mo, y)
    return "%d de %s de %d" % (d, mo, y)


def passport():
    L = "ABCDEFGHJKLMNPRSTUVWXYZ"
    return rnd.choice(["%s%s%07d" % (rnd.choice(L), rnd.choice(L), rnd.randint(0, 9999999)),
                       "%09d" % rnd.randint(0, 999999999),
                       "%s%08d" % (rnd.choice(L), rnd.randint(0, 99999999))])


def money(lang):
    v = rnd.choice([1200, 1850, 2300, 3400, 45000, 52000, 78000, 15000, 230000, 9000])
    if lang == "en":
        return rnd.choice(["$%s" % format(v, ","), "£%s" % format(v, ","), "%d euros" % v])
    return rnd.choice(["%s euro" % format(v, ",").replace(",", "."), "%d €" % v]) if lang == "it" \
        else rnd.choice(["%s euros" % format(v, ",").replace(",", "."), "%d €" % v])


# ---------------------------------------------------------------- facts
# Per category and language: (first person, third person) pairs. {S} subject, {o} IT/ES
# gender ending (o/a), {an} ES -án/-ana, {a} IT -a/-a (invariant), {his} EN possessive,
# {is}/{has}/{was} EN verb forms pick up person automatically.
FACTS = {
    "health": {
        "en": [("I have {cond}", "{S} has {cond}"),
               ("I was diagnosed with {cond} {time}", "{S} was diagnosed with {cond} {time}"),
               ("I'm on {drug} for {cond}", "{S} is on {drug} for {cond}"),
               ("I've been taking {drug} since {time}", "{S} has been taking {drug} since {time}"),
               ("I found out I'm HIV positive", "{S} told me {he} is HIV positive"),
               ("I'm pregnant and haven't told anyone yet", "{S} is pregnant"),
               ("I'm 12 weeks pregnant", "{S} is expecting a baby in June"),
               ("I had a miscarriage {time}", "{S} had an abortion {time}"),
               ("my doctor says my {cond} is getting worse", "{S}'s {cond} is getting worse"),
               ("I've been in rehab for alcohol addiction", "{S} is in rehab for heroin addiction"),
               ("I tried to kill myself {time}", "{S} attempted suicide {time}"),
               ("my therapist thinks I have {cond}", "{S}'s psychiatrist diagnosed {cond}"),
               ("I'm having surgery for {cond} next week", "{S} is having chemo for {cond}"),
               ("my blood test showed {cond}", "{S}'s MRI showed {cond}"),
               ("I suffer from {cond}", "{S} suffers from {cond}"),
               ("I've been struggling with {cond} for years", "{S} has been struggling with {cond}"),
               ("I'm undergoing IVF", "{S} is going through IVF treatment")],
        "it": [("ho {cond}", "{S} ha {cond}"),
               ("mi hanno diagnosticato {cond} {time}", "a {S} hanno diagnosticato {cond} {time}"),
               ("prendo {drug} per {cond}", "{S} prende {drug} per {cond}"),
               ("sono sieropositiv{o}", "{S} è sieropositiv{o}"),
               ("sono incinta di tre mesi", "{S} è incinta"),
               ("ho avuto un aborto spontaneo {time}", "{S} ha abortito {time}"),
               ("soffro di {cond} da anni", "{S} soffre di {cond}"),
               ("il mio medico dice che {cond} sta peggiorando", "{S} è in cura per {cond}"),
               ("sono in terapia con {drug}", "{S} è in terapia con {drug}"),
               ("sono stat{o} ricoverat{o} in psichiatria {time}", "{S} è stat{o} ricoverat{o} per {cond}"),
               ("ho tentato il suicidio {time}", "{S} ha tentato il suicidio {time}"),
               ("sto facendo la chemio", "{S} sta facendo la chemioterapia"),
               ("le analisi hanno confermato che ho {cond}", "le analisi di {S} hanno confermato {cond}"),
               ("sono in cura da uno psichiatra", "{S} è seguit{o} da uno psichiatra"),
               ("sono dipendente dall'alcol", "{S} è in comunità per la droga")],
        "es": [("tengo {cond}", "{S} tiene {cond}"),
               ("me diagnosticaron {cond} {time}", "a {S} le diagnosticaron {cond} {time}"),
               ("tomo {drug} para {cond}", "{S} toma {drug} para {cond}"),
               ("soy seropositiv{o}", "{S} es seropositiv{o}"),
               ("estoy embarazada de tres meses", "{S} está embarazada"),
               ("tuve un aborto {time}", "{S} tuvo un aborto {time}"),
               ("padezco {cond} desde hace años", "{S} padece {cond}"),
               ("sufro de {cond}", "{S} sufre de {cond}"),
               ("estoy en tratamiento con {drug}", "{S} está en tratamiento con {drug}"),
               ("estuve ingresad{o} en psiquiatría {time}", "{S} estuvo ingresad{o} por {cond}"),
               ("intenté suicidarme {time}", "{S} intentó suicidarse {time}"),
               ("estoy recibiendo quimioterapia", "{S} está con quimioterapia"),
               ("los análisis confirmaron que tengo {cond}", "los análisis de {S} confirmaron {cond}"),
               ("voy al psiquiatra desde {time}", "{S} va al psiquiatra por {cond}"),
               ("soy adicto al alcohol", "{S} está en rehabilitación por drogas")],
    },
    "genetic": {
        "en": [("my DNA test showed I carry the BRCA1 mutation", "{S} tested positive for the BRCA2 gene"),
               ("I'm a carrier of cystic fibrosis", "{S} carries the Huntington's gene"),
               ("my 23andMe results say I have a high risk of Alzheimer's", "{S}'s genetic test found a mutation"),
               ("the genetic screening says I carry the sickle cell trait", "{S} has a genetic predisposition to colon cancer"),
               ("a paternity test proved I'm not the father", "the DNA test showed {S} is not the biological father")],
        "it": [("il test del DNA dice che sono portatrice della mutazione BRCA1", "{S} è risultat{o} positiv{o} al gene BRCA2"),
               ("sono portatore sano di fibrosi cistica", "{S} è portatore del gene della Corea di Huntington"),
               ("il mio test genetico mostra un rischio alto di Alzheimer", "il test genetico di {S} ha trovato una mutazione"),
               ("ho una predisposizione genetica al tumore al colon", "{S} ha una mutazione genetica rara"),
               ("il test di paternità ha detto che non sono il padre", "il test del DNA dice che {S} non è il padre biologico")],
        "es": [("mi prueba de ADN dice que soy portadora de la mutación BRCA1", "{S} dio positivo en el gen BRCA2"),
               ("soy portador de fibrosis quística", "{S} es portador del gen de Huntington"),
               ("mi test genético indica un riesgo alto de alzhéimer", "el test genético de {S} encontró una mutación"),
               ("tengo una predisposición genética al cáncer de colon", "{S} tiene una mutación genética rara"),
               ("la prueba de paternidad dice que no soy el padre", "el test de ADN dice que {S} no es el padre biológico")],
    },
    "biometric": {
        "en": [("here is a scan of my fingerprint for the login", "I'm attaching {S}'s fingerprint scan"),
               ("I uploaded my face scan to the HR portal", "this file has {S}'s facial recognition template"),
               ("my iris scan failed at the airport", "{S}'s retina scan is stored in our system"),
               ("this is the voiceprint from my banking app", "I have {S}'s palm vein scan here"),
               ("can you check my facial geometry data", "these are {S}'s biometric records")],
        "it": [("ti allego la scansione della mia impronta digitale", "ecco le impronte digitali di {S}"),
               ("ho caricato la scansione del mio volto sul portale", "questo file contiene il modello di riconoscimento facciale di {S}"),
               ("la scansione della mia iride non ha funzionato", "la scansione della retina di {S} è nel nostro sistema"),
               ("questa è la mia impronta vocale della banca", "ho qui i dati biometrici di {S}")],
        "es": [("te adjunto el escaneo de mi huella dactilar", "aquí están las huellas dactilares de {S}"),
               ("subí el escaneo de mi cara al portal", "este archivo tiene la plantilla de reconocimiento facial de {S}"),
               ("el escaneo de mi iris falló en el aeropuerto", "el escaneo de retina de {S} está en el sistema"),
               ("esta es mi huella de voz del banco", "tengo aquí los datos biométricos de {S}")],
    },
    "sex_life": {
        "en": [("I'm gay and my parents don't know", "{S} is gay"),
               ("I'm bisexual", "{S} came out as bisexual"),
               ("I'm a lesbian", "{S} is a lesbian"),
               ("I'm transgender and starting hormones", "{S} is trans"),
               ("I've been cheating on my wife", "{S} is having an affair with a coworker"),
               ("I'm still a virgin at 30", "{S} has a sexually transmitted infection"),
               ("I have a boyfriend but I'm a man and nobody knows", "{S} is dating another man"),
               ("my husband and I are in an open relationship", "{S} sleeps with several partners"),
               ("I think I'm asexual", "{S} is in a polyamorous relationship"),
               ("I struggle with erectile dysfunction", "{S} told me about {his} sex life")],
        "it": [("sono omosessuale e i miei genitori non lo sanno", "{S} è omosessuale"),
               ("sono gay", "{S} è gay"),
               ("sono bisessuale", "{S} ha fatto coming out come bisessuale"),
               ("sono lesbica", "{S} è lesbica"),
               ("sono transgender", "{S} è trans"),
               ("tradisco mia moglie da un anno", "{S} ha una relazione extraconiugale"),
               ("ho una malattia sessualmente trasmissibile", "{S} ha preso la clamidia"),
               ("sono ancora vergine", "{S} frequenta un altro uomo di nascosto"),
               ("io e mio marito abbiamo una relazione aperta", "{S} ha più partner sessuali")],
        "es": [("soy gay y mis padres no lo saben", "{S} es gay"),
               ("soy homosexual", "{S} es homosexual"),
               ("soy bisexual", "{S} salió del armario como bisexual"),
               ("soy lesbiana", "{S} es lesbiana"),
               ("soy una persona trans", "{S} es transexual"),
               ("le pongo los cuernos a mi mujer", "{S} tiene una aventura con un compañero"),
               ("tengo una enfermedad de transmisión sexual", "{S} tiene clamidia"),
               ("sigo siendo virgen", "{S} sale con otro hombre a escondidas"),
               ("mi marido y yo tenemos una relación abierta", "{S} tiene varias parejas sexuales")],
    },
    "ethnicity": {
        "en": [("I'm {eth}", "{S} is {eth}"),
               ("as a {eth} woman I get stopped by police a lot", "{S} is {eth} and faces discrimination at work"),
               ("my family is {eth}", "{S}'s family is {eth}")],
        "it": [("sono {eth}", "{S} è {eth}"),
               ("essendo {eth} vengo fermat{o} spesso dalla polizia", "{S} è {eth} e viene discriminat{o} al lavoro"),
               ("la mia famiglia è {eth}", "la famiglia di {S} è {eth}")],
        "es": [("soy {eth}", "{S} es {eth}"),
               ("como soy {eth} la policía me para mucho", "{S} es {eth} y sufre discriminación en el trabajo"),
               ("mi familia es {eth}", "la familia de {S} es {eth}")],
    },
    "politics": {
        "en": [("I voted for {party} in the last election", "{S} voted for {party}"),
               ("I'm a member of {party}", "{S} is a card-carrying member of {party}"),
               ("I'll vote for {party} next time", "{S} always votes for {party}"),
               ("I support {party} and donate every month", "{S} is an activist for {party}"),
               ("I'm a communist", "{S} is a fascist sympathiser"),
               ("I went to the anti-government protest {time}", "{S} campaigns for {party}")],
        "it": [("ho votato {party} alle ultime elezioni", "{S} ha votato {party}"),
               ("sono iscritt{o} al{party_al}", "{S} è iscritt{o} al{party_al}"),
               ("voterò {party} alle prossime elezioni", "{S} vota sempre {party}"),
               ("sono un{a} militante del{party_al}", "{S} fa politica con {party}"),
               ("sono comunista", "{S} è un{a} simpatizzante fascista"),
               ("ho partecipato alla manifestazione contro il governo {time}", "{S} fa campagna per {party}")],
        "es": [("voté al {party_bare} en las últimas elecciones", "{S} votó al {party_bare}"),
               ("estoy afiliad{o} al {party_bare}", "{S} está afiliad{o} al {party_bare}"),
               ("votaré a {party} en las próximas elecciones", "{S} siempre vota a {party}"),
               ("soy militante de {party}", "{S} hace campaña por {party}"),
               ("soy comunista", "{S} es simpatizante de la extrema derecha"),
               ("fui a la manifestación contra el gobierno {time}", "{S} es activista de {party}")],
    },
    "religion": {
        "en": [("I'm {rel}", "{S} is {rel}"),
               ("I converted to Islam {time}", "{S} converted to Judaism {time}"),
               ("I pray five times a day and fast during Ramadan", "{S} goes to mass every Sunday"),
               ("I lost my faith and left the church", "{S} left the Jehovah's Witnesses"),
               ("as {rel} I can't eat pork", "{S} wears a hijab for religious reasons")],
        "it": [("sono {rel}", "{S} è {rel}"),
               ("mi sono convertit{o} all'Islam {time}", "{S} si è convertit{o} all'ebraismo"),
               ("prego cinque volte al giorno e faccio il Ramadan", "{S} va a messa ogni domenica"),
               ("ho perso la fede e ho lasciato la Chiesa", "{S} ha lasciato i Testimoni di Geova"),
               ("essendo {rel} non mangio maiale", "{S} porta il velo per motivi religiosi")],
        "es": [("soy {rel}", "{S} es {rel}"),
               ("me convertí al islam {time}", "{S} se convirtió al judaísmo"),
               ("rezo cinco veces al día y hago el Ramadán", "{S} va a misa todos los domingos"),
               ("perdí la fe y dejé la Iglesia", "{S} dejó los Testigos de Jehová"),
               ("como soy {rel} no como cerdo", "{S} lleva el velo por motivos religiosos")],
    },
    "union": {
        "en": [("I'm a member of {union}", "{S} is a member of {union}"),
               ("I joined {union} {time}", "{S} is the shop steward for {union}"),
               ("I'm a union rep at my factory", "{S} signed up with {union}"),
               ("I took part in the union strike {time}", "{S} organised the union at the warehouse")],
        "it": [("sono iscritt{o} al{union_al}", "{S} è iscritt{o} al{union_al}"),
               ("mi sono iscritt{o} al sindacato {time}", "{S} è delegat{o} sindacale per {union}"),
               ("sono rappresentante sindacale in fabbrica", "{S} ha la tessera del sindacato"),
               ("ho aderito allo sciopero del sindacato {time}", "{S} fa attività sindacale in magazzino")],
        "es": [("estoy afiliad{o} a {union}", "{S} está afiliad{o} a {union}"),
               ("me afilié al sindicato {time}", "{S} es delegad{o} sindical de {union}"),
               ("soy delegad{o} sindical en la fábrica", "{S} tiene el carné del sindicato"),
               ("hice la huelga del sindicato {time}", "{S} organiza el sindicato en el almacén")],
    },
    "criminal": {
        "en": [("I was arrested for {crime} {time}", "{S} was arrested for {crime}"),
               ("I have a criminal record for {crime}", "{S} has a conviction for {crime}"),
               ("I was convicted of {crime} {time}", "{S} was convicted of {crime} {time}"),
               ("I spent two years in prison", "{S} just got out of jail"),
               ("I'm on probation", "{S} is on parole"),
               ("the police charged me with {crime}", "{S} was charged with {crime}")],
        "it": [("sono stat{o} arrestat{o} per {crime} {time}", "{S} è stat{o} arrestat{o} per {crime}"),
               ("ho la fedina penale sporca per {crime}", "{S} ha precedenti penali per {crime}"),
               ("sono stat{o} condannat{o} per {crime}", "{S} è stat{o} condannat{o} per {crime} {time}"),
               ("ho fatto due anni di carcere", "{S} è appena uscit{o} di prigione"),
               ("sono ai domiciliari", "{S} è in libertà vigilata"),
               ("mi hanno denunciat{o} per {crime}", "{S} è indagat{o} per {crime}")],
        "es": [("me detuvieron por {crime} {time}", "{S} fue detenid{o} por {crime}"),
               ("tengo antecedentes penales por {crime}", "{S} tiene antecedentes por {crime}"),
               ("me condenaron por {crime}", "{S} fue condenad{o} por {crime} {time}"),
               ("pasé dos años en la cárcel", "{S} acaba de salir de prisión"),
               ("estoy en libertad condicional", "{S} está en libertad condicional"),
               ("me denunciaron por {crime}", "{S} está imputad{o} por {crime}")],
    },
    "finance": {
        "en": [("I earn {money} a year", "{S} earns {money} a month"),
               ("my salary is {money}", "{S}'s salary is {money}"),
               ("I owe {money} on my credit cards", "{S} owes {money} to the bank"),
               ("I'm behind on my mortgage payments", "{S} is three months behind on rent"),
               ("I filed for bankruptcy {time}", "{S} declared bankruptcy {time}"),
               ("I have {money} in debt and can't pay", "{S} has {money} in savings"),
               ("my credit score is 540", "{S}'s loan application was rejected for bad credit")],
        "it": [("guadagno {money} al mese", "{S} guadagna {money} all'anno"),
               ("il mio stipendio è di {money}", "lo stipendio di {S} è di {money}"),
               ("ho {money} di debiti con la banca", "{S} ha {money} di debiti"),
               ("sono in ritardo con le rate del mutuo", "{S} non paga l'affitto da tre mesi"),
               ("sono fallit{o} {time}", "{S} è in fallimento"),
               ("sono segnalat{o} come cattivo pagatore in CRIF", "a {S} hanno rifiutato il prestito")],
        "es": [("gano {money} al mes", "{S} gana {money} al año"),
               ("mi sueldo es de {money}", "el sueldo de {S} es de {money}"),
               ("debo {money} al banco", "{S} debe {money} de la tarjeta"),
               ("voy atrasad{o} con la hipoteca", "{S} lleva tres meses sin pagar el alquiler"),
               ("me declaré en quiebra {time}", "{S} está en concurso de acreedores"),
               ("estoy en el registro de morosos", "a {S} le denegaron el préstamo")],
    },
    "birth_date": {
        "en": [("I was born on {date}", "{S} was born on {date}"),
               ("my date of birth is {date}", "{S}'s date of birth is {date}"),
               ("my DOB: {date}", "{S}'s birthday is {date}")],
        "it": [("sono nat{o} il {date}", "{S} è nat{o} il {date}"),
               ("la mia data di nascita è {date}", "la data di nascita di {S} è {date}"),
               ("data di nascita: {date}", "{S} compie gli anni il {date}")],
        "es": [("nací el {date}", "{S} nació el {date}"),
               ("mi fecha de nacimiento es {date}", "la fecha de nacimiento de {S} es {date}"),
               ("fecha de nacimiento: {date}", "{S} cumple años el {date}")],
    },
    "gov_id": {
        "en": [("my passport number is {pass}", "{S}'s passport number is {pass}"),
               ("my driving licence number is {pass}", "{S}'s national insurance number is QQ{nin}C"),
               ("my ID card number: {pass}", "{S}'s ID card number is {pass}")],
        "it": [("il mio numero di passaporto è {pass}", "il passaporto di {S} ha numero {pass}"),
               ("il numero della mia carta d'identità è {pass}", "la patente di {S} è {pass}"),
               ("numero passaporto: {pass}", "la carta d'identità di {S} è la {pass}")],
        "es": [("mi número de pasaporte es {pass}", "el pasaporte de {S} es el {pass}"),
               ("el número de mi carnet de conducir es {pass}", "el número de la seguridad social de {S} es 28{nin}"),
               ("número de pasaporte: {pass}", "el DNI de {S} es el {pass}")],
    },
    "immigration": {
        "en": [("I'm undocumented and scared to see a doctor", "{S} is in the country illegally"),
               ("my visa expired {time} and I'm still here", "{S} overstayed {his} visa"),
               ("I'm applying for asylum", "{S} is a refugee from Syria"),
               ("I don't have papers", "{S} is waiting for a deportation hearing"),
               ("my residence permit was rejected", "{S}'s green card application was denied")],
        "it": [("sono irregolare in Italia e ho paura", "{S} è clandestin{o}"),
               ("il mio permesso di soggiorno è scaduto {time}", "{S} non ha il permesso di soggiorno"),
               ("ho chiesto asilo politico", "{S} è un{a} rifugiat{o} siriano"),
               ("sono senza documenti", "{S} ha ricevuto un decreto di espulsione"),
               ("mi hanno negato il permesso di soggiorno", "la richiesta di asilo di {S} è stata respinta")],
        "es": [("soy un{a} inmigrante sin papeles", "{S} está en situación irregular"),
               ("mi permiso de residencia caducó {time}", "{S} no tiene permiso de residencia"),
               ("he pedido asilo", "{S} es refugiad{o} de Venezuela"),
               ("no tengo papeles", "{S} tiene una orden de expulsión"),
               ("me denegaron la residencia", "a {S} le denegaron el asilo")],
    },
    "employment": {
        "en": [("I got fired {time} for being late", "{S} was fired for misconduct"),
               ("I received a written warning at work", "{S} got a disciplinary warning"),
               ("HR opened a disciplinary procedure against me", "{S} is under internal investigation at work"),
               ("my performance review was terrible and I'm on a PIP", "{S} is on a performance improvement plan"),
               ("I was laid off {time}", "{S} was suspended without pay"),
               ("I'm being investigated at work for harassment", "{S} was dismissed for gross misconduct")],
        "it": [("mi hanno licenziat{o} {time}", "{S} è stat{o} licenziat{o} per giusta causa"),
               ("ho ricevuto una lettera di richiamo", "{S} ha ricevuto un provvedimento disciplinare"),
               ("l'azienda mi ha aperto un procedimento disciplinare", "{S} è sotto indagine interna"),
               ("la mia valutazione annuale è stata pessima", "{S} è stat{o} sospes{o} dal lavoro"),
               ("sono in cassa integrazione", "{S} ha ricevuto una contestazione disciplinare")],
        "es": [("me despidieron {time}", "{S} fue despedid{o} por bajo rendimiento"),
               ("recibí una amonestación por escrito", "{S} tiene un expediente disciplinario"),
               ("la empresa me abrió un expediente", "{S} está bajo investigación interna"),
               ("mi evaluación de desempeño fue pésima", "{S} fue suspendid{o} de empleo y sueldo"),
               ("estoy en un ERTE", "{S} recibió una carta de despido")],
    },
    "victim": {
        "en": [("my ex used to hit me", "{S} is being abused by {his} partner"),
               ("I was sexually assaulted {time}", "{S} was raped {time}"),
               ("I was abused as a child", "{S} was molested by a relative"),
               ("I'm a victim of domestic violence", "{S} is a victim of stalking"),
               ("my partner controls my money and threatens me", "{S} was trafficked")],
        "it": [("il mio ex mi picchiava", "{S} subisce violenza dal compagno"),
               ("sono stata violentata {time}", "{S} è stat{o} stuprat{o}"),
               ("ho subito abusi da bambin{o}", "{S} è stat{o} molestat{o} da un parente"),
               ("sono vittima di violenza domestica", "{S} è vittima di stalking"),
               ("mio marito mi minaccia e mi controlla", "{S} ha denunciato il compagno per maltrattamenti")],
        "es": [("mi ex me pegaba", "{S} sufre malos tratos de su pareja"),
               ("me violaron {time}", "{S} fue víctima de una agresión sexual"),
               ("sufrí abusos de niñ{o}", "{S} sufrió abusos de un familiar"),
               ("soy víctima de violencia de género", "{S} es víctima de acoso"),
               ("mi marido me amenaza y me controla", "{S} denunció a su pareja por malos tratos")],
    },
}

# child: always about a specific child
CHILD = {
    "en": ["my {age}-year-old {kid} goes to {school}", "my toddler bites other kids at nursery",
           "my {age}-year-old {kid} won't go to bed before midnight", "my {kid} is in year {grade} at {school}",
           "my {kid} {kname} is {age} and has trouble reading",
           "{kname}, my {age}-year-old, got bullied at {school} today",
           "our {kid} starts at {school} in September", "my {kid} has a speech delay and sees a therapist at {school}",
           "my neighbour's {kid} {kname} is {age} and walks home from {school} alone"],
    "it": ["mio figlio di {age} anni va alla {school}", "mia figlia di {age} anni non vuole andare all'asilo",
           "il mio bambino di {age} anni morde gli altri bambini all'asilo", "mia figlia fa la {grade}a alla {school}",
           "mio figlio {kname} ha {age} anni e fa fatica a leggere",
           "{kname}, mia figlia di {age} anni, è stata presa in giro alla {school}",
           "nostro figlio comincia alla {school} a settembre",
           "il figlio della mia vicina, {kname}, ha {age} anni e torna da solo dalla {school}"],
    "es": ["mi hijo de {age} años va al {school}", "mi hija de {age} años no quiere ir a la guardería",
           "mi niño de {age} años muerde a otros niños en la guardería", "mi hija está en {grade}º en el {school}",
           "mi hijo {kname} tiene {age} años y le cuesta leer",
           "{kname}, mi hija de {age} años, sufre acoso en el {school}",
           "nuestro hijo empieza en el {school} en septiembre",
           "el hijo de mi vecina, {kname}, tiene {age} años y vuelve solo del {school}"],
}
SCHOOL = {"en": ["Oakwood Primary", "St Mary's School", "Lincoln Elementary", "Hillside Academy"],
          "it": ["scuola elementare Manzoni", "scuola media Dante Alighieri", "primaria Rodari"],
          "es": ["colegio San José", "CEIP Cervantes", "instituto Ramiro de Maeztu"]}
KNAME = {"en": ["Lily", "Noah", "Ethan", "Mia"], "it": ["Matteo", "Sofia", "Leonardo", "Aurora"],
         "es": ["Hugo", "Martina", "Mateo", "Lucía"]}

# ---------------------------------------------------------------- hard negatives
NEG = {
    "en": ["What are the symptoms of {cond}?", "How is {cond} usually treated?",
           "Explain the difference between {cond} and other chronic conditions.",
           "{Cond} affects millions of people worldwide, according to the WHO.",
           "Write a short article about new research on {cond}.",
           "I'm writing an essay about {cond} for school; can you give me an outline?",
           "What are the side effects of {drug}?", "How does {drug} work in the body?",
           "Is {drug} safe during pregnancy in general?",
           "What are the early signs of pregnancy?", "How does IVF work?",
           "Explain the history of {party}.", "What does {party} stand for?",
           "Summarise the manifesto of {party} in five bullet points.",
           "Who founded {party} and when?", "Compare the economic policies of {party} and its rivals.",
           "Polls show {party} gaining ground ahead of the election.",
           "What do {rel_pl} believe about the afterlife?", "Explain the main holidays of {relig}.",
           "How many people practise {relig} in Europe?", "Write a neutral overview of {relig}.",
           "What is the role of {union} in collective bargaining?",
           "How do trade unions negotiate wages?", "{Union} called a national strike for Friday.",
           "What is the penalty for {crime} in the UK?", "How are {crime} cases prosecuted?",
           "Crime statistics show a drop in {crime} last year.",
           "Explain how a criminal record affects job applications in general.",
           "What is the average salary of a software engineer in London?",
           "How does a mortgage work?", "Explain compound interest with an example.",
           "What happens legally when a company declares bankruptcy?",
           "How do I format a date of birth field in an HTML form?",
           "What documents do you need to apply for a passport?",
           "How long does it take to renew a passport?",
           "What is the asylum process in the EU?", "Explain how work visas work in Canada.",
           "Migration to Europe rose sharply in 2015.",
           "What are employees' rights during a disciplinary hearing?",
           "How should managers handle a performance improvement plan?",
           "What are the warning signs of domestic abuse?",
           "How can schools help victims of bullying?",
           "At what age do children usually start reading?",
           "What is a good bedtime for a 7-year-old?",
           "How does fingerprint recognition work on smartphones?",
           "Explain facial recognition and its privacy risks.",
           "What is the BRCA1 gene?", "How accurate are home DNA tests?",
           "What does LGBTQ+ stand for?", "Explain the history of the gay rights movement.",
           "Write a paragraph on the history of the Roma people.",
           "What is systemic racism?", "Describe the causes of {cond}.",
           "Give me a diet plan for someone with {cond}.",
           "Translate into Italian: 'The patient should take the medicine twice a day.'",
           "My teacher asked us to compare {party} and its main rival; where do I start?",
           "I need a quiz for my students about world religions.",
           "Draft a company policy on parental leave.",
           "Write a press release about our new HR software.",
           "The film tells the story of a soldier with PTSD returning home.",
           "In the novel, the main character is diagnosed with {cond}.",
           "Our hospital app needs a database table for patient diagnoses.",
           "Summarise this article about the rise of {party} in the polls.",
           "List five famous people who were born in 1990.",
           "Explain what a credit score is and how it is calculated.",
           "Create a lesson plan on the Universal Declaration of Human Rights.",
           "What is the difference between a refugee and a migrant?",
           "How do I politely decline a meeting invitation?"],
    "it": ["Quali sono i sintomi de{cond_del}?", "Come si cura {cond}?",
           "Che cos'è {cond}?", "Spiegami la differenza tra {cond} e l'influenza.",
           "Secondo l'OMS, {cond} colpisce milioni di persone nel mondo.",
           "Scrivi un breve articolo sulla ricerca su {cond}.",
           "Devo fare una tesina su {cond}: mi dai una scaletta?",
           "Quali sono gli effetti collaterali de{drug_del}?", "Come agisce {drug} nell'organismo?",
           "Quali sono i primi sintomi della gravidanza?", "Come funziona la fecondazione assistita?",
           "Spiegami la storia de{party_del}.", "Cosa propone {party} sulle pensioni?",
           "Riassumi il programma de{party_del} in cinque punti.",
           "Chi ha fondato {party}?", "I sondaggi danno {party} in crescita.",
           "In cosa credono i buddisti?", "Quali sono le festività principali dell'ebraismo?",
           "Quanti musulmani vivono in Italia?", "Scrivi una panoramica neutrale sul cattolicesimo.",
           "Che ruolo ha {union} nella contrattazione collettiva?",
           "Come funziona uno sciopero in Italia?", "{Union} ha proclamato uno sciopero generale.",
           "Qual è la pena per {crime} in Italia?", "Come funziona il processo penale?",
           "Le statistiche mostrano un calo dei reati di {crime}.",
           "Qual è lo stipendio medio di un infermiere in Italia?", "Come funziona un mutuo a tasso fisso?",
           "Spiegami l'interesse composto con un esempio.",
           "Cosa succede quando un'azienda fallisce?",
           "Quali documenti servono per il passaporto?", "Come si rinnova la carta d'identità?",
           "Come funziona la richiesta di asilo in Europa?",
           "Quali diritti ha un lavoratore durante un procedimento disciplinare?",
           "Quali sono i segnali della violenza domestica?",
           "A che età i bambini iniziano a leggere?",
           "Come funziona il riconoscimento dell'impronta digitale sugli smartphone?",
           "Che cos'è il gene BRCA1?", "Quanto sono affidabili i test del DNA?",
           "Cosa significa LGBTQ+?", "Raccontami la storia del movimento per i diritti gay.",
           "Scrivi un paragrafo sulla storia del popolo rom.",
           "Che cos'è il razzismo sistemico?", "Dammi una dieta adatta a chi ha {cond}.",
           "Traduci in inglese: 'Il paziente deve prendere la medicina due volte al giorno.'",
           "Il professore ci ha chiesto di confrontare {party} e i suoi avversari: da dove comincio?",
           "Prepara un quiz sulle religioni del mondo per la mia classe.",
           "Nel romanzo il protagonista scopre di avere {cond}.",
           "Ci serve una tabella del database per le diagnosi dei pazienti.",
           "Qual è la differenza tra rifugiato e migrante?",
           "Come si rifiuta gentilmente un invito a una riunione?",
           "Scrivi un regolamento aziendale sui congedi parentali."],
    "es": ["¿Cuáles son los síntomas de{cond_del}?", "¿Cómo se trata {cond}?",
           "¿Qué es {cond}?", "Explícame la diferencia entre {cond} y la gripe.",
           "Según la OMS, {cond} afecta a millones de personas.",
           "Escribe un artículo breve sobre la investigación en {cond}.",
           "Tengo que hacer un trabajo sobre {cond}, ¿me das un esquema?",
           "¿Qué efectos secundarios tiene {drug}?", "¿Cómo actúa {drug} en el cuerpo?",
           "¿Cuáles son los primeros síntomas del embarazo?", "¿Cómo funciona la fecundación in vitro?",
           "Explica la historia de{party_del}.", "¿Qué propone {party} sobre la vivienda?",
           "Resume el programa de{party_del} en cinco puntos.",
           "¿Quién fundó {party}?", "Las encuestas dan a {party} una subida.",
           "¿En qué creen los budistas?", "¿Cuáles son las fiestas principales del judaísmo?",
           "¿Cuántos musulmanes viven en España?", "Escribe un resumen neutral sobre el catolicismo.",
           "¿Qué papel tiene {union} en la negociación colectiva?",
           "¿Cómo funciona una huelga en España?", "{Union} convoca una huelga general.",
           "¿Cuál es la pena por {crime} en España?", "¿Cómo funciona un juicio penal?",
           "Las estadísticas muestran un descenso de los delitos de {crime}.",
           "¿Cuál es el sueldo medio de un enfermero en España?", "¿Cómo funciona una hipoteca fija?",
           "Explícame el interés compuesto con un ejemplo.",
           "¿Qué pasa cuando una empresa entra en concurso de acreedores?",
           "¿Qué documentos necesito para sacar el pasaporte?", "¿Cómo se renueva el DNI?",
           "¿Cómo funciona la solicitud de asilo en la UE?",
           "¿Qué derechos tiene un trabajador en un expediente disciplinario?",
           "¿Cuáles son las señales de la violencia de género?",
           "¿A qué edad empiezan a leer los niños?",
           "¿Cómo funciona el reconocimiento de huella en los móviles?",
           "¿Qué es el gen BRCA1?", "¿Son fiables los test de ADN caseros?",
           "¿Qué significa LGTBI?", "Cuéntame la historia del movimiento por los derechos gais.",
           "Escribe un párrafo sobre la historia del pueblo gitano.",
           "¿Qué es el racismo sistémico?", "Dame una dieta para personas con {cond}.",
           "Traduce al inglés: 'El paciente debe tomar el medicamento dos veces al día.'",
           "El profesor nos pidió comparar {party} con sus rivales, ¿por dónde empiezo?",
           "Prepara un test sobre religiones del mundo para mis alumnos.",
           "En la novela, el protagonista descubre que tiene {cond}.",
           "Necesitamos una tabla en la base de datos para los diagnósticos de los pacientes.",
           "¿Qué diferencia hay entre refugiado y migrante?",
           "¿Cómo rechazo con educación una invitación a una reunión?",
           "Redacta una política de empresa sobre permisos de paternidad."],
}
PROF = {"en": ["I'm a nurse and I need to explain {t} to new colleagues.",
                "I'm a teacher preparing a lesson on {t}; suggest three activities.",
                "As a journalist I'm researching {t}, where do I find reliable data?",
                "I'm a medical student, summarise the guidelines on {t}.",
                "I work in HR and want a neutral FAQ about {t}.",
                "I'm giving a talk on {t} next week, help me with the slides.",
                "My students keep asking me about {t}; how should I answer?",
                "I'd like to learn more about {t}, recommend some books.",
                "I'm a social worker and want to understand {t} better."],
         "it": ["Sono un infermiere e devo spiegare {t} ai nuovi colleghi.",
                "Sono un'insegnante e preparo una lezione su {t}: mi dai tre attività?",
                "Sono un giornalista e sto facendo una ricerca su {t}, dove trovo dati affidabili?",
                "Sono uno studente di medicina, riassumimi le linee guida su {t}.",
                "Lavoro nelle risorse umane e vorrei una FAQ neutrale su {t}.",
                "Vorrei saperne di più su {t}, mi consigli qualche libro?"],
         "es": ["Soy enfermera y tengo que explicar {t} a los compañeros nuevos.",
                "Soy profesor y preparo una clase sobre {t}, ¿me das tres actividades?",
                "Soy periodista e investigo sobre {t}, ¿dónde encuentro datos fiables?",
                "Soy estudiante de medicina, resúmeme las guías sobre {t}.",
                "Trabajo en recursos humanos y quiero unas preguntas frecuentes neutrales sobre {t}.",
                "Me gustaría saber más sobre {t}, ¿me recomiendas libros?"]}
TOPIC = {"en": ["{cond}", "{drug}", "the history of {party}", "trade unions", "world religions",
                "the criminal justice system", "mortgages", "the asylum process", "domestic violence",
                "child development", "genetic testing", "biometric passports", "LGBT rights",
                "racism in sport", "dismissal procedures", "pregnancy nutrition"],
         "it": ["{cond}", "{drug}", "la storia de{party_del}", "i sindacati", "le religioni del mondo",
                "il processo penale", "i mutui", "la richiesta di asilo", "la violenza domestica",
                "lo sviluppo dei bambini", "i test genetici", "i passaporti biometrici", "i diritti LGBT",
                "il razzismo nello sport", "i licenziamenti", "l'alimentazione in gravidanza"],
         "es": ["{cond}", "{drug}", "la historia de{party_del}", "los sindicatos", "las religiones del mundo",
                "el proceso penal", "las hipotecas", "la solicitud de asilo", "la violencia de género",
                "el desarrollo infantil", "los test genéticos", "los pasaportes biométricos", "los derechos LGTBI",
                "el racismo en el deporte", "los despidos", "la alimentación en el embarazo"]}
# The writer's curiosity about a topic, not a fact about anyone: public.
CURIOUS = {"en": ["I'm curious: can {cond} ever be cured?", "I read that {cond} is now manageable, is that true?",
                  "My friend asked me what {cond} is, how do I explain it simply?",
                  "I've always wondered how {drug} works.", "I saw a documentary about {cond} yesterday, tell me more.",
                  "I'm trying to understand {topic}, can you help?", "I heard {party} wants to change the pension system, what's the plan?",
                  "We're organising a fundraiser for {cond} research, write an invitation.",
                  "Our company wants to support employees with {cond}, draft a policy.",
                  "I'd like to volunteer for a charity that helps people with {cond}.",
                  "I want to become a nurse, what degree do I need?", "Someone on the radio said {party} is polling well, is that right?",
                  "I need statistics on {topic} for my thesis.", "I'm a lawyer; what's the usual sentence for {crime}?"],
           "it": ["Sono curioso: {cond} si può curare?", "Ho letto che {cond} oggi si gestisce bene, è vero?",
                  "Un'amica mi ha chiesto cos'è {cond}, come glielo spiego?", "Mi sono sempre chiesto come funziona {drug}.",
                  "Ieri ho visto un documentario su {cond}, dimmi di più.", "Sto cercando di capire {topic}, mi aiuti?",
                  "Ho sentito che {party} vuole cambiare le pensioni, qual è il piano?",
                  "Organizziamo una raccolta fondi per la ricerca su {cond}, scrivi un invito.",
                  "La nostra azienda vuole aiutare i dipendenti con {cond}, scrivi una policy.",
                  "Vorrei fare volontariato per chi ha {cond}.", "Mi servono statistiche su {topic} per la tesi.",
                  "Sono avvocato: qual è la pena tipica per {crime}?"],
           "es": ["Tengo curiosidad: ¿{cond} se puede curar?", "He leído que {cond} ya se controla bien, ¿es verdad?",
                  "Una amiga me preguntó qué es {cond}, ¿cómo se lo explico?", "Siempre me he preguntado cómo funciona {drug}.",
                  "Ayer vi un documental sobre {cond}, cuéntame más.", "Intento entender {topic}, ¿me ayudas?",
                  "He oído que {party} quiere cambiar las pensiones, ¿cuál es el plan?",
                  "Organizamos una recogida de fondos para investigar {cond}, escribe una invitación.",
                  "Nuestra empresa quiere apoyar a empleados con {cond}, redacta una política.",
                  "Quiero hacer voluntariado con personas con {cond}.", "Necesito estadísticas sobre {topic} para mi tesis.",
                  "Soy abogado: ¿cuál es la pena habitual por {crime}?"]}
# How-to questions: "I" is the asker, not the subject of anything sensitive.
HOWTO = {"en": ["How do I work out the total interest on a {money} loan?", "How do I get a union recognised by a company?",
                "How can I support a colleague with {cond}?", "How do I write an essay about {topic}?",
                "How do I explain {topic} to my kids?", "How can I volunteer at a {cond} charity?",
                "How do I cite a study on {cond} in APA style?", "How do I register to vote?",
                "How do I become a foster parent?", "How can I find a good immigration lawyer for my clients?",
                "How do I set up a donation page for {cond} research?", "How should I answer a customer who asks about {topic}?"],
         "it": ["Come faccio a calcolare la rata di un mutuo da {money}?", "Come si fonda un sindacato in azienda?",
                "Come posso aiutare un collega con {cond}?", "Come faccio a scrivere un tema su {topic}?",
                "Come spiego {topic} ai bambini?", "Come posso fare volontariato per la ricerca su {cond}?",
                "Come faccio a iscrivermi alle liste elettorali?", "Come posso diventare genitore affidatario?"],
         "es": ["¿Cómo calculo la cuota de una hipoteca de {money}?", "¿Cómo se crea un sindicato en la empresa?",
                "¿Cómo puedo ayudar a un compañero con {cond}?", "¿Cómo hago una redacción sobre {topic}?",
                "¿Cómo explico {topic} a los niños?", "¿Cómo puedo hacer voluntariado en una asociación de {cond}?",
                "¿Cómo me inscribo en el censo electoral?", "¿Cómo puedo ser familia de acogida?"]}


# News about people nobody can identify, and templates for tasks on the topic: public.
NEWS = {"en": ["Police arrested three men after the robbery, the BBC reported.",
               "A 34-year-old man was convicted of {crime} on Tuesday, the court said.",
               "Two people were arrested for {crime} in Leeds last night.",
               "The hospital says the number of patients with {cond} rose by 12% this year.",
               "A survey found that one in five workers has been disciplined at least once.",
               "Officials detained 40 migrants at the border, the ministry said.",
               "The union announced that 3,000 members will strike on Monday.",
               "Write a template for a disciplinary letter that managers can reuse.",
               "Draft a generic warning letter template for late attendance.",
               "Create a form with fields for name, date of birth and passport number.",
               "Write a template consent form for a genetic study.",
               "Design an onboarding checklist for new employees."],
        "it": ["I carabinieri hanno arrestato tre uomini dopo la rapina, riporta l'ANSA.",
               "Un uomo di 34 anni è stato condannato per {crime}, ha detto il tribunale.",
               "Due persone sono state arrestate per {crime} a Milano ieri sera.",
               "L'ospedale dice che i pazienti con {cond} sono aumentati del 12%.",
               "Fermati 40 migranti al confine, fa sapere il ministero.",
               "Il sindacato annuncia che 3.000 iscritti sciopereranno lunedì.",
               "Scrivi un modello di lettera di contestazione disciplinare riutilizzabile.",
               "Crea un modulo con i campi nome, data di nascita e numero di passaporto.",
               "Scrivi un modello di consenso informato per uno studio genetico."],
        "es": ["La Guardia Civil detuvo a tres hombres tras el atraco, según El País.",
               "Un hombre de 34 años fue condenado por {crime}, informó el juzgado.",
               "Dos personas fueron detenidas por {crime} en Valencia anoche.",
               "El hospital dice que los pacientes con {cond} aumentaron un 12%.",
               "Detenidos 40 migrantes en la frontera, según el ministerio.",
               "El sindicato anuncia que 3.000 afiliados harán huelga el lunes.",
               "Escribe una plantilla de carta de sanción disciplinaria reutilizable.",
               "Crea un formulario con los campos nombre, fecha de nacimiento y número de pasaporte.",
               "Escribe una plantilla de consentimiento para un estudio genético."]}
FAMOUS = {"en": ["Albert Einstein was born on 14 March 1879 in Ulm.", "Queen Victoria was born on 24 May 1819.",
                 "Charles Darwin was born on 12 February 1809 in Shrewsbury.",
                 "The composer was born on 27 January 1756 in Salzburg.",
                 "Nelson Mandela spent 27 years in prison before becoming president.",
                 "The former minister was convicted of corruption in 2014, the court said.",
                 "According to the biography, the poet converted to Catholicism late in life.",
                 "The singer came out as gay in a 1998 interview.",
                 "Polls say most young voters support the Greens."],
          "it": ["Giuseppe Verdi nacque il 10 ottobre 1813 a Busseto.", "Galileo Galilei è nato a Pisa nel 1564.",
                 "Leonardo da Vinci nacque il 15 aprile 1452.",
                 "L'ex sindaco è stato condannato per corruzione nel 2015, riferisce il tribunale.",
                 "Secondo la biografia, lo scrittore si convertì al cattolicesimo da anziano.",
                 "Il cantante ha fatto coming out in un'intervista del 1998.",
                 "I sondaggi dicono che molti giovani votano a sinistra."],
          "es": ["Miguel de Cervantes nació el 29 de septiembre de 1547.", "Picasso nació en Málaga en 1881.",
                 "Federico García Lorca nació el 5 de junio de 1898.",
                 "El exministro fue condenado por corrupción en 2014, según la sentencia.",
                 "Según su biografía, el poeta se convirtió al catolicismo de mayor.",
                 "El cantante salió del armario en una entrevista de 1998.",
                 "Las encuestas dicen que muchos jóvenes votan a la izquierda."]}
# Ordinary sentences about the writer or someone identifiable: personal identifiers maybe
# (the detectors' business), but no special category: public for this layer.
NEUTRAL = {"en": ["{S} sent me the slides for tomorrow's meeting.", "{S} is coming to dinner on Saturday.",
                  "{S} loves hiking in the mountains.", "Can you email {S} the report?",
                  "{S} just moved to Berlin for a new job.", "{S} is learning to play the guitar.",
                  "{S} asked me to book a table for six.", "I'm meeting {S} at the station at 5.",
                  "Remind me to call {S} tomorrow morning.", "{S}'s flight lands at 10:40.",
                  "Write a birthday card for {S}.", "{S} wants a recipe for banana bread.",
                  "I need to reply to {S} about the invoice.", "I'm flying to Madrid next week.",
                  "I have a meeting at 3 with the design team.", "My laptop is really slow today.",
                  "I'm planning a trip to Japan with {S}.", "Mail {n}@example.com please.",
                  "You can reach {S} at +44 20 7946 0958.", "I think {S} would like this book.",
                  "{S} and I are renovating the kitchen.", "I bought a new bike yesterday.",
                  "Tell {S} the deploy is done.", "{S} is the new project lead from Monday.",
                  "My phone number changed, update the contact sheet.", "I'm vegetarian, suggest a recipe.",
                  "{S} won the chess tournament!", "I can't decide between two job offers.",
                  "{S} and I are getting married in June, help with the invitations."],
           "it": ["{S} mi ha mandato le slide per la riunione di domani.", "{S} viene a cena sabato.",
                  "A {S} piace fare trekking in montagna.", "Puoi mandare il report a {S}?",
                  "{S} si è trasferit{o} a Berlino per un nuovo lavoro.", "{S} sta imparando la chitarra.",
                  "{S} mi ha chiesto di prenotare un tavolo per sei.", "Vedo {S} alla stazione alle 5.",
                  "Ricordami di chiamare {S} domattina.", "Il volo di {S} atterra alle 10:40.",
                  "Scrivi un biglietto di auguri per {S}.", "Rispondo a {S} per la fattura.",
                  "Sto andando a Madrid la settimana prossima.", "Ho una riunione alle 3 con il team.",
                  "Il mio portatile è lentissimo oggi.", "Scrivi a {n}@example.it per favore.",
                  "Puoi contattare {S} al 347 123 4567.", "{S} e io stiamo rifacendo la cucina.",
                  "Ho comprato una bici nuova ieri.", "Di' a {S} che il rilascio è fatto.",
                  "Sono vegetariano, suggeriscimi una ricetta.", "Non so scegliere tra due offerte di lavoro.",
                  "{S} ha vinto il torneo di scacchi!"],
           "es": ["{S} me mandó las diapositivas para la reunión de mañana.", "{S} viene a cenar el sábado.",
                  "A {S} le encanta hacer senderismo.", "¿Puedes enviarle el informe a {S}?",
                  "{S} se mudó a Berlín por un trabajo nuevo.", "{S} está aprendiendo a tocar la guitarra.",
                  "{S} me pidió reservar una mesa para seis.", "Quedo con {S} en la estación a las 5.",
                  "Recuérdame llamar a {S} mañana.", "El vuelo de {S} aterriza a las 10:40.",
                  "Escribe una tarjeta de cumpleaños para {S}.", "Tengo que contestar a {S} por la factura.",
                  "Me voy a Madrid la semana que viene.", "Tengo una reunión a las 3 con el equipo.",
                  "Mi portátil va lentísimo hoy.", "Escribe a {n}@example.es por favor.",
                  "Puedes llamar a {S} al 612 345 678.", "{S} y yo estamos reformando la cocina.",
                  "Ayer me compré una bici nueva.", "Dile a {S} que el despliegue está hecho.",
                  "Soy vegetariano, sugiéreme una receta.", "No sé elegir entre dos ofertas de trabajo.",
                  "¡{S} ganó el torneo de ajedrez!"]}


def neutral(lang):
    s, g = subject(lang)
    t = rnd.choice(NEUTRAL[lang]).replace("{n}", rnd.choice(["anna", "marco.rossi", "j.garcia", "sarah"]))
    if t.startswith("{S}"):
        s = cap(s)
    t = t.replace("{S}", s).replace("{o}", "o" if g == "m" else "a")
    if lang == "it":
        t = t.replace("A il ", "Al ").replace("A la ", "Alla ").replace("a il ", "al ").replace("a la ", "alla ").replace("di il ", "del ").replace("di la ", "della ")
    if lang == "es":
        t = t.replace("a el ", "al ").replace("de el ", "del ").replace("A el ", "Al ")
    return t


CODE = [
    "def get_diagnosis(patient):\n    return patient.records[-1].diagnosis",
    "SELECT name, salary, birth_date FROM employees WHERE dept_id = 4;",
    "CREATE TABLE patients (id INT, hiv_status BOOLEAN, religion TEXT);",
    "if user.age < 18: raise ValueError('child accounts need consent')",
    "const passportRegex = /^[A-Z]{2}[0-9]{7}$/;",
    "class Employee { String name; double salary; LocalDate dateOfBirth; }",
    "fingerprint = hashlib.sha256(public_key).hexdigest()",
    "for (int i = 0; i < n; i++) total += debt[i] * rate;",
    "assert parse_date('1985-03-12') == date(1985, 3, 12)",
    "git commit -m 'fix union type in the parser'",
    "The function returns the criminal_records list sorted by date.",
    "Refactor this: if (isPregnant(p)) { schedule(p, ULTRASOUND); }",
    "SELECT COUNT(*) FROM votes WHERE party = 'green' GROUP BY region;",
    "type Union = A | B; // a TypeScript union type",
    "kubectl delete pod worker-7 --grace-period=0",
    "print(f'Born on {dob:%d/%m/%Y}')",
    "SELECT * FROM clienti WHERE stipendio > 3000;",
    "función calcular_hipoteca(capital, interes, años) { return capital * interes; }",
]
GENERIC = {
    "en": ["Please summarise the attached meeting notes and list the action items.",
           "Write a haiku about autumn leaves.", "Fix the grammar in this paragraph.",
           "Can you help me plan a trip to Lisbon?", "What's a good recipe for lasagne?",
           "I need a cover letter for a marketing job.", "My laptop won't connect to wifi, any ideas?",
           "I'm thinking of learning Spanish; where should I start?",
           "My sister is visiting next week; suggest things to do in Rome.",
           "My boss wants the report by Friday, can you help me structure it?",
           "I have a meeting with Marco tomorrow about the budget.",
           "My son loves dinosaurs; recommend a book.",
           "I'm feeling a bit tired today, give me a quick motivational quote.",
           "I was born in a small town and want to write a short story about it.",
           "Deploy the new version tonight and check the logs."],
    "it": ["Riassumi gli appunti della riunione e fai l'elenco delle azioni.",
           "Scrivi una poesia sull'autunno.", "Correggi la grammatica di questo testo.",
           "Mi aiuti a organizzare un viaggio a Lisbona?", "Qual è una buona ricetta per la lasagna?",
           "Mi serve una lettera di presentazione per un lavoro nel marketing.",
           "Mia sorella viene a trovarmi: cosa posso farle vedere a Roma?",
           "Il mio capo vuole il rapporto entro venerdì, mi aiuti?",
           "Domani ho una riunione con Marco sul budget.",
           "Mio figlio adora i dinosauri, consigliami un libro.",
           "Sono un po' stanco oggi, dammi una frase motivazionale.",
           "Il cliente chiede un preventivo per 120 unità entro marzo, grazie mille."],
    "es": ["Resume las notas de la reunión y enumera las tareas.",
           "Escribe un poema sobre el otoño.", "Corrige la gramática de este párrafo.",
           "¿Me ayudas a planear un viaje a Lisboa?", "¿Tienes una buena receta de paella?",
           "Necesito una carta de presentación para un puesto de marketing.",
           "Mi hermana viene la semana que viene, ¿qué podemos hacer en Madrid?",
           "Mi jefe quiere el informe el viernes, ¿me ayudas a estructurarlo?",
           "Mañana tengo una reunión con Javier sobre el presupuesto.",
           "A mi hijo le encantan los dinosaurios, recomiéndame un libro.",
           "Hoy estoy un poco cansado, dame una frase motivadora.",
           "Calle de Alcalá 45 es la nueva oficina, ¿cómo llego en metro?"],
}

WRAP_PRE = {"en": ["", "", "", "Hi. ", "Quick question: ", "For context, ", "Honestly, ", "So, "],
            "it": ["", "", "", "Ciao. ", "Domanda veloce: ", "Per contesto, ", "Sinceramente, ", "Allora, "],
            "es": ["", "", "", "Hola. ", "Una pregunta: ", "Para que tengas contexto, ", "La verdad, ", "Bueno, "]}
WRAP_POST = {"en": ["", "", ".", ". What should I do?", ". Can you help me write an email to my manager about it?",
                    ". How do I tell my family?", ". Any advice?", ". Please keep this in mind for the plan.",
                    ", so I need a weekly meal plan."],
             "it": ["", "", ".", ". Cosa devo fare?", ". Mi aiuti a scrivere una mail al mio capo?",
                    ". Come lo dico alla mia famiglia?", ". Qualche consiglio?", ", quindi mi serve un piano settimanale."],
             "es": ["", "", ".", ". ¿Qué hago?", ". ¿Me ayudas a escribir un correo a mi jefe?",
                    ". ¿Cómo se lo digo a mi familia?", ". ¿Algún consejo?", ", así que necesito un plan semanal."]}

IT_DEL = {"il ": "l ", "la ": "lla ", "l'": "ll'", "i ": "i ", "gli ": "gli ", "lo ": "llo ", "un": " un"}


def it_del(s):
    for art, rep in [("il ", "l "), ("la ", "lla "), ("l'", "ll'"), ("gli ", "gli "), ("lo ", "llo "),
                     ("i ", "i ")]:
        if s.startswith(art):
            return rep + s[len(art):] if art != "l'" else "ll'" + s[2:]
    return " " + s if not s.startswith("un") else "  " + s


def es_del(s):
    if s.startswith("el "):
        return "l " + s[3:]
    if s.startswith("la "):
        return " la " + s[3:]
    return " " + s


def fill(t, lang, gender="m", person=1):
    out = t
    g = gender
    if "{o}" in out:
        out = out.replace("{o}", "o" if g == "m" else "a")
    if "{a}" in out:
        out = out.replace("{a}", "" if g == "m" else "a")
    if "{an}" in out:
        out = out.replace("{an}", "án" if g == "m" else "ana")
    out = out.replace("{his}", "his" if g == "m" else "her").replace("{he}", "he" if g == "m" else "she")
    subst = {
        "cond": lambda: rnd.choice(F["cond"][lang]), "drug": lambda: rnd.choice(F["drug"][lang]),
        "party": lambda: rnd.choice(F["party"][lang]), "union": lambda: rnd.choice(F["union"][lang]),
        "crime": lambda: rnd.choice(F["crime"][lang]), "time": lambda: rnd.choice(TIME[lang]),
        "money": lambda: money(lang), "date": lambda: date(lang), "pass": passport,
        "nin": lambda: "%06d" % rnd.randint(0, 999999),
    }
    while True:
        i = out.find("{")
        if i < 0:
            break
        j = out.find("}", i)
        key = out[i + 1:j]
        if key in subst:
            v = subst[key]()
        elif key == "rel":
            v = rnd.choice(F["religion"][lang])
            v = v.replace("{o}", "o" if g == "m" else "a").replace("{a}", "a").replace(
                "{an}", "án" if g == "m" else "ana")
        elif key == "eth":
            v = rnd.choice(F["ethnic"][lang]).replace("{o}", "o" if g == "m" else "a")
        elif key == "party_al":  # IT: "al PD", "alla Lega"
            p = rnd.choice(F["party"][lang])
            v = ("la " + p[3:]) if p.startswith("la ") else (" " + p[3:] if p.startswith("il ") else " " + p)
            v = v if not v.startswith("la ") else "la " + v[3:]
        elif key == "union_al":
            u = rnd.choice(F["union"][lang])
            v = ("la " + u[3:]) if u.startswith("la ") else (" " + u)
        elif key == "party_bare":
            v = rnd.choice(["PSOE", "PP", "PNV"])
        elif key in ("cond_del", "drug_del", "party_del"):
            base = {"cond_del": "cond", "drug_del": "drug", "party_del": "party"}[key]
            s = rnd.choice(F[base][lang])
            v = it_del(s) if lang == "it" else es_del(s)
        elif key in ("Cond", "Union"):
            v = rnd.choice(F[key.lower()][lang])
            v = v[0].upper() + v[1:]
        elif key == "rel_pl":
            v = rnd.choice(["Muslims", "Catholics", "Buddhists", "Hindus", "Jehovah's Witnesses", "Sikhs"])
        elif key == "relig":
            v = rnd.choice(["Islam", "Judaism", "Catholicism", "Hinduism", "Buddhism", "Sikhism"])
        else:
            raise SystemExit("unknown slot " + key)
        out = out[:i] + v + out[j + 1:]
    return out


def cap(s):
    return s[0].upper() + s[1:] if s else s


SAME_Q = {"en": ["what should I do?", "is that normal?", "can you help me?", "how do I tell my boss?",
                  "what can I eat?", "does it matter for my insurance?", "how do I deal with it?",
                  "who can I talk to?", "should I tell anyone?", "what are my options?",
                  "can you help me plan the next weeks?", "so please keep the tone gentle."],
          "it": ["cosa devo fare?", "è normale?", "mi puoi aiutare?", "come lo dico al mio capo?",
                 "cosa posso mangiare?", "conta per l'assicurazione?", "come lo affronto?",
                 "a chi posso rivolgermi?", "devo dirlo a qualcuno?", "che opzioni ho?",
                 "quindi scrivi con tatto."],
          "es": ["¿qué hago?", "¿es normal?", "¿me ayudas?", "¿cómo se lo digo a mi jefe?",
                 "¿qué puedo comer?", "¿afecta al seguro?", "¿cómo lo llevo?",
                 "¿con quién puedo hablar?", "¿debería contárselo a alguien?", "¿qué opciones tengo?",
                 "así que escribe con tacto."]}
EMBED = {"en": ["Can I still travel if {f}?", "Am I allowed to work overtime if {f}?", "Is it normal that {f}?", "How do I tell my family that {f}?", "Should I mention at work that {f}?",
                "Can you write a message to my landlord saying that {f}?", "Given that {f}, what should I plan for?",
                "Help me explain to HR that {f}.", "Since {f}, can you adapt the schedule?"],
         "it": ["Posso ancora viaggiare se {f}?", "Posso fare gli straordinari se {f}?", "È normale che {f}?", "Come dico alla mia famiglia che {f}?", "Devo dire al lavoro che {f}?",
                "Scrivi un messaggio al padrone di casa per dire che {f}.", "Visto che {f}, cosa devo organizzare?",
                "Aiutami a spiegare all'ufficio del personale che {f}."],
         "es": ["¿Puedo viajar si {f}?", "¿Puedo hacer horas extra si {f}?", "¿Es normal que {f}?", "¿Cómo le digo a mi familia que {f}?", "¿Debería decir en el trabajo que {f}?",
                "Escribe un mensaje al casero diciendo que {f}.", "Como {f}, ¿qué debería organizar?",
                "Ayúdame a explicar a recursos humanos que {f}."]}


def wrap(fact, lang):
    r = rnd.random()
    if r < 0.2:
        return cap(fact) + ", " + rnd.choice(SAME_Q[lang])
    if r < 0.35:
        return rnd.choice(EMBED[lang]).replace("{f}", fact)
    pre = rnd.choice(WRAP_PRE[lang])
    post = rnd.choice(WRAP_POST[lang])
    s = fact if pre and not pre.endswith(". ") else cap(fact)
    s = pre + s + post
    return s


def subject(lang):
    s, g = rnd.choice(SUBJ[lang])
    return s, g


# English drops the "I" in casual writing: "Got fired today."
DROP = {"health": ["Diagnosed with {cond} {time}, need advice.", "Just found out I'm pregnant.",
                   "Been on {drug} for a year now.", "Got my {cond} diagnosis {time}."],
        "criminal": ["Got arrested for {crime} {time}.", "Just got out of prison after two years."],
        "employment": ["Got fired {time}.", "Got a written warning at work today.", "Just got laid off."],
        "finance": ["Been behind on rent for three months.", "Just got rejected for a loan because of my debts."],
        "victim": ["Got assaulted on the way home {time}.", "Been getting threats from my ex for weeks."],
        "politics": ["Voted for {party} {time}, no regrets."], "sex_life": ["Finally came out as gay to my parents."],
        "immigration": ["Been here without papers since 2019."], "religion": ["Converted to Islam {time}."]}


def positives(cat, lang, n):
    out = set()
    tries = 0
    while len(out) < n and tries < n * 20:
        tries += 1
        if cat == "child":
            t = rnd.choice(CHILD[lang])
            kid = rnd.choice(["son", "daughter"])
            t = t.replace("{kid}", kid).replace("{age}", str(rnd.randint(4, 16))).replace(
                "{grade}", str(rnd.randint(1, 5))).replace("{school}", rnd.choice(SCHOOL[lang])).replace(
                "{kname}", rnd.choice(KNAME[lang]))
            out.add(wrap(t, lang))
            continue
        if lang == "en" and cat in DROP and rnd.random() < 0.12:
            t = fill(rnd.choice(DROP[cat]), lang)
            out.add(t if rnd.random() < 0.5 else t + " " + rnd.choice(["Any advice?", "What now?", "Help me plan."]))
            continue
        first, third = rnd.choice(FACTS[cat][lang])
        if rnd.random() < 0.5:
            g = rnd.choice("mf")
            t = fill(first, lang, g, 1)
        else:
            s, g = subject(lang)
            t = third.replace("{S}", s)
            if lang == "it":
                t = t.replace("a il ", "al ").replace("a la ", "alla ").replace("a un ", "a un ")
                t = t.replace("di il ", "del ").replace("di la ", "della ").replace("di mia", "di mia")
            if lang == "es":
                t = t.replace("a el ", "al ").replace("de el ", "del ")
            t = fill(t, lang, g, 3)
            if t.startswith(s):
                pass
        out.add(wrap(t, lang))
    return sorted(out)


def negatives(lang, n):
    out = set()
    tries = 0
    while len(out) < n and tries < n * 20:
        tries += 1
        r = rnd.random()
        if r < 0.2:
            t = neutral(lang)
        elif r < 0.6:
            t = fill(rnd.choice(NEG[lang]), lang)
        elif r < 0.66:
            t = fill(rnd.choice(PROF[lang]).replace("{t}", rnd.choice(TOPIC[lang])), lang)
        elif r < 0.72:
            t = fill(rnd.choice(CURIOUS[lang]).replace("{topic}", rnd.choice(TOPIC[lang])), lang)
        elif r < 0.75:
            t = rnd.choice(FAMOUS[lang])
        elif r < 0.79:
            t = fill(rnd.choice(NEWS[lang]), lang)
        elif r < 0.84:
            t = fill(rnd.choice(HOWTO[lang]).replace("{topic}", rnd.choice(TOPIC[lang])), lang)
        elif r < 0.88:
            t = rnd.choice(GENERIC[lang])
        else:
            t = rnd.choice(CODE)
        out.add(t.replace("  ", " "))
    return sorted(out)


CATS = ["health", "genetic", "biometric", "sex_life", "ethnicity", "politics", "religion",
        "union", "criminal", "finance", "birth_date", "gov_id", "immigration", "employment",
        "victim", "child"]
PER_CAT = {"health": 110, "genetic": 40, "biometric": 35, "sex_life": 70, "ethnicity": 40,
           "politics": 70, "religion": 60, "union": 45, "criminal": 70, "finance": 70,
           "birth_date": 45, "gov_id": 45, "immigration": 50, "employment": 60, "victim": 55,
           "child": 45}


def third_fact(cat, lang, s, g):
    """A fact of category cat about the subject s (gender g), in the third person."""
    third = rnd.choice(FACTS[cat][lang])[1]
    t = third.replace("{S}", s)
    if lang == "it":
        for a, b in (("a il ", "al "), ("a la ", "alla "), ("di il ", "del "), ("di la ", "della ")):
            t = re.sub(r"\b" + a, b, t)
    if lang == "es":
        t = re.sub(r"\ba el ", "al ", re.sub(r"\bde el ", "del ", t))
    return fill(t, lang, g, 3)


# ---------------------------------------------------------------- fiction, games, exercises
# Invented people in a story, a role-play, a game or a textbook exercise concern no real
# person: public. The same frames around a fact about the writer's own people stay personal.
FICT_NAMES = {"en": [("Elias Thorne", "m"), ("Marguerite", "f"), ("Captain Reyes", "m"), ("old Tobias", "m"),
                     ("Nadia Vell", "f"), ("Brother Anselm", "m"), ("Lady Wren", "f"), ("Corporal Dunn", "m"),
                     ("Ivy Marsh", "f"), ("the innkeeper Bram", "m")],
              "it": [("Ettore", "m"), ("la contessa Livia", "f"), ("Saverio", "m"), ("Orsola", "f"),
                     ("il commissario Brandi", "m"), ("Nives", "f"), ("fra Cipriano", "m"), ("Teodora", "f"),
                     ("il brigante Menico", "m"), ("Agnese", "f")],
              "es": [("Ramiro", "m"), ("doña Inés", "f"), ("Tadeo", "m"), ("Celestina", "f"),
                     ("el capitán Olmedo", "m"), ("Maite", "f"), ("fray Anselmo", "m"), ("Remedios", "f"),
                     ("el bandolero Curro", "m"), ("Amparo", "f")]}
FICTION = {"en": ["Write a short story in which {F}.", "Role-play: you are {N}, a character in my novel. {F}. Stay in character.",
                  "Chapter {k}\n\n{F}. The rain had not stopped for three days.",
                  "For my screenplay: {F}. Write the scene where the family finds out.",
                  "Character sheet for our D&D campaign. Backstory: {F}.", "In my fanfic {F}. How do I make it believable?",
                  "Plot idea for a thriller: {F}, and the detective finds out.", "Write a monologue for {N}: {F}.",
                  "Continue the story: {F}. Nobody in the village knew.", "Sitcom episode pitch: {F}, played for gentle laughs."],
           "it": ["Scrivi un racconto in cui {F}.", "Gioco di ruolo: tu sei {N}, personaggio del mio romanzo. {F}. Resta nel personaggio.",
                  "Capitolo {k}\n\n{F}. Pioveva da tre giorni.",
                  "Per la mia sceneggiatura: {F}. Scrivi la scena in cui la famiglia lo scopre.",
                  "Scheda personaggio per la partita di D&D. Background: {F}.", "Nella mia fanfic {F}. Come lo rendo credibile?",
                  "Trama per un giallo: {F}, e il commissario lo scopre.", "Scrivi un monologo per {N}: {F}.",
                  "Continua la storia: {F}. In paese nessuno lo sapeva.", "Idea per una sitcom: {F}, con toni leggeri."],
           "es": ["Escribe un relato en el que {F}.", "Rol: eres {N}, personaje de mi novela. {F}. No salgas del personaje.",
                  "Capítulo {k}\n\n{F}. Llevaba tres días lloviendo.",
                  "Para mi guion: {F}. Escribe la escena en la que la familia se entera.",
                  "Ficha de personaje para la partida de rol. Trasfondo: {F}.", "En mi fanfic {F}. ¿Cómo lo hago creíble?",
                  "Trama para un thriller: {F}, y la inspectora lo descubre.", "Escribe un monólogo para {N}: {F}.",
                  "Continúa el cuento: {F}. En el pueblo nadie lo sabía.", "Idea para una comedia: {F}, en tono ligero."]}
EXERCISE = {"en": ["Textbook exercise {k}, translate into Spanish: \"{FP}.\"", "Grammar exercise: put into the past tense: \"{FP}.\"",
                   "Exercise {k} from the textbook, rewrite in reported speech: \"{FP}\""],
            "it": ["Esercizio {k} del libro, traduci in spagnolo: \"{FP}.\"", "Esercizio di grammatica, volgi al passato: \"{FP}.\"",
                   "Esercizio {k} del libro di testo, trasforma in discorso indiretto: \"{FP}\""],
            "es": ["Ejercicio {k} del libro, traduce al italiano: \"{FP}.\"", "Ejercicio de gramática, conjuga en pasado: \"{FP}.\"",
                   "Ejercicio {k} del libro de texto, pasa a estilo indirecto: \"{FP}\""]}
# Frames around the writer's own people: a real person, so personal.
FRAMED_REAL = {"en": ["Help me write a poem for {S}, because {F}.", "I want to write a short story about my family: {F}, and it changed us.",
                      "Can you turn this into a letter in the style of a fairy tale? {F}."],
               "it": ["Aiutami a scrivere una poesia per {S}, perché {F}.", "Voglio scrivere un racconto sulla mia famiglia: {F}, e ci ha cambiati.",
                      "Puoi trasformarlo in una lettera in stile fiaba? {F}."],
               "es": ["Ayúdame a escribir un poema para {S}, porque {F}.", "Quiero escribir un relato sobre mi familia: {F}, y nos cambió.",
                      "¿Puedes convertirlo en una carta al estilo de un cuento? {F}."]}
FRAME_CATS = ["health", "sex_life", "politics", "religion", "union", "criminal", "finance", "immigration",
              "employment", "victim", "ethnicity", "genetic"]


def framed(lang, n_public, n_personal):
    """(label, text) items: fiction and exercises (public), frames around real people (personal)."""
    out, seen = [], set()
    while len(out) < n_public:
        cat = rnd.choice(FRAME_CATS)
        k = str(rnd.randint(2, 14))
        if rnd.random() < 0.25:
            fp = fill(rnd.choice(FACTS[cat][lang])[0], lang, rnd.choice("mf"), 1)
            t = rnd.choice(EXERCISE[lang]).replace("{FP}", cap(fp)).replace("{k}", k)
        else:
            name, g = rnd.choice(FICT_NAMES[lang])
            tpl = rnd.choice(FICTION[lang])
            f = third_fact(cat, lang, name, g)
            starts = any(x + "{F}" in tpl for x in (". ", "\\n", "? "))
            t = tpl.replace("{N}", name).replace("{k}", k).replace("{F}", cap(f) if starts else f)
        t = t.replace(". .", ".").replace("\n\n", "\n\n")
        if t not in seen:
            seen.add(t)
            out.append(("public", cap(t)))
    while len(out) < n_public + n_personal:
        cat = rnd.choice(FRAME_CATS)
        s, g = subject(lang)
        while not (s.startswith(("my ", "mi ", "mia ", "mio ", "il mio ", "la mia ", "mis "))):
            s, g = subject(lang)
        tpl = rnd.choice(FRAMED_REAL[lang])
        f = third_fact(cat, lang, s, g)
        t = tpl.replace("{S}", s).replace("{F}", cap(f) if "? {F}" in tpl else f)
        if t not in seen:
            seen.add(t)
            out.append((cat, cap(t)))
    return out


def main():
    global rnd
    print("# generated by tools/gen-sensitive-corpus.py (seed %d); do not edit" % SEED)
    print("# LABEL<TAB>LANG<TAB>TEXT")
    for lang in ("en", "it", "es"):
        for cat in CATS:
            for t in positives(cat, lang, PER_CAT[cat]):
                print("%s\t%s\t%s" % (cat, lang, t.replace("\t", " ").replace("\n", "\\n")))
        for t in negatives(lang, 1400):
            print("public\t%s\t%s" % (lang, t.replace("\t", " ").replace("\n", "\\n")))
    # added later with a generator of their own, so that the lines above stay as they were
    rnd = random.Random(SEED + 1)
    for lang in ("en", "it", "es"):
        for label, t in framed(lang, 150, 40):
            print("%s\t%s\t%s" % (label, lang, t.replace("\t", " ").replace("\n", "\\n")))


if __name__ == "__main__":
    main()
