/* SPDX-License-Identifier: MIT */
/*
 * sensitive.c: the special-category layer (see sensitive.h): the lexicon and subject
 * signals, the chunk features, the exact rules, and the scoring with the built-in model.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../basic/macro.h"
#include "sensitive.h"

static const char *const category_names[SENSITIVE_CATEGORY_COUNT_] = {
	"health",   "genetic",	  "biometric",	 "sex_life",   "ethnicity", "politics",
	"religion", "union",	  "criminal",	 "finance",    "birth_date", "gov_id",
	"immigration", "employment", "victim",	  "child",
};

const char *sensitive_category_name(enum sensitive_category c)
{
	return c < SENSITIVE_CATEGORY_COUNT_ ? category_names[c] : NULL;
}

int sensitive_category_from_name(const char *name, enum sensitive_category *ret)
{
	for (int c = 0; c < SENSITIVE_CATEGORY_COUNT_; c++)
		if (name && strcmp(name, category_names[c]) == 0) {
			*ret = (enum sensitive_category) c;
			return 0;
		}
	return -EINVAL;
}

const char *sensitive_layer_name(enum sensitive_layer l)
{
	return l == SENSITIVE_LAYER_LEXICON ? "lexicon" : "classifier";
}

/* ---- the lexicon ---- */

/* Bits of a lexicon entry's mask: the categories (bit = category), then the signals. */
enum {
	SIG_FP = SENSITIVE_CATEGORY_COUNT_, /* first person singular: I, my, io, sono, yo, soy */
	SIG_WE,     /* first person plural: we, our, noi, nostro, nosotros */
	SIG_REL,    /* a described person: wife, figlio, jefe, colleague, neighbour */
	SIG_NAME,   /* a first name or a title (Mr., sig., Sra.) */
	SIG_GEN,    /* general discussion: what, explain, history, people, essay, statistics */
	SIG_THIRD,  /* he, she, lui, lei, él, ella: someone named before */
	SIG_DOC,    /* passport, licence, carta d'identità: the gov_id rule's anchor */
	SIG_BIRTH,  /* born, nato, nací, date of birth: the birth_date rule's anchor */
	SIG_MONTH,  /* a month name (dates for the birth_date rule) */
	SIG_START,  /* "got", "diagnosed", "just": first person implied when a sentence starts
		     * with it ("Got a written warning today") */
	SIG_LABEL,  /* "DOB", "bday", "date of birth": a form label, the birth_date rule needs
		     * no person signal after it */
	SIG_VERB3,  /* is, has, was, è, ha, es, tiene: after a capitalised first word, a name */
	SIG_PET,    /* dog, gatto, perra, vet: the subject may be an animal */
	SIG_FRAME,  /* role-play, fanfic, capitolo, ejercicio: the people may be invented
		     * (fiction, a game, a textbook exercise) */
	SIG_COUNT_,
};
_Static_assert(SIG_COUNT_ <= 32, "a lexicon mask is 32 bits");

struct lexicon_group {
	unsigned bit;
	const char *words; /* '|'-separated; "pre*" is a prefix, "two words" a pair */
};

