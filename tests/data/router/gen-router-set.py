#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes the router's small labelled set: exemplars.tsv (what each adapter's metadata would
carry: a few example prompts per domain) and heldout.tsv (prompts the classifier never sees
in training: a random split of the same pool of template x topic prompts), one "DOMAIN<TAB>PROMPT" a
line. Deterministic (fixed seed), stdlib only:  ./gen-router-set.py [OUTDIR]"""
import random
import sys
import os

TOPICS = {
    "cooking": ["sourdough bread", "risotto", "a roast chicken", "pasta carbonara",
                "a chocolate cake", "pancakes", "beef stew", "vegetable curry", "pizza dough",
                "a sauce for steak", "scrambled eggs", "lentil soup", "pie crust", "salmon",
                "garlic butter", "a vinaigrette", "tomato sauce", "croissants", "dumplings",
                "brown rice", "the oven temperature for cookies", "marinated tofu"],
    "law": ["a rental contract", "an employment contract", "a non-compete clause",
            "a small claims court filing", "a tenant eviction notice", "copyright on photos",
            "a will and testament", "a liability waiver", "GDPR obligations for a shop",
            "a trademark dispute", "a breach of contract", "a power of attorney",
            "custody after a divorce", "a court appeal deadline", "a notary deed",
            "an unfair dismissal claim", "a lease termination", "jury duty exemptions"],
    "medicine": ["a persistent cough", "high blood pressure", "type 2 diabetes", "a migraine",
                 "ibuprofen dosage", "a sprained ankle", "a fever in a child",
                 "cholesterol levels", "an allergic reaction", "antibiotics for a sinus infection",
                 "insomnia", "a skin rash", "vaccination schedules", "chest pain symptoms",
                 "iron deficiency anemia", "asthma inhalers", "a vitamin D deficiency",
                 "recovery after knee surgery"],
    "code": ["a Python function", "a segfault in C", "a SQL query", "a JavaScript promise",
             "a Rust borrow checker error", "a bash script", "a REST API endpoint",
             "a unit test", "a memory leak", "a regular expression", "a git merge conflict",
             "a linked list", "a race condition between threads", "a Makefile", "a React component",
             "a compiler warning", "a hash map implementation", "a recursive function"],
    "finance": ["an index fund", "a mortgage rate", "a retirement account", "stock dividends",
                "capital gains tax", "a personal budget", "an emergency fund",
                "compound interest", "a credit card debt", "bond yields", "an ETF portfolio",
                "inflation and savings", "a car loan", "a small business cash flow",
                "currency exchange fees", "a pension plan", "diversifying investments",
                "a credit score"],
}

# Per-domain phrasing a user of that domain would use (kept separate between the two
# files so the held-out prompts are not the exemplars reworded).
VERBS = {
    "cooking": (["How do I cook {t}?", "Give me a recipe for {t}.",
                 "What ingredients do I need for {t}?", "How long should I bake {t}?"],
                ["My {t} came out bland, how can I season it better?",
                 "Can I prepare {t} the day before the dinner?",
                 "What can I substitute in {t} if I have no butter?",
                 "Why does my {t} stick to the pan when I fry it?",
                 "Step by step, how do I make {t} at home?"]),
    "law": (["Is {t} legally binding?", "What are my rights regarding {t}?",
             "Explain the legal requirements for {t}.", "Do I need a lawyer for {t}?"],
            ["My landlord mentioned {t}; what does the law say about it?",
             "Can a court enforce {t} in my state?",
             "What happens legally if the other party ignores {t}?",
             "Which statute governs {t} and what are the penalties?",
             "Draft a short clause about {t} for an agreement."]),
    "medicine": (["What are the symptoms of {t}?", "How is {t} treated?",
                  "Should I see a doctor about {t}?", "What causes {t}?"],
                 ["My doctor prescribed something for {t}; are there side effects?",
                  "Is {t} dangerous for a patient over sixty?",
                  "What medication helps with {t} and what dose is safe?",
                  "How do clinicians diagnose {t}?",
                  "What should I tell the nurse about {t}?"]),
    "code": (["Write {t} that sorts an array.", "Why does {t} fail to compile?",
              "How do I debug {t}?", "Refactor {t} to be faster."],
             ["Here is {t}; the program crashes with an exception, how do I fix the bug?",
              "Explain how {t} works and show example code.",
              "My {t} returns null in production; what is wrong with the code?",
              "Implement {t} with error handling and tests.",
              "Review {t} for performance problems in the loop."]),
    "finance": (["Should I invest in {t}?", "How does {t} work?",
                 "What are the risks of {t}?", "How is {t} taxed?"],
                ["I have savings of 20000 dollars; is {t} a good idea this year?",
                 "Compare the returns of {t} with keeping money in a bank.",
                 "How much interest would I pay on {t} over ten years?",
                 "What fees should I watch for with {t}?",
                 "Explain {t} to someone planning their retirement."]),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rng = random.Random(7)
    ex, held = [], []
    for dom, topics in TOPICS.items():
        # One pool per domain (every topic in every phrasing), split at random: the held-out
        # prompts come from the same distribution but are never exemplars.
        pool = [v.format(t=t) for t in topics for v in VERBS[dom][0] + VERBS[dom][1]]
        rng.shuffle(pool)
        ex += [(dom, p) for p in pool[:20]]
        held += [(dom, p) for p in pool[20:50]]
    rng.shuffle(held)
    for name, rows in (("exemplars.tsv", ex), ("heldout.tsv", held)):
        with open(os.path.join(out, name), "w") as f:
            f.write("# generated by gen-router-set.py: DOMAIN<TAB>PROMPT\n")
            for d, p in rows:
                f.write(f"{d}\t{p}\n")


if __name__ == "__main__":
    main()
