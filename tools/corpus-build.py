#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""corpus-build.py: the text corpus of Molly's own model, from installed Debian packages.

Called by tools/build-corpus.sh (which checks the packages and sets the locale); run it with
Debian's /usr/bin/python3 (standard library only).

Every source is a list of Debian packages read through `dpkg -L` (so only the files those
packages ship, never whatever else shares /usr/share/man), turned into plain text:
  man pages  groff -Tutf8 -man (tbl first), no colour, no overstrike, no hyphenation, 78 columns
  HTML       the text of the body without script/style/navigation, block tags as line breaks
  dictd      each entry of the .dict.dz cut by its .index, the 00-database-* entries dropped
  fortunes   the %-separated cookies; the offensive sets (off/, *-o) are left out
Texts are cleaned (NUL/control bytes dropped, trailing spaces, at most one blank line in a
row), cut at paragraph boundaries into documents of at most CHUNK_MAX bytes, deduplicated by
the SHA-256 of their text (the first in document-id order is kept), and assigned to a split by
that hash: held-out when the first 32 bits modulo 100 are below HELDOUT_PERCENT. A source with
a cap keeps its documents in hash order until the cap (so which ones is stable too).

Determinism: file lists are sorted, no time stamps or random numbers are used, JSON is written
with sorted keys; the same package versions give the same bytes.

Outputs in OUT:
  docs.jsonl        {"id","source","lang","split","text"} for every kept document, id order
  train.jsonl       {"text"} of the train split, in hash order (a fixed shuffle)
  heldout.jsonl     {"text"} of the held-out split, in hash order
  reserved/SRC.jsonl  the reserved sources (never in train or held-out)
  corpus-split.tsv  id, source, lang, split, sha256 (train, heldout, reserved)
  stats.tsv         bytes and documents per source and split