/* Lower case; prefixes are bytes (UTF-8 letters count as their bytes). Categories first. */
static const struct lexicon_group lexicon[] = {
	{ SENSITIVE_HEALTH,
	  "kidney*|liver|fegato|higado|lungs|polmoni|pulmones|heart|cuore|corazon|pacemaker|marcapasos|nodule|nodulo|lump|cyst*|cisti|quiste|biops*|x-ray|radiografia|fracture*|frattura|fractura|broken leg|gesso|escayola|stitches|dose|dosi|dosis|specialist|specialista|especialista|oncolog*|cardiolog*|gynaecolog*|gynecolog*|ginecolog*|neurolog*|urolog*|dermatolog*|counselling|counseling|ambulance|ambulanza|ambulancia|emergency room|pronto soccorso|urgencias|a&e|prostat*|utero|uterus|ovar*|thyroid|tiroid*|colon|bowel|intestin*|stomach|stomaco|estomago|ulcer*|ulcera|blood pressure|pressione|tension|sugar|zuccheri|azucar|lymphoma|linfoma|melanoma|panic*|panico|pánico|glucose|glicemia|glucemia|blood sugar|sugar levels|sick leave|in malattia|de baja|baja médica|icu|uci|terapia intensiva|hypertension|ipertensione|hipertensión|cholesterol|colesterolo|colesterol|arthritis|artrite|artritis|sober|sobrio|sobria|relapse*|ricaduta|recaída|recaído|antibiotic*|antibiotic*|allerg*|alergia|expecting|twins|gemelli|gemelos|therapy|terapia|blind|cieco|cieca|ciego|ciega|deaf|sordo|sorda|bedwetting|stoma|seizure*|convulsion*|pregnant|prenatal|ecografia|ecografía|ultrasound|contracept*|anticoncezional*|anticonceptiv*|hormone therapy|transplant|trapianto|trasplante|hepatitis|epatite|cirrosis|cirrosi|hiv+|cardio*|ansiolitic*|ansiolític*|benzodiazepin*|opioid*|oppioid*|overdose|sobredosis|ozempic|vaccin*|rheumat*|reumat*|diarrh*|nausea|pain|dolore|dolor|fever|febbre|fiebre|diabet*|diabète|hiv|vih|aids|sida|sieropositiv*|seropositiv*|cancer*|cáncer|tumor*|"
	  "tumour*|leukemia|leucemia|leukaemia|chemo*|quimio*|radiotherap*|radioterapi*|"
	  "depress*|depresión|depresiv*|bipolar*|schizo*|esquizo*|anxiety|ansia|ansiedad|"
	  "panic|attacchi di|ataques de|epilep*|sclerosi|esclerosis|sclerosis|anorex*|anoress*|"
	  "bulimi*|crohn|hepatitis|epatite|renal|kidney|dialysis|dialisi|diálisis|adhd|tdah|"
	  "parkinson*|párkinson|alzheimer*|alzhéimer|asthma|asma|lupus|endometrio*|ptsd|ocd|"
	  "celiac*|celiach*|celíac*|fibromialgia|fibromyalgia|autism*|autist*|dementia|demenza|"
	  "demencia|insulin*|metformin*|antiretrovir*|antirretrovir*|sertralin*|lithium|litio|"
	  "prozac|methadone|metadone|metadona|antidepress*|antidepresiv*|xanax|prep|"
	  "antipsychotic*|antipsicotic*|antipsicótic*|ritalin|morphine|morfina|levothyrox*|"
	  "eutirox|pregnan*|incinta|embarazad*|embarazo|gravidanza|miscarriage|aborto|abortion|"
	  "abortito|abortire|ivf|fecondazione|fertility|infertil*|rehab|rehabilitación|addict*|"
	  "dipendente dall|adicto|adicta|alcoholic|alcolizzat*|alcohólic*|heroin|eroina|cocaine|"
	  "cocaina|suicid*|self-harm|autolesion*|diagnos*|diagnostic*|diagnóstic*|therapist|"
	  "terapeuta|psychiatr*|psichiatr*|psiquiatr*|psycholog*|psicolog*|psicólog*|surgery|"
	  "intervento|operación|operata|operato|operado|operada|biopsy|biopsia|mri|risonanza|"
	  "resonancia|scan results|blood test|analisi del sangue|análisis de sangre|medication|"
	  "farmac*|fármac*|medicament*|medicin*|pills|pastiglie|pastillas|disease|malattia|"
	  "enfermedad|illness|sick|malato|malata|enfermo|enferma|disorder|disturbo|trastorno|"
	  "symptoms|sintomi|síntomas|hospital*|ospedale|ricoverat*|ingresad*|stroke|ictus|infarto|"
	  "heart attack|migraine*|emicrania|migraña|obes*|sovrappeso|sobrepeso|std|sti|"
	  "clamidia|chlamydia|herpes|hpv|sifilide|sífilis|syphilis|disabil*|disabilità|"
	  "discapacidad|invalidità|wheelchair|sedia a rotelle|silla de ruedas|covid|positive|"
	  "positivo|positiva|eating disorder|mental health|salute mentale|salud mental|"
	  "breakdown|burnout|insomnia|insonnia|insomnio|thyroid|tiroide|tiroides|hiv-positive" },
	{ SENSITIVE_GENETIC,
	  "tay|sachs|thalass*|talassemia|talasemia|genetist*|cftr|genetic counsel*|consulenza genetica|brca1|brca2|apoe4|biological father|padre biologico|padre biológico|dna|adn|genetic*|genetic|genetich*|genétic*|genetica|gene|gen|genes|geni|brca*|"
	  "mutation|mutazione|mutación|23andme|ancestrydna|carrier|portatore|portatrice|portador|"
	  "portadora|paternity|paternità|paternidad|huntington|cystic fibrosis|fibrosi cistica|"
	  "fibrosis quística|sickle cell|genome|genoma|hereditary|ereditari*|hereditari*|"
	  "predisposition|predisposizione|predisposición" },
	{ SENSITIVE_BIOMETRIC,
	  "template|embedding|face embedding|biometric template|plantilla|time clock|fingerprints|palmprint|gait|vein|retinal|iris scan|fingerprint*|impronta digitale|impronte digitali|impronte|huella dactilar|"
	  "huellas dactilares|huella|face scan|facial|faccia|volto|iris|retina|voiceprint|"
	  "impronta vocale|huella de voz|biometric*|biometric|biometrici|biometrico|biométric*|"
	  "palm vein|face id|riconoscimento facciale|reconocimiento facial|facial recognition" },
	{ SENSITIVE_SEX_LIFE,
	  "with men|with women|con uomini|con donne|con hombres|con mujeres|fantasi*|crush|same-sex|stesso sesso|mismo sexo|attracted|attratt*|atraíd*|behind my|alle spalle|a escondidas|di nascosto|transition*|transizione|transición|nonbinary|non-binary|non binario|no binario|hooked up|sleeping with|escort|gonorr*|hiv|sex life|vita sessuale|vida sexual|orientation|orientamento|orientación|coming|cornuto|amante|lover|tinder|grindr|gay|gays|lesbian*|lesbica|lesbiche|lesbiana|bisexual*|bisessual*|homosexual*|"
	  "omosessual*|transgender|trans|transexual|transessuale|queer|asexual|asessuale|"
	  "came out|coming out|fatto coming|del armario|armario|closet|affair|tradisco|tradisce|"
	  "tradito|tradita|cuernos|infidel*|infedel*|cheating|virgin|vergine|virgen|sex|sesso|"
	  "sexo|sexual*|sessual*|sexually|polyamor*|poliamor*|open relationship|relazione aperta|"
	  "relación abierta|erectile|erettile|eréctil|hormones|ormoni|hormonas|dating|"
	  "frequenta|sale con|boyfriend|girlfriend|lgbt*|lgtb*" },
	{ SENSITIVE_ETHNICITY,
	  "filipino|filipina|filippin*|filipin*|senegal*|chinese|cinese|chino|china|indian|indiano|indiana|romanian|rumeno|rumena|rumano|rumana|albanian|albanese|ecuador*|ecuatorian*|gypsy|zingar*|skin colour|skin color|colore della pelle|color de piel|brown|heritage|afro*|asian|asiatico|asiatica|asiático|asiática|latinx|moroccan|sudamericano|sudamericana|indigenous|native american|roma|rom|sinti|gitano|gitana|gitani|black|nero|nera|negro|negra|moroccan|marocchin*|"
	  "marroquí|kurdish|curdo|curda|kurdo|kurda|aboriginal|nigerian*|nigerian|nigeriane|"
	  "nigeriano|pakistani|pakistan*|paquistaní|latino|latina|mixed-race|meticcio|meticcia|"
	  "mestizo|mestiza|indígena|ethnic*|etnia|etnic*|étnic*|race|razza|raza|racial|"
	  "origin|origine|origen|descent|ascendencia|discrimination|discriminat*|discriminación|"
	  "racism|razzismo|racismo|racist*|razzist*|racist|arab|arabo|árabe|jewish ancestry" },
	{ SENSITIVE_POLITICS,
	  "supporter|sostenitore|sostenitrice|simpatizzante|simpatizante|votante|elettore|elettrice|elector|brexit|leave voter|partito comunista|unità|tessera del|afiliada|afiliado|iscritto|iscritta|green|verdi|ukip|maga|antifa|podemita|sovranist*|independentist*|indipendentist*|voted|vote|votes|voting|votato|voto|votare|voterò|vota|votano|voté|votó|votar|"
	  "votaré|votamos|party|partito|partido|labour|conservatives|tory|tories|greens|"
	  "democrats|republicans|republican|democrat|lib dems|reform uk|snp|pd|lega|"
	  "fratelli d'italia|movimento 5|m5s|forza italia|azione|psoe|pp|vox|sumar|podemos|"
	  "erc|junts|pnv|bildu|communist*|comunist*|fascist*|fascista|fascisti|socialist*|"
	  "socialista|far right|extrema derecha|estrema destra|anarchist*|anarchic*|anarquist*|"
	  "protest|protesta|manifestazione|manifestación|activist*|attivist*|activista|campaign*|"
	  "campagna|campaña|militante|militant|member of|iscritto al|iscritta al|iscritto alla|"
	  "iscritta alla|afiliado al|afiliada al|left-wing|right-wing|sinistra|destra|izquierda|"
	  "derecha|election*|elezioni|elecciones|trump|biden|meloni|schlein|sánchez|feijóo|abascal" },
	{ SENSITIVE_RELIGION,
	  "believer|credente|creyente|practising|practicing|praticante|practicante|baptism|battesimo|bautismo|communion|comunione|comunión|shabbat|sabbath|kippah|kipá|rosary|rosario|rabbi|rabbino|rabino|imam|priest|prete|sacerdote|monk|nun|suora|monja|bible|bibbia|biblia|quran|corano|corán|torah|scientolog*|pagan*|wicca|spiritual|transfusion*|trasfusion*|transfusión|transfusiones|hiyab|niqab|burqa|turban|turbante|kosher|apostate|apostata|muslim|musulman*|musulmán|catholic*|cattolic*|católic*|jewish|ebreo|ebrea|judío|judía|"
	  "jehovah|geova|jehová|buddhist*|buddist*|budista|hindu|induista|hindú|atheist*|ateo|"
	  "atea|mormon|mormone|mormón|evangelical|evangelic*|evangélic*|sikh|orthodox|ortodoss*|"
	  "ortodox*|protestant*|christian*|cristian*|islam|islamic|islámic*|judaism|ebraismo|"
	  "judaísmo|church|chiesa|iglesia|mosque|moschea|mezquita|synagogue|sinagoga|mass|messa|"
	  "misa|pray|prego|rezo|pregare|rezar|ramadan|ramadán|hijab|velo|faith|fede|fe|converted|"
	  "convertit*|convertí|convirtió|religion*|religione|religión|religios*|religious|god|"
	  "dio|dios|kosher|halal|baptized|battezzat*|bautizad*|agnostic*|agnostico|agnóstic*" },
	{ SENSITIVE_UNION,
	  "union rep|rep|delegate|delegat*|tesserat*|afiliad*|rsu|rsa|comité de empresa|works council|collective|picket|picchetto|piquete|shop|unionized|sindacalist*|sindicalista|union|unions|unionised|sindacato|sindacati|sindacale|sindicato|sindical|cgil|cisl|uil|"
	  "fiom|cobas|usb|ccoo|ugt|cgt|cnt|uso|csif|unite|gmb|unison|teamsters|rmt|afl-cio|"
	  "shop steward|delegato sindacale|delegada sindical|delegado sindical|strike|sciopero|"
	  "huelga|tessera|carné|carnet del sindicato" },
	{ SENSITIVE_CRIMINAL,
	  "dui|dwi|record|serving|sentence|robbery|armed|galera|behind bars|juvie|pillaron|pillado|pillada|udienza|hearing|pending|possession|indicted|mugshot|denuncia|pena|reclusione|prisión preventiva|custody|custodia|fedina|antecedenti|penale|penal|bail|cauzione|fianza|warrant|mandato|suspended sentence|community service|servizi sociali|vandalism|vandalismo|stalker|smuggling|contrabbando|contrabando|homicide|omicidio|homicidio|manslaughter|murder|arrested|arrest|arrestat*|detenid*|detuvieron|detenuto|criminal record|fedina penale|"
	  "precedenti penali|antecedentes|convicted|conviction|condannat*|condenad*|condenaron|"
	  "condena|condanna|prison|jail|carcere|prigione|cárcel|prisión|probation|parole|"
	  "libertà vigilata|libertad condicional|domiciliari|charged|indagat*|imputad*|denunciat*|"
	  "denunciaron|sentenced|offence|offense|reato|reati|delito|crime|crimine|drunk driving|"
	  "shoplifting|assault|fraud|truffa|estafa|burglary|furto|hurto|robo|rapina|theft|"
	  "spaccio|tráfico de drogas|dealing|drug possession|tax evasion|evasione fiscale|"
	  "fraude|police|polizia|policía|carabinieri|guardia civil|court|tribunale|tribunal|"
	  "trial|processo|juicio|lawyer|avvocato|abogado|ebbrezza|ebrio|ricettazione|lesioni|"
	  "lesiones|apropiación indebida|maltrattamenti" },
	{ SENSITIVE_FINANCE,
	  "pay off|take-home|take home|paycheck|paycheque|embargo|embargad*|pignorat*|pignoramento|nómina|hacienda|agenzia delle entrate|irs|hmrc|tax|taxes|tasse|impuestos|gambling|scommesse|apuestas|ludopat*|broke|al verde|sin blanca|sfratto|eviction|desahucio|arretrato|cobro|cobra|wage|wages|net worth|inheritance|eredità|herencia|alimony|alimenti|pensión alimenticia|budget|bills|bollette|facturas|interest|interessi|intereses|overdrawn|payday|minimum wage|stipendi|ahorro|risparmio|cash|contanti|efectivo|bonus|isee|salary|salario|stipendio|sueldo|earn|earns|guadagno|guadagna|gano|gana|income|reddito|"
	  "ingresos|debt|debts|debito|debiti|deuda|deudas|debo|debe|owe|owes|mortgage|mutuo|"
	  "hipoteca|rent|affitto|alquiler|bankrupt*|bankruptcy|fallit*|fallimento|quiebra|"
	  "concurso de acreedores|credit score|credit card*|carta di credito|tarjeta|crif|"
	  "morosos|cattivo pagatore|loan|prestito|préstamo|savings|risparmi|ahorros|overdraft|"
	  "scoperto|descubierto|payslip|busta paga|nómina|benefits|sussidio|subsidio|"
	  "unemployment benefit|disoccupazione|paro|pension|pensione|pensión|euros|euro|€|$|£|"
	  "rate|rata|rate del|cuota|arrears|behind on|in ritardo|atrasado|atrasada|pay|pagare|pagar" },
	{ SENSITIVE_BIRTH_DATE,
	  "born|birth|birthday|dob|nato|nata|nascita|compleanno|compie|nací|nació|nacido|nacida|"
	  "nacimiento|cumpleaños|cumple" },
	{ SENSITIVE_GOV_ID,
	  "passport|passaporto|pasaporte|id card|identity card|carta d'identità|carta di identità|"
	  "dni|nie|driving licence|driver's license|driving license|licence|license|patente|"
	  "carnet de conducir|carné de conducir|national insurance|social security|"
	  "seguridad social|previdenza|codice fiscale|tessera sanitaria|permesso numero|"
	  "document number|numero documento|número de documento" },
	{ SENSITIVE_IMMIGRATION,
	  "spousal|tourist visa|barca|barcone|boat|patera|cayuco|arraigo|permesso|permiso|overstay*|work permit|sponsorship|naturalizat*|naturalizzazione|naturalización|detention centre|cpr|cie|deport*|expuls*|rimpatri*|repatri*|undocumented|irregular|ilegal|papers|nationality|nazionalità|nacionalidad|asilo|questura|extranjería|home office|uscis|ice|undocumented|illegally|illegal|irregolare|irregular|clandestin*|sin papeles|"
	  "senza documenti|no papers|visa|visto|permesso di soggiorno|permiso de residencia|"
	  "residencia|residence permit|asylum|asilo|refugee|rifugiat*|refugiad*|deportation|"
	  "deported|espulsione|expulsión|green card|overstayed|immigrant|immigrat*|inmigrante|"
	  "migrant*|migrante|citizenship|cittadinanza|ciudadanía|papers|papeles|documenti|"
	  "situación irregular|expulsion|sanatoria|regularización" },
	{ SENSITIVE_EMPLOYMENT,
	  "let me go|let go|sospensione|suspension|suspensión|echaron|echado|echada|written warning|final warning|probation period|periodo di prova|periodo de prueba|demoted|demansionat*|degradad*|redundan*|miglioramento|improvement plan|mobbing|grievance|tribunal|laid|sacked|terminated|termination|licenzia*|disciplinar*|sanzione|sanción|sanction*|reprimand*|rimprovero|richiamo|appraisal|absence|assenze|absentismo|ausencias|fired|sacked|dismissed|dismissal|laid off|licenziat*|licenziamento|despedid*|"
	  "despidieron|despido|warning|richiamo|amonestación|disciplinary|disciplinare|"
	  "disciplinario|procedimento|expediente|pip|performance|valutazione|evaluación|"
	  "suspended|sospeso|sospesa|suspendid*|misconduct|giusta causa|investigation|indagine|"
	  "investigación|hr|risorse umane|recursos humanos|cassa integrazione|erte|ere|"
	  "contestazione|harassment|molestie|acoso laboral|resign*|dimissioni|dimisión" },
	{ SENSITIVE_VICTIM,
	  "groped|palpeggiat*|manosead*|tocó|mani addosso|perseguita|perseguit*|persigue|insulta|insulti|insulto|insulted|moratones|lividi|bruises|bruised|pushed|spinto|spinta|empujó|slapped|schiaffo|schiaffi|bofetada|abusó|abusaron|threatened|minacciat*|amenazad*|coerc*|revenge porn|blackmail*|ricatt*|chantaje|chantajea|hurt me|mi fa male|me hace daño|scared of him|paura di lui|miedo de él|restraining order|ordine restrittivo|orden de alejamiento|shelter|casa rifugio|casa de acogida|femicide|femminicidio|feminicidio|assault|aggressione|agresión|harass*|molest*|acosa|abusivo|abusiva|abusive|violento|violenta|violent|hit me|beat me|beats me|picchia|picchiava|pegaba|pega|abuse|abused|abusi|abusata|"
	  "abusato|abusos|abusada|abusado|assaulted|rape|raped|violentat*|stuprat*|violaron|"
	  "violación|violenza|violencia|molested|molestat*|stalking|stalker|acoso|trafficked|"
	  "tratta|trata|victim|vittima|víctima|threatens|minaccia|minacciato|amenaza|amenazó|"
	  "domestic violence|violenza domestica|violencia de género|malos tratos|maltrato|"
	  "maltrattamenti|bullied|bullismo|bullying|controls my|mi controlla|me controla" },
	{ SENSITIVE_CHILD,
	  "bambin*|kindergarten|pediatra|pediatrician|pediatric*|nursery|grades|voti|notas|report card|pagella|boletín|class|clase|classroom|aula|preschool|materna|infantil|scuola materna|asilo|teen|teenager|adolescente|adolescent|twins|newborn|neonata|recién nacido|recién nacida|boy|girl|ragazzino|ragazzina|chico|chica|niñ*|bimb*|pupil|alunno|alunna|alumno|alumna|wets|bed|pipì|babysitter|custody|affidamento|custodia|tutor|year-old|years old|anni|años|school|scuola|colegio|escuela|instituto|primary|"
	  "elementary|elementare|elementari|media|primaria|kindergarten|asilo nido|guardería|"
	  "nursery|grade|year|classe|curso|teacher|maestra|maestro|profesora|bullied|"
	  "speech delay|dyslexia|dislessia|dislexia|homework|compiti|deberes|daycare|"
	  "son|daughter|figlio|figlia|hijo|hija|kid|kids|child|bambino|bambina|niño|niña|"
	  "toddler|baby|bebé|neonato" },

	{ SIG_FP,
	  "i|i'm|im|i've|i'd|i'll|me|my|mine|myself|io|mi|mio|mia|miei|mie|sono|ho|sto|soffro|"
	  "prendo|faccio|vado|m'hanno|personalmente|yo|mis|mío|mía|míos|mías|soy|estoy|tengo|"
	  "tuve|fui|estuve|hice|voy|padezco|sufro|tomo|debo|nací|perdí|pasé|recibí|intenté|"
	  "sigo|conmigo|me he|llevo|guadagno|gano|sono stato|sono stata|puedo|quiero|necesito|"
	  "debería|creo|siento|posso|voglio|devo|dovrei|credo|sento|vorrei|quisiera|am i|have i" },
	{ SIG_WE,
	  "we|our|ours|us|noi|nostro|nostra|nostri|nostre|ci|nosotros|nosotras|nuestro|nuestra|"
	  "nuestros|nuestras" },
	{ SIG_REL,
	  "wife|husband|son|daughter|mother|mom|mum|father|dad|brother|sister|boss|colleague|"
	  "coworker|co-worker|neighbour|neighbor|friend|partner|boyfriend|girlfriend|"
	  "grandmother|grandfather|grandma|grandpa|uncle|aunt|cousin|nephew|niece|patient|"
	  "tenant|flatmate|roommate|employee|student|client|mother-in-law|father-in-law|fiancé|"
	  "fiancée|ex|stepson|stepdaughter|moglie|marito|figlio|figlia|madre|mamma|padre|papà|"
	  "fratello|sorella|capo|collega|amico|amica|vicino|vicina|compagno|compagna|fidanzato|"
	  "fidanzata|ragazzo|ragazza|nonna|nonno|zio|zia|cugino|cugina|nipote|paziente|"
	  "dipendente|inquilino|inquilina|suocera|suocero|cognato|cognata|studente|"
	  "studentessa|cliente|mujer|esposa|esposo|marido|hijo|hija|mamá|papá|hermano|hermana|"
	  "jefe|jefa|compañero|compañera|colega|amigo|amiga|vecino|vecina|pareja|novio|novia|"
	  "abuela|abuelo|tío|tía|primo|prima|sobrino|sobrina|empleado|empleada|suegra|suegro|"
	  "cuñado|cuñada|alumno|alumna|mío|mía|someone i know|a friend of mine|un amico|un amigo" },
	{ SIG_NAME,
	  "mr|mrs|ms|miss|dr|sig|sig.ra|signor|signora|signore|dott|dottor|dottoressa|sr|sra|"
	  "cognome|surname|apellido|apellidos|pt|"
	  "señor|señora|don|doña|marco|sarah|john|laura|tom|dave|david|michael|james|robert|"
	  "mary|jennifer|linda|emily|emma|olivia|liam|noah|jack|harry|george|oliver|sophie|"
	  "chloe|jessica|daniel|paul|mark|peter|anna|giulia|francesca|luca|paolo|chiara|matteo|"
	  "sofia|alessandro|lorenzo|giovanni|giuseppe|andrea|federica|valentina|elena|simone|"
	  "roberto|stefano|martina|sara|alessia|davide|riccardo|javier|carmen|pablo|diego|"
	  "lucía|lucia|maría|maria|josé|jose|antonio|manuel|francisco|juan|pedro|ana|isabel|"
	  "laura|marta|cristina|pilar|alejandro|sergio|jorge|alberto|carlos|miguel|raúl|rafael|"
	  "hugo|mateo|lily|ethan|mia|leonardo|aurora|alice|giorgia|nicola|fabio|enrico|carla|"
	  "rosa|teresa|beatriz|silvia|elisa|ahmed|mohamed|fatima|olga|ivan|kevin|brian|susan|"
	  "karen|lisa|nancy|helen|kate|anne|tim|nick|sam|ben|alex|max|luis|fernando|andrés" },
	{ SIG_GEN,
	  "what|how|why|which|explain|describe|history|overview|general|generally|people|"
	  "patients|persons|someone|anyone|statistics|research|study|studies|according|"
	  "essay|article|report|novel|film|movie|character|quiz|lesson|students|article|"
	  "definition|define|difference|symptoms|causes|risk|risks|percent|millions|common|"
	  "worldwide|society|law|laws|rights|policy|news|government|poll|polls|che|cos|cosa|"
	  "come|perché|quali|quale|spiega|spiegami|storia|persone|pazienti|ricerca|studio|"
	  "studi|secondo|tesina|articolo|romanzo|differenza|sintomi|cause|rischi|milioni|"
	  "legge|diritti|notizie|governo|sondaggi|qué|cómo|por qué|cuáles|cuál|explica|"
	  "explícame|historia|personas|pacientes|investigación|estudio|estudios|según|trabajo "
	  "sobre|artículo|novela|diferencia|síntomas|causas|riesgos|millones|ley|derechos|"
	  "noticias|gobierno|encuestas|typically|usually|in general|di solito|en general|"
	  "is it true|is there|are there|can you explain|tell me about|parlami|háblame|"
	  "does|do|do you|cosa significa|qué significa|what does|do i|can i|should i|how do|"
	  "how can|come faccio|come posso|cómo puedo|cómo hago" },
	{ SIG_THIRD,
	  "he|she|his|her|him|they|their|lui|lei|suo|sua|él|ella|su|sus" },
	{ SIG_DOC,
	  "passport|passaporto|pasaporte|licence|license|patente|carnet|carné|dni|nie|"
	  "id|identità|identidad|insurance|security|seguridad|fiscale|sanitaria|documento|"
	  "document|soggiorno|residencia|permit|visa|visto|tie|a-number|uscis|nir|nino|curp|rut|"
	  "rfc|nss|ssn|cuil|cuit|dui|ine|nif|cedula|cédula|ni" },
	{ SIG_BIRTH,
	  "born|birth|birthday|dob|bday|b-day|birthdate|nato|nata|nascita|compleanno|compie|nací|nació|nacido|nacida|"
	  "nacimiento|cumpleaños|cumple" },
	{ SIG_START,
	  "got|been|had|just|finally|diagnosed|found|started|lost|went|came|broke|quit|failed|"
	  "spent|tested|getting|having|feeling|struggling|dealing|recovering|pregnant|arrested|"
	  "fired|sacked|married|divorced|separated|living|working|taking|waiting|currently" },
	{ SIG_LABEL,
	  "dob|bday|b-day|birthdate|birthday|of birth|di nascita|de nacimiento|nascita|"
	  "nacimiento|cumpleaños|compleanno" },
	{ SIG_VERB3,
	  "is|has|was|had|got|gets|does|did|works|lives|told|said|just|è|ha|era|aveva|lavora|vive|"
	  "es|tiene|está|fue|tenía|trabaja|vive|dijo|me|mi" },
	{ SIG_PET,
	  "dog|dogs|puppy|cat|cats|kitten|cane|cani|cagnolino|cagnolina|gatto|gatta|gattino|"
	  "gattina|perro|perra|perrito|perrita|gato|gata|gatito|gatita|vet|vets|veterinario|"
	  "veterinaria|veterinarian|pet|pets|mascota|animale|horse|cavallo|caballo|conejo|"
	  "coniglio|rabbit|hamster|parrot|pappagallo|loro|cucciolo|cachorro" },
	{ SIG_FRAME,
	  "role-play|roleplay|role play|rol|gioco di ruolo|juego de rol|in character|"
	  "in personaggio|fanfic|fanfiction|fan fiction|chapter|capitolo|capítulo|story|"
	  "short story|racconto|raccontino|cuento|relato|storia breve|novel|romanzo|novela|"
	  "screenplay|script|sceneggiatura|guion|guión|scene|scena|escena|plot|trama|"
	  "protagonist|protagonista|villain|antagonist|cattivo|villano|character sheet|"
	  "scheda personaggio|ficha de personaje|backstory|trasfondo|dungeon|d&d|dnd|fictional|"
	  "fictitious|invented|imaginary|inventato|inventata|"
	  "immaginario|immaginaria|ficticio|ficticia|inventado|inventada|imaginario|imaginaria|"
	  "esercizio|textbook|libro di testo|libro de texto|del libro|conjugate|"
	  "coniuga|conjuga|volgi|dialogue|dialogo|diálogo|monologue|monologo|monólogo|poem|"
	  "poesia|poema|lyrics|sonnet|sonetto|soneto|fable|fiaba|fábula|fairy tale|thriller|"
	  "novella|sitcom|sketch|stay in character|narrator|narratore|"
	  "narrador|chapters|capitoli|capítulos" },
	{ SIG_MONTH,
	  "january|february|march|april|may|june|july|august|september|october|november|"
	  "december|gennaio|febbraio|marzo|aprile|maggio|giugno|luglio|agosto|settembre|"
	  "ottobre|novembre|dicembre|enero|febrero|abril|mayo|junio|julio|septiembre|octubre|"
	  "noviembre|diciembre|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec" },
};

/* Lexicon keys: the word's FNV-1a hash (lower-cased bytes) and its length; a prefix key
 * marks "pre*" and matches any word that starts with it; a pair key hashes two words. */
enum { KEY_WORD = 0, KEY_PREFIX = 1, KEY_PAIR = 2 };

struct lex_slot {
	uint32_t hash; /* 0: empty */
	uint32_t mask; /* categories and signals */
};

#define LEX_BITS 13
static struct lex_slot lex_table[1u << LEX_BITS];
static uint32_t prefix_lengths; /* bit L: some prefix entry has L bytes */
static pthread_once_t lex_once = PTHREAD_ONCE_INIT;

#define FNV_INIT 0x811c9dc5u
#define FNV_STEP(h, c) (((h) ^ (c)) * 0x01000193u)

static inline uint32_t mix32(uint32_t h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

static inline uint32_t lex_key(uint32_t h, uint32_t len, unsigned type)
{
	uint32_t k = mix32(h ^ (len * 0x9e3779b1u) ^ (type * 0x7f4a7c15u));
	return k ? k : 1;
}

static inline uint32_t pair_hash(uint32_t a, uint32_t b)
{
	return a * 0x2545f491u + b + 0x51ed27u;
}

static void lex_put(uint32_t key, uint32_t mask)
{
	uint32_t i = key & ((1u << LEX_BITS) - 1);

	while (lex_table[i].hash && lex_table[i].hash != key)
		i = (i + 1) & ((1u << LEX_BITS) - 1);
	lex_table[i].hash = key;
	lex_table[i].mask |= mask;
}

static inline uint32_t lex_get(uint32_t key)
{
	uint32_t i = key & ((1u << LEX_BITS) - 1);

	for (;;) {
		if (lex_table[i].hash == key)
			return lex_table[i].mask;
		if (!lex_table[i].hash)
			return 0;
		i = (i + 1) & ((1u << LEX_BITS) - 1);
	}
}

/* The tokenizer's view of a byte: the lower-cased byte of a word, 0 for a separator. Words are
 * ASCII letters and digits and every byte >= 0x80 (UTF-8 letters, apart from the curly quotes
 * handled below); '-' and '\'' separate ("year-old" and "i'm" are two words each). */
static inline unsigned char word_byte(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return (unsigned char) (c + 32);
	if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c >= 0x80)
		return c;
	return 0;
}