"""
import argparse
import gzip
import hashlib
import html.parser
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

CHUNK_MAX = 8192
HELDOUT_PERCENT = 5

# name, language, kind, packages, path filter (regex on the file path), byte cap (0 = none),
# reserved (kept out of the base model for the domain specialists)
SOURCES = [
    ("man-en", "en", "man", ["manpages"], r"^/usr/share/man/man\d/", 5_000_000, False),
    ("man-dev-en", "en", "man", ["manpages-dev"], r"^/usr/share/man/man\d/", 3_000_000, False),
    ("python-doc-en", "en", "html", ["python3.11-doc"],
     r"^/usr/share/doc/python3\.11/html/(?!genindex|py-modindex|_static)", 5_000_000, False),
    ("debian-reference-en", "en", "html", ["debian-reference-en"], r"\.en\.html$", 0, False),
    ("maint-guide-en", "en", "html", ["maint-guide"], r"\.en\.html$|/html/[^/]*\.html$", 0,
     False),
    ("gcide-en", "en", "dict", ["dict-gcide"], r"/gcide\.dict\.dz$", 4_000_000, False),
    ("foldoc-en", "en", "dict", ["dict-foldoc"], r"/foldoc\.dict\.dz$", 2_000_000, False),
    ("fortunes-en", "en", "fortune", ["fortunes-min", "fortunes"], r"^/usr/share/games/fortunes/[^/]+$",
     0, False),
    ("man-it", "it", "man", ["manpages-it"], r"^/usr/share/man/it/man\d/", 0, False),
    ("debian-reference-it", "it", "html", ["debian-reference-it"], r"\.it\.html$", 0, False),
    ("maint-guide-it", "it", "html", ["maint-guide-it"], r"\.html$", 0, False),
    ("fortunes-it", "it", "fortune", ["fortunes-it"], r"^/usr/share/games/fortunes/it/", 0,
     False),
    ("freedict-eng-ita", "it", "dict", ["dict-freedict-eng-ita", "dict-freedict-ita-eng"],
     r"\.dict\.dz$", 0, False),
    ("man-es", "es", "man", ["manpages-es"], r"^/usr/share/man/es/man\d/", 0, False),
    ("debian-reference-es", "es", "html", ["debian-reference-es"], r"\.es\.html$", 0, False),
    ("maint-guide-es", "es", "html", ["maint-guide-es"], r"\.html$", 0, False),
    ("fortunes-es", "es", "fortune", ["fortunes-es"], r"^/usr/share/games/fortunes/es/", 0,
     False),
    ("freedict-eng-spa", "es", "dict", ["dict-freedict-eng-spa", "dict-freedict-spa-eng"],
     r"\.dict\.dz$", 0, False),
    # reserved for the domain specialists: never in the base model's train or held-out text
    ("jargon-en", "en", "dict", ["dict-jargon"], r"/jargon\.dict\.dz$", 0, True),
    ("elements-en", "en", "dict", ["dict-elements"], r"/elements\.dict\.dz$", 0, True),
]


def package_files(pkg):
    out = subprocess.run(["dpkg", "-L", pkg], check=True, capture_output=True, text=True).stdout
    return sorted(p for p in out.splitlines() if os.path.isfile(p) and not os.path.islink(p))


# ---- cleaning ----

CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean(text):
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ")
    text = CTRL.sub("", text)
    lines = [ln.rstrip() for ln in text.split("\n")]
    out, blank = [], True
    for ln in lines:
        if not ln:
            if not blank:
                out.append("")
            blank = True
            continue
        out.append(ln)
        blank = False
    return "\n".join(out).strip("\n")


def dedent(text, width):
    """Removes up to width leading spaces from every line (man's body indentation)."""
    out = []
    for ln in text.split("\n"):
        n = len(ln) - len(ln.lstrip(" "))
        out.append(ln[min(n, width):])
    return "\n".join(out)


def chunks(text):
    """Cuts text at blank lines (else at line ends) into pieces of at most CHUNK_MAX bytes."""
    paras = text.split("\n\n")
    cur, cur_len = [], 0
    for p in paras:
        b = len(p.encode())
        if b > CHUNK_MAX:  # a huge paragraph: by lines, then by bytes
            if cur:
                yield "\n\n".join(cur)
                cur, cur_len = [], 0
            buf, blen = [], 0
            for ln in p.split("\n"):
                lb = len(ln.encode()) + 1
                if blen + lb > CHUNK_MAX and buf:
                    yield "\n".join(buf)
                    buf, blen = [], 0
                if lb > CHUNK_MAX:
                    raw = ln.encode()
                    for i in range(0, len(raw), CHUNK_MAX):
                        yield raw[i:i + CHUNK_MAX].decode(errors="ignore")
                    continue
                buf.append(ln)
                blen += lb
            if buf:
                yield "\n".join(buf)
            continue
        if cur_len + b + 2 > CHUNK_MAX and cur:
            yield "\n\n".join(cur)
            cur, cur_len = [], 0
        cur.append(p)
        cur_len += b + 2
    if cur:
        yield "\n\n".join(cur)


def decode(raw):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


# ---- extractors: each yields (name, text) ----

def man_pages(path):
    raw = open(path, "rb").read()
    if path.endswith(".gz"):
        raw = gzip.decompress(raw)
    src = decode(raw)
    if re.match(r"\s*\.so\s", src) and len(src) < 200:
        return  # a link to another page
    # groff resolves .so relative to the man tree's root
    root = re.sub(r"/man\d[^/]*/[^/]*$", "", path)
    r = subprocess.run(
        "preconv -e UTF-8 | tbl | groff -Tutf8 -man -P-cbou -rLL=78n -rcR=1 -rHY=0 2>/dev/null",
        shell=True, input=src.encode(), capture_output=True, cwd=root,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
    text = decode(r.stdout)
    lines = text.split("\n")
    # drop the running header and footer lines (page name, section, date)
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) > 2:
        lines = lines[1:-1]
    yield os.path.basename(path), dedent("\n".join(lines), 7)


PRE_MARK = "\x00"  # starts a line of <pre> text; NUL never survives parsing or clean()


class HTMLText(html.parser.HTMLParser):
    BLOCK = {"p", "div", "br", "li", "ul", "ol", "dt", "dd", "dl", "h1", "h2", "h3", "h4", "h5",
             "h6", "pre", "table", "tr", "blockquote", "section", "title", "hr"}
    SKIP = {"script", "style", "head", "nav"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.skip, self.pre, self.skip_tag = [], 0, 0, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if self.skip:
            if tag == self.skip_tag:
                self.skip += 1  # nested inside what is skipped
            return
        if tag in self.SKIP or (tag == "div" and set((a.get("class") or "").split()) &
                                {"related", "sphinxsidebar", "navheader", "navfooter",
                                 "footer", "toc", "mobile-nav"}):
            self.skip, self.skip_tag = 1, tag
            return
        if tag in self.BLOCK:
            self.out.append("\n\n" if tag.startswith("h") or tag == "p" else "\n")
        if tag == "pre":
            self.pre += 1
            self.out.append(PRE_MARK)

    def handle_endtag(self, tag):
        if self.skip:
            if tag == self.skip_tag:
                self.skip -= 1
            return
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if self.skip:
            return
        if self.pre:
            data = data.replace("\n", "\n" + PRE_MARK)  # these lines keep their spaces
        else:
            data = re.sub(r"\s+", " ", data)
        self.out.append(data)

    def text(self):
        t = "".join(self.out).replace("\u00b6", "")  # Sphinx's heading anchors
        return "\n".join(ln.replace(PRE_MARK, "") if ln.startswith(PRE_MARK) else ln.strip()
                         for ln in t.split("\n"))


def html_pages(path):
    p = HTMLText()
    p.feed(decode(open(path, "rb").read()))
    p.close()
    yield os.path.basename(path), p.text()


def dict_entries(path):
    data = gzip.decompress(open(path, "rb").read())
    index = path[:-len(".dict.dz")] + ".index"
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def num(s):
        v = 0
        for c in s:
            v = v * 64 + b64.index(c)
        return v

    gcide = os.path.basename(path) == "gcide.dict.dz"
    seen = set()
    entries = []
    for ln in open(index, encoding="utf-8", errors="replace"):
        f = ln.rstrip("\n").split("\t")
        if len(f) < 3 or f[0].startswith("00"):  # 00-database-*, 00-gcide-*: metadata
            continue
        off, size = num(f[1]), num(f[2])
        if (off, size) in seen:
            continue
        seen.add((off, size))
        entries.append((off, size))
    entries.sort()
    # consecutive entries grouped into documents of about CHUNK_MAX / 2 bytes
    group, glen, n = [], 0, 0
    for off, size in entries:
        t = decode(data[off:off + size]).strip("\n")
        if gcide:  # pronunciation markup (\Ab"di*ca`tor\) and source tags
            t = re.sub(r" \\[^\\\n]+\\", "", t)
            t = re.sub(r"\n *\[(1913 Webster|WordNet 1\.5|PJC)[^]\n]*\]", "", t)
        group.append(t)
        glen += len(t) + 2
        if glen >= CHUNK_MAX // 2:
            yield "%s:%06d" % (os.path.basename(path), n), "\n\n".join(group)
            group, glen, n = [], 0, n + 1
    if group:
        yield "%s:%06d" % (os.path.basename(path), n), "\n\n".join(group)


def fortune_cookies(path):
    base = os.path.basename(path)
    if ("/off/" in path or base.endswith((".dat", ".u8", "-o")) or "." in base and
            not base.endswith(".fortunes")):
        return
    text = decode(open(path, "rb").read())
    cookies = [c.strip("\n") for c in re.split(r"^%\s*$", text, flags=re.M)]
    group, glen, n = [], 0, 0
    for c in cookies:
        if not c.strip():
            continue
        group.append(c)
        glen += len(c) + 2
        if glen >= CHUNK_MAX // 2:
            yield "%s:%04d" % (base, n), "\n\n".join(group)
            group, glen, n = [], 0, n + 1
    if group:
        yield "%s:%04d" % (base, n), "\n\n".join(group)


EXTRACT = {"man": man_pages, "html": html_pages, "dict": dict_entries, "fortune": fortune_cookies}


def source_docs(src):
    name, lang, kind, pkgs, pattern, cap, reserved = src
    rx = re.compile(pattern)
    files = sorted({f for p in pkgs for f in package_files(p) if rx.search(f)})
    if kind == "html":
        files = [f for f in files if f.endswith(".html")]
    if kind == "man":
        files = [f for f in files if re.search(r"\.\d\w*(\.gz)?$", f)]

    def one(f):
        out = []
        for sub, text in EXTRACT[kind](f):
            text = clean(text)
            for i, c in enumerate(chunks(text)):
                c = c.strip("\n")
                if len(c.encode()) < 64:  # nothing worth learning from
                    continue
                out.append(("%s/%s#%d" % (name, sub, i), c))
        return out

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        results = list(ex.map(one, files))
    docs = [d for r in results for d in r]
    docs.sort()
    return docs


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sources-only", action="store_true", help="print the source table")
    args = ap.parse_args()

    if args.sources_only:
        for s in SOURCES:
            print("\t".join([s[0], s[1], ",".join(s[3]), str(s[5]), "reserved" if s[6] else ""]))
        return 0

    os.makedirs(os.path.join(args.out, "reserved"), exist_ok=True)
    seen = set()
    rows = []  # (id, source, lang, split, hash, text)
    for src in SOURCES:
        name, lang, _, _, _, cap, reserved = src
        docs = source_docs(src)
        kept = []
        for did, text in docs:
            h = sha(text)
            if h in seen:
                continue
            seen.add(h)
            kept.append((h, did, text))
        if cap:
            kept.sort()
            total, capped = 0, []
            for h, did, text in kept:
                if total >= cap:
                    break
                capped.append((h, did, text))
                total += len(text.encode())
            kept = capped
        for h, did, text in kept:
            if reserved:
                split = "reserved"
            else:
                split = "heldout" if int(h[:8], 16) % 100 < HELDOUT_PERCENT else "train"
            rows.append((did, name, lang, split, h, text))
        print("corpus: %-20s %6d documents %10d bytes" %
              (name, len(kept), sum(len(t.encode()) for _, _, t in kept)), file=sys.stderr)
    rows.sort()

    def dump(path, items, meta):
        with open(path, "w", encoding="utf-8") as f:
            for r in items:
                obj = {"text": r[5]}
                if meta:
                    obj.update(id=r[0], source=r[1], lang=r[2], split=r[3])
                f.write(json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n")

    dump(os.path.join(args.out, "docs.jsonl"), [r for r in rows if r[3] != "reserved"], True)
    by_hash = sorted(rows, key=lambda r: (r[4], r[0]))
    dump(os.path.join(args.out, "train.jsonl"), [r for r in by_hash if r[3] == "train"], False)
    dump(os.path.join(args.out, "heldout.jsonl"), [r for r in by_hash if r[3] == "heldout"],
         False)
    for src in SOURCES:
        if src[6]:
            dump(os.path.join(args.out, "reserved", src[0] + ".jsonl"),
                 [r for r in rows if r[1] == src[0]], True)
    with open(os.path.join(args.out, "corpus-split.tsv"), "w", encoding="utf-8") as f:
        f.write("# id\tsource\tlang\tsplit\tsha256\n")
        for r in rows:
            f.write("\t".join(r[:5]) + "\n")
    stats = {}
    for r in rows:
        s = stats.setdefault((r[1], r[2], r[3]), [0, 0])
        s[0] += 1
        s[1] += len(r[5].encode())
    with open(os.path.join(args.out, "stats.tsv"), "w", encoding="utf-8") as f:
        f.write("# source\tlang\tsplit\tdocuments\tbytes\n")
        for k in sorted(stats):
            f.write("%s\t%s\t%s\t%d\t%d\n" % (k + tuple(stats[k])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