/* U+2018/U+2019 (curly apostrophes, E2 80 98/99) separate words like ASCII quotes. */
static inline bool curly_quote(const unsigned char *p, size_t i, size_t n)
{
	return p[i] == 0xe2 && i + 2 < n && p[i + 1] == 0x80 &&
	       (p[i + 2] == 0x98 || p[i + 2] == 0x99);
}

/* Latin-1 letters (UTF-8 C3 80..C3 BF) without their accents, lower case: people often type
 * "diabetico", "depresion", "perche" without them. 0: not a letter (×, ÷), kept as is. */
static const unsigned char latin1_fold[64] = {
	'a', 'a', 'a', 'a', 'a', 'a', 'a', 'c', 'e', 'e', 'e', 'e', 'i', 'i', 'i', 'i',
	'd', 'n', 'o', 'o', 'o', 'o', 'o', 0,	'o', 'u', 'u', 'u', 'u', 'y', 't', 's',
	'a', 'a', 'a', 'a', 'a', 'a', 'a', 'c', 'e', 'e', 'e', 'e', 'i', 'i', 'i', 'i',
	'd', 'n', 'o', 'o', 'o', 'o', 'o', 0,	'o', 'u', 'u', 'u', 'u', 'y', 't', 'y',
};

/* Words of four letters and more are read without accents; shorter ones keep them, where
 * the accent is the word (è/e, él/el, qué/que, sí/si, mí/mi). */
#define FOLD_MIN_CHARS 4

/* The tokenizer's byte at p[i] and how many bytes it stands for (*width). */
static inline unsigned char fold_at(const unsigned char *p, size_t i, size_t n, bool fold,
				    size_t *width)
{
	*width = 1;
	if (fold && p[i] == 0xc3 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0xbf &&
	    latin1_fold[p[i + 1] - 0x80]) {
		*width = 2;
		return latin1_fold[p[i + 1] - 0x80];
	}
	return word_byte(p[i]);
}

/* The end of the word that starts at i, and its number of characters. */
static inline size_t word_end(const unsigned char *p, size_t i, size_t n, size_t *chars)
{
	size_t c = 0;

	while (i < n && word_byte(p[i]) && !curly_quote(p, i, n)) {
		c += (p[i] & 0xc0) != 0x80;
		i++;
	}
	*chars = c;
	return i;
}

static void lex_add_entry(const char *w, size_t n, uint32_t mask)
{
	const unsigned char *p = (const unsigned char *) w;
	uint32_t h[2] = { FNV_INIT, FNV_INIT }, len[2] = { 0, 0 };
	unsigned words = 0;
	bool prefix = n && w[n - 1] == '*';
	size_t i = 0;

	if (prefix)
		n--;
	/* the entry's words the way the tokenizer cuts and folds them ("i'm" is the pair "i"
	 * "m") */
	while (i < n) {
		size_t chars, e, wd;
		if (!word_byte(p[i])) {
			i++;
			continue;
		}
		if (words >= 2)
			return; /* three words and more: not supported */
		e = word_end(p, i, n, &chars);
		for (; i < e; i += wd) {
			h[words] = FNV_STEP(h[words], fold_at(p, i, e, chars >= FOLD_MIN_CHARS, &wd));
			len[words]++;
		}
		words++;
	}
	if (words == 1 && prefix) {
		if (len[0] < 32)
			prefix_lengths |= 1u << len[0];
		lex_put(lex_key(h[0], len[0], KEY_PREFIX), mask);
	} else if (words == 1) {
		lex_put(lex_key(h[0], len[0], KEY_WORD), mask);
	} else if (words == 2 && !prefix) {
		lex_put(lex_key(pair_hash(h[0], h[1]), 0, KEY_PAIR), mask);
	}
}

static void lex_build(void)
{
	for (size_t g = 0; g < ELEMENTSOF(lexicon); g++) {
		const char *s = lexicon[g].words;
		while (*s) {
			size_t n = strcspn(s, "|");
			lex_add_entry(s, n, 1u << lexicon[g].bit);
			s += n;
			if (*s == '|')
				s++;
		}
	}
}

/* ---- chunks and their features ---- */

struct word {
	uint32_t start, end; /* bytes */
	uint32_t hash;       /* FNV-1a of the lower-cased bytes */
	uint32_t mask;       /* lexicon: the word, a prefix of it, or the pair ending here */
	uint32_t pair_start; /* where the pair that set bits of mask starts (else start) */
	uint8_t len;         /* bytes, capped at 255 */
	uint8_t digits;      /* ASCII digits in it */
	bool cap;            /* starts with an ASCII capital, not all capitals */
	bool fold;           /* read without accents (FOLD_MIN_CHARS) */
};

struct chunk {
	const unsigned char *text;
	size_t text_len;
	size_t start, end;
	struct word w[SENSITIVE_CHUNK_WORDS];
	size_t n;
	bool question;
	bool prev_person;
	bool frame_before; /* a SIG_FRAME word in an earlier chunk of the text */
	bool blanks; /* a form's blanks ("Nome: ______"): a template, not someone's data */
	uint32_t any;        /* OR of the words' masks */
};

#define SEED_UNI 0x9e3779b9u
#define SEED_GRAM 0xa54ff53au
#define SEED_SIG 0x5157aa00u
#define MAX_GRAMS_PER_WORD 8

/* Signal feature ids (crossed with a category: id * 32 + category). */
enum {
	F_LEX,
	F_LEX_FP,
	F_LEX_WE,
	F_LEX_REL,
	F_LEX_NAME,
	F_LEX_GEN,
	F_LEX_PREV,
	F_LEX_NOSUBJ,
	F_LEX_QUESTION,
	F_LEX_THIRD_PREV,
	F_LEX_PET,
	F_GLOBAL, /* + one of the G_ below, category 31 */
	F_NEAR,   /* + subject kind * 4 + distance bucket: a category word close after a subject
		   * word ("soy diabético", "my wife is pregnant"), crossed with the category and
		   * alone (category 31) */
};
enum {
	G_FP,
	G_WE,
	G_REL,
	G_NAME,
	G_GEN,
	G_PREV,
	G_QUESTION,
	G_NOLEX_FP,
	G_NOLEX_REL,
	G_CAPWORD,
	G_NLEX1,
	G_NLEX2,
	G_NLEX3,
	G_FP_REL,
	G_FP_GEN,
	G_REL_GEN,
	G_PET,
	G_BLANK,
	G_FRAME,
	G_FRAME_BEFORE,
	G_FRAME_FP,
};

/* A category word in a text framed as fiction, a game or an exercise (this chunk or an
 * earlier one): after F_NEAR's sixteen ids. */
#define F_LEX_FRAME (F_NEAR + 16)

static inline uint32_t sig_feature(unsigned id, unsigned cat)
{
	return mix32(SEED_SIG + id * 32u + cat);
}

static void push(struct sensitive_features *f, uint32_t h)
{
	if (f->n < SENSITIVE_MAX_FEATURES)
		f->h[f->n++] = h;
}

static void chunk_features(const struct chunk *c, struct sensitive_features *f)
{
	uint32_t any = c->any, cats = any & ((1u << SENSITIVE_CATEGORY_COUNT_) - 1);
	/* a sentence that starts "Got ...", "Diagnosed ..." drops its "I" */
	bool implicit = c->n && (c->w[0].mask & (1u << SIG_START)) &&
			!(any & (1u << SIG_WE | 1u << SIG_REL | 1u << SIG_NAME));
	bool fp = (any & (1u << SIG_FP)) || implicit, we = any & (1u << SIG_WE);
	bool rel = any & (1u << SIG_REL);
	/* "Jake is gay": a capitalised first word the lexicon does not know, then a verb */
	bool cap_name = c->n >= 2 && c->w[0].cap && !c->w[0].mask && c->w[0].len >= 3 &&
			(c->w[1].mask & (1u << SIG_VERB3));
	bool name = (any & (1u << SIG_NAME)) || cap_name, gen = any & (1u << SIG_GEN);
	bool third = any & (1u << SIG_THIRD), capword = false, pet = any & (1u << SIG_PET);
	bool frame = any & (1u << SIG_FRAME);
	unsigned n_cats = (unsigned) __builtin_popcount(cats);

	f->n = 0;
	for (size_t i = 0; i < c->n; i++) {
		const struct word *w = &c->w[i];
		unsigned char buf[MAX_GRAMS_PER_WORD + 3 + 2];
		size_t bl = 0;

		push(f, mix32(w->hash ^ SEED_UNI));
		if (i)
			push(f, mix32(pair_hash(c->w[i - 1].hash, w->hash)));
		/* " word " 4-grams, the first MAX_GRAMS_PER_WORD of them */
		buf[bl++] = ' ';
		for (size_t k = w->start, wd; k < w->end && bl < sizeof(buf) - 1; k += wd)
			buf[bl++] = fold_at(c->text, k, w->end, w->fold, &wd);
		if (w->end - w->start <= sizeof(buf) - 3)
			buf[bl++] = ' ';
		if (bl < 4) {
			uint32_t g = 0x3c6ef372u;
			for (size_t k = 0; k < bl; k++)
				g = FNV_STEP(g, buf[k]);
			push(f, mix32(g));
		} else {
			for (size_t k = 0; k + 4 <= bl; k++) {
				uint32_t g = (uint32_t) buf[k] | (uint32_t) buf[k + 1] << 8 |
					     (uint32_t) buf[k + 2] << 16 | (uint32_t) buf[k + 3] << 24;
				push(f, mix32(g ^ SEED_GRAM));
			}
		}
		if (w->cap && i > 0 && !(w->mask & ((1u << SENSITIVE_CATEGORY_COUNT_) - 1)))
			capword = true;
	}
	f->n_ngram = f->n;
	/* Who the category word is about: the nearest subject word in the four words before it
	 * (first person, plural, described person, named person), by distance. */
	for (size_t i = 0; i < c->n; i++) {
		uint32_t wc = c->w[i].mask & ((1u << SENSITIVE_CATEGORY_COUNT_) - 1);
		if (!wc)
			continue;
		for (size_t d = 1; d <= 4 && d <= i; d++) {
			uint32_t m = c->w[i - d].mask;
			unsigned kind = m & (1u << SIG_FP)	? 0
					: m & (1u << SIG_WE)	? 1
					: m & (1u << SIG_REL)	? 2
					: m & (1u << SIG_NAME) ? 3
							       : 4;
			if (kind == 4)
				continue;
			unsigned id = F_NEAR + kind * 4 + (d == 1 ? 0 : d == 2 ? 1 : 2);
			push(f, sig_feature(id, 31));
			for (uint32_t b = wc; b; b &= b - 1)
				push(f, sig_feature(id, (unsigned) __builtin_ctz(b)));
			break;
		}
	}
	for (unsigned k = 0; k < SENSITIVE_CATEGORY_COUNT_; k++) {
		if (!(cats & (1u << k)))
			continue;
		push(f, sig_feature(F_LEX, k));
		if (fp)
			push(f, sig_feature(F_LEX_FP, k));
		if (we)
			push(f, sig_feature(F_LEX_WE, k));
		if (rel)
			push(f, sig_feature(F_LEX_REL, k));
		if (name)
			push(f, sig_feature(F_LEX_NAME, k));
		if (gen)
			push(f, sig_feature(F_LEX_GEN, k));
		if (c->prev_person)
			push(f, sig_feature(F_LEX_PREV, k));
		if (!fp && !we && !rel && !name)
			push(f, sig_feature(F_LEX_NOSUBJ, k));
		if (c->question)
			push(f, sig_feature(F_LEX_QUESTION, k));
		if (third && c->prev_person)
			push(f, sig_feature(F_LEX_THIRD_PREV, k));
		if (pet)
			push(f, sig_feature(F_LEX_PET, k));
		if (frame || c->frame_before)
			push(f, sig_feature(F_LEX_FRAME, k));
	}
	if (fp)
		push(f, sig_feature(F_GLOBAL, G_FP));
	if (we)
		push(f, sig_feature(F_GLOBAL, G_WE));
	if (rel)
		push(f, sig_feature(F_GLOBAL, G_REL));
	if (name)
		push(f, sig_feature(F_GLOBAL, G_NAME));
	if (gen)
		push(f, sig_feature(F_GLOBAL, G_GEN));
	if (c->prev_person)
		push(f, sig_feature(F_GLOBAL, G_PREV));
	if (c->question)
		push(f, sig_feature(F_GLOBAL, G_QUESTION));
	if (!cats && fp)
		push(f, sig_feature(F_GLOBAL, G_NOLEX_FP));
	if (!cats && rel)
		push(f, sig_feature(F_GLOBAL, G_NOLEX_REL));
	if (capword)
		push(f, sig_feature(F_GLOBAL, G_CAPWORD));
	if (n_cats >= 1)
		push(f, sig_feature(F_GLOBAL, n_cats == 1 ? G_NLEX1 : n_cats == 2 ? G_NLEX2 : G_NLEX3));
	if (fp && rel)
		push(f, sig_feature(F_GLOBAL, G_FP_REL));
	if (fp && gen)
		push(f, sig_feature(F_GLOBAL, G_FP_GEN));
	if (rel && gen)
		push(f, sig_feature(F_GLOBAL, G_REL_GEN));
	if (pet)
		push(f, sig_feature(F_GLOBAL, G_PET));
	if (c->blanks)
		push(f, sig_feature(F_GLOBAL, G_BLANK));
	if (frame)
		push(f, sig_feature(F_GLOBAL, G_FRAME));
	if (c->frame_before)
		push(f, sig_feature(F_GLOBAL, G_FRAME_BEFORE));
	if ((frame || c->frame_before) && fp)
		push(f, sig_feature(F_GLOBAL, G_FRAME_FP));
	f->person = fp || we || rel || name;
	f->gate = cats || f->person || c->prev_person || implicit;
}

/* Reads the next word at or after *pos, stopping at a sentence end. Returns false at a
 * sentence end (or the end of the text), with *pos past the boundary. */
static bool next_word(const unsigned char *p, size_t n, size_t *pos, struct word *w,
		      const struct word *prev, bool *question)
{
	size_t i = *pos;

	for (;;) {
		if (i >= n) {
			*pos = i;
			return false;
		}
		unsigned char c = p[i];
		if (curly_quote(p, i, n)) {
			i += 3;
			continue;
		}
		/* a placeholder the vault wrote ("⟨BIRTH_DATE_1⟩", "⟨EMAIL_2⟩"): no words of the
		 * text, so the egress worker's scan of redacted text finds nothing in it */
		if (c == 0xe2 && i + 2 < n && p[i + 1] == 0x9f && p[i + 2] == 0xa8) {
			size_t q = i + 3;
			while (q + 2 < n && q - i < 80 &&
			       !(p[q] == 0xe2 && p[q + 1] == 0x9f && p[q + 2] == 0xa9))
				q++;
			if (q + 2 < n && p[q] == 0xe2 && p[q + 1] == 0x9f && p[q + 2] == 0xa9) {
				i = q + 3;
				continue;
			}
		}
		if (word_byte(c))
			break;
		if (c == '\n' || c == '!' || c == ';') {
			*pos = i + 1;
			return false;
		}
		if (c == '?') {
			*question = true;
			*pos = i + 1;
			return false;
		}
		if (c == '.' && (i + 1 >= n || p[i + 1] == ' ' || p[i + 1] == '\n' ||
				 p[i + 1] == '\t' || p[i + 1] == '\r')) {
			/* "Mr. Thompson", "Sig. Rossi": a title's dot does not end the sentence */
			if (!(prev && prev->len <= 4 && (prev->mask & (1u << SIG_NAME)))) {
				*pos = i + 1;
				return false;
			}
		}
		i++;
	}

	uint32_t h = FNV_INIT, pre[32];
	size_t start = i, len = 0, chars, end = word_end(p, i, n, &chars), wd;
	unsigned digits = 0, upper = 0;
	bool fold = chars >= FOLD_MIN_CHARS;
	for (; i < end; i += wd) {
		unsigned char c = fold_at(p, i, end, fold, &wd);
		digits += c >= '0' && c <= '9';
		upper += p[i] >= 'A' && p[i] <= 'Z';
		h = FNV_STEP(h, c);
		len++;
		if (len < 32)
			pre[len] = h;
	}
	*w = (struct word){ .start = (uint32_t) start, .end = (uint32_t) end, .hash = h,
			    .len = (uint8_t) MIN(len, 255u), .digits = (uint8_t) MIN(digits, 255u),
			    .pair_start = (uint32_t) start, .fold = fold };
	w->cap = p[start] >= 'A' && p[start] <= 'Z' && upper < len;
	w->mask = lex_get(lex_key(h, (uint32_t) len, KEY_WORD));
	for (uint32_t pl = prefix_lengths & ((len < 31 ? (2u << len) : 0u) - 1u); pl;
	     pl &= pl - 1) {
		unsigned L = (unsigned) __builtin_ctz(pl);
		w->mask |= lex_get(lex_key(pre[L], L, KEY_PREFIX));
	}
	if (prev) {
		uint32_t m = lex_get(lex_key(pair_hash(prev->hash, h), 0, KEY_PAIR));
		if (m) {
			w->mask |= m;
			w->pair_start = prev->start;
		}
	}
	*pos = i;
	return true;
}

/* The span of the first word of category k in the chunk. */
static bool category_span(const struct chunk *c, unsigned k, size_t *s, size_t *e)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->w[i].mask & (1u << k)) {
			*s = c->w[i].pair_start;
			*e = c->w[i].end;
			return true;
		}
	return false;
}

static bool is_year(const struct chunk *c, const struct word *w)
{
	unsigned y = 0;

	if (w->len != 4 || w->digits != 4)
		return false;
	for (uint32_t k = w->start; k < w->end; k++)
		y = y * 10 + (unsigned) (c->text[k] - '0');
	return y >= 1900 && y <= 2030;
}

/* A lower-case hex token or a part of a UUID ("4c1a8e306c2d", "3f9a1c7e"): a request id or
 * a hash, not a document number. */
static bool hex_id(const struct chunk *c, const struct word *w)
{
	bool lower = false;

	for (uint32_t k = w->start; k < w->end; k++) {
		unsigned char b = c->text[k];
		if (b >= 'a' && b <= 'f')
			lower = true;
		else if (!(b >= '0' && b <= '9'))
			return false;
	}
	return lower || (w->start > 0 && c->text[w->start - 1] == '-') ||
	       (w->end < c->text_len && c->text[w->end] == '-');
}

/* Lower-case letters in the word: a part of a UUID or a hash ("1b4d"), not of an id number
 * written in groups ("JT 48 29 61 B"). */
static bool lower_letters(const struct chunk *c, const struct word *w)
{
	for (uint32_t k = w->start; k < w->end; k++)
		if (c->text[k] >= 'a' && c->text[k] <= 'z')
			return true;
	return false;
}

/* The exact rules: a document word then, within five words, a token of 6+ characters with
 * 5+ digits (gov_id); a birth word then, within eight words, a day (1-2 digits), a month
 * (a number or a name) and a year 1900-2030 (birth_date), in a chunk with a person signal.
 * Spans: the number; the date. */
static int chunk_rules(const struct chunk *c, struct sensitive_finding *out)
{
	int n = 0;
	uint32_t any = c->any;
	bool subject = any & (1u << SIG_FP | 1u << SIG_WE | 1u << SIG_REL | 1u << SIG_NAME);
	/* a date of birth belongs to someone: the writer, a relative, a named person (not
	 * "Einstein was born on 14 March 1879": no person signal, a year before 1900) */
	bool id_done = false, birth_done = false;

	for (size_t i = 0; i < c->n; i++) {
		const struct word *w = &c->w[i];
		if (!id_done && (w->mask & (1u << SIG_DOC)))
			for (size_t j = i + 1; j < c->n && j <= i + 5; j++) {
				const struct word *x = &c->w[j];
				if (x->digits >= 5 && x->len >= 6 && x->len <= 20 &&
				    !hex_id(c, x)) {
					out[n++] = (struct sensitive_finding){
						.category = SENSITIVE_GOV_ID, .start = x->start,
						.end = x->end, .score = 1.0f,
						.layer = SENSITIVE_LAYER_LEXICON };
					id_done = true;
					break;
				}
				/* a number written in groups: "JT 48 29 61 B", "17.482.930-5" */
				/* (groups of three characters at most: four-digit groups are cards,
				 * IBANs and years, found or not by their own detectors) */
				if (x->digits && x->len <= 3 && !lower_letters(c, x)) {
					size_t k = j, digits = 0;
					bool date_like = false;
					while (k < c->n && k <= j + 5 && c->w[k].len <= 3 &&
					       !lower_letters(c, &c->w[k]) &&
					       c->w[k].end - c->w[k].start <= 3 &&
					       (k == j || c->w[k].start - c->w[k - 1].end <= 1)) {
						/* "21/08/2024", "10:14:02": a date or a time */
						if (k > j && (c->text[c->w[k].start - 1] == '/' ||
							      c->text[c->w[k].start - 1] == ':'))
							date_like = true;
						digits += c->w[k].digits;
						k++;
					}
					/* "03.11.2013": day, month, year */
					if (k - j == 3 && c->w[j].len <= 2 && c->w[j + 1].len <= 2 &&
					    is_year(c, &c->w[j + 2]))
						date_like = true;
					if (digits >= 6 && k - j >= 3 && !date_like) {
						out[n++] = (struct sensitive_finding){
							.category = SENSITIVE_GOV_ID,
							.start = x->start, .end = c->w[k - 1].end,
							.score = 1.0f, .layer = SENSITIVE_LAYER_LEXICON };
						id_done = true;
						break;
					}
				}
			}
		if (!birth_done && (w->mask & (1u << SIG_BIRTH)) &&
		    (subject || (w->mask & (1u << SIG_LABEL)))) {
			size_t first = 0, last = 0;
			unsigned small = 0, month = 0, year = 0;
			for (size_t j = i + 1; j < c->n && j <= i + 8; j++) {
				const struct word *x = &c->w[j];
				bool hit = false;
				if (x->digits == x->len && x->len <= 2) {
					small++;
					hit = true;
				} else if (x->mask & (1u << SIG_MONTH)) {
					month++;
					hit = true;
				} else if (is_year(c, x)) {
					year++;
					hit = true;
				}
				if (hit) {
					if (!first)
						first = j;
					last = j;
				}
			}
			if (year && small && (month || small >= 2)) {
				out[n++] = (struct sensitive_finding){
					.category = SENSITIVE_BIRTH_DATE, .start = c->w[first].start,
					.end = c->w[last].end, .score = 1.0f,
					.layer = SENSITIVE_LAYER_LEXICON };
				birth_done = true;
			}
		}
	}
	return n;
}

/* Reads the text chunk by chunk; calls fn with each. */
static void foreach_chunk(const char *text, size_t len,
			  void (*fn)(void *userdata, const struct chunk *c,
				     const struct sensitive_features *f),
			  void *userdata)
{
	const unsigned char *p = (const unsigned char *) text;
	struct chunk c;
	struct sensitive_features f;
	size_t pos = 0;
	bool prev_person = false, frame_seen = false;

	(void) pthread_once(&lex_once, lex_build);
	if (!text)
		return;
	while (pos < len) {
		bool question = false;
		c.text = p;
		c.text_len = len;
		c.n = 0;
		c.any = 0;
		c.start = SIZE_MAX;
		c.prev_person = prev_person;
		c.frame_before = frame_seen;
		while (c.n < SENSITIVE_CHUNK_WORDS &&
		       next_word(p, len, &pos, &c.w[c.n], c.n ? &c.w[c.n - 1] : NULL, &question)) {
			if (c.start == SIZE_MAX)
				c.start = c.w[c.n].start;
			c.any |= c.w[c.n].mask;
			c.n++;
		}
		if (!c.n)
			continue;
		/* "¿" opens a Spanish question */
		if (c.start >= 2 && p[c.start - 2] == 0xc2 && p[c.start - 1] == 0xbf)
			question = true;
		c.question = question;
		c.end = c.w[c.n - 1].end;
		c.blanks = memmem(p + c.start, MIN(len, pos + 8) - c.start, "___", 3) != NULL ||
			   memmem(p + c.start, MIN(len, pos + 8) - c.start, "\xe2\x80\xa6\xe2\x80\xa6", 6) != NULL;
		chunk_features(&c, &f);
		fn(userdata, &c, &f);
		prev_person = f.person;
		frame_seen = frame_seen || (c.any & (1u << SIG_FRAME));
	}
}

struct foreach_public {
	void (*fn)(void *userdata, size_t start, size_t end, const struct sensitive_features *f);
	void *userdata;
};

static void foreach_public_cb(void *userdata, const struct chunk *c,
			      const struct sensitive_features *f)
{
	struct foreach_public *x = userdata;

	x->fn(x->userdata, c->start, c->end, f);
}

void sensitive_foreach_chunk(const char *text, size_t len,
			     void (*fn)(void *userdata, size_t start, size_t end,
					const struct sensitive_features *f),
			     void *userdata)
{
	struct foreach_public x = { fn, userdata };

	foreach_chunk(text, len, foreach_public_cb, &x);
}

/* ---- scoring ---- */

float sensitive_model_logit(const struct sensitive_model *m, const struct sensitive_features *f)
{
	const uint32_t mask = (1u << SENSITIVE_BIN_BITS) - 1;
	int32_t acc_ngram = 0, acc_sig = 0;

	for (size_t i = 0; i < f->n_ngram; i++)
		acc_ngram += m->bin_w[f->h[i] & mask];
	for (size_t i = f->n_ngram; i < f->n; i++)
		acc_sig += m->bin_w[f->h[i] & mask];
	float s = f->n_ngram ? 1.0f / sqrtf((float) f->n_ngram) : 0.0f;
	return m->bin_bias + m->bin_scale * ((float) acc_ngram * s + (float) acc_sig);
}

float sensitive_model_calibrate(const struct sensitive_model *m, float logit)
{
	return 1.0f / (1.0f + expf(-(m->platt_a * logit + m->platt_b)));
}

void sensitive_model_categories(const struct sensitive_model *m,
				const struct sensitive_features *f,
				float p[SENSITIVE_CATEGORY_COUNT_])
{
	const uint32_t mask = (1u << SENSITIVE_CAT_BITS) - 1;
	const size_t K = SENSITIVE_CATEGORY_COUNT_;
	int32_t a_ngram[SENSITIVE_CATEGORY_COUNT_] = { 0 }, a_sig[SENSITIVE_CATEGORY_COUNT_] = { 0 };
	float s = f->n_ngram ? 1.0f / sqrtf((float) f->n_ngram) : 0.0f, mx = -INFINITY, sum = 0;

	for (size_t i = 0; i < f->n; i++) {
		const int8_t *row = m->cat_w + (size_t) (f->h[i] & mask) * K;
		int32_t *a = i < f->n_ngram ? a_ngram : a_sig;
		for (size_t k = 0; k < K; k++)
			a[k] += row[k];
	}
	for (size_t k = 0; k < K; k++) {
		p[k] = m->cat_bias[k] + m->cat_scale * ((float) a_ngram[k] * s + (float) a_sig[k]);
		mx = MAX(mx, p[k]);
	}
	for (size_t k = 0; k < K; k++) {
		p[k] = expf(p[k] - mx);
		sum += p[k];
	}
	for (size_t k = 0; k < K; k++)
		p[k] /= sum;
}

static void add_finding(struct sensitive_result *r, const struct sensitive_finding *x)
{
	if (r->n < SENSITIVE_MAX_FINDINGS)
		r->v[r->n++] = *x;
	else
		r->n_dropped++;
}

struct scan_state {
	const struct sensitive_model *m;
	struct sensitive_result *r;
};

static void scan_chunk(void *userdata, const struct chunk *c, const struct sensitive_features *f)
{
	const struct scan_state *st = userdata;
	const struct sensitive_model *m = st->m;
	struct sensitive_result *r = st->r;
	struct sensitive_finding rules[2];
	int n_rules = chunk_rules(c, rules);
	bool have[SENSITIVE_CATEGORY_COUNT_] = { false };

	for (int i = 0; i < n_rules; i++) {
		add_finding(r, &rules[i]);
		have[rules[i].category] = true;
		r->max_score = 1.0f;
	}
	if (!f->gate)
		return;
	float prob = sensitive_model_calibrate(m, sensitive_model_logit(m, f));
	r->max_score = MAX(r->max_score, prob);
	if (prob < SENSITIVE_THRESHOLD)
		return;

	float pc[SENSITIVE_CATEGORY_COUNT_];
	unsigned top = 0;
	sensitive_model_categories(m, f, pc);
	for (unsigned k = 1; k < SENSITIVE_CATEGORY_COUNT_; k++)
		if (pc[k] > pc[top])
			top = k;
	/* the top category, and a second one the model is nearly as sure of ("my wife is
	 * pregnant and was fired": health and employment) */
	for (unsigned k = 0; k < SENSITIVE_CATEGORY_COUNT_; k++) {
		if (have[k] || (k != top && pc[k] < 0.35f))
			continue;
		struct sensitive_finding x = { .category = (enum sensitive_category) k,
					       .start = c->start, .end = c->end, .score = prob,
					       .layer = SENSITIVE_LAYER_CLASSIFIER };
		category_span(c, k, &x.start, &x.end);
		add_finding(r, &x);
	}
}

void sensitive_scan_model(const struct sensitive_model *m, const char *text, size_t len,
			  struct sensitive_result *ret)
{
	struct scan_state st = { m, ret };

	ret->n = 0;
	ret->n_dropped = 0;
	ret->max_score = 0;
	foreach_chunk(text, len, scan_chunk, &st);
}

void sensitive_scan(const char *text, size_t len, struct sensitive_result *ret)
{
	sensitive_scan_model(&sensitive_builtin_model, text, len, ret);
}
