#!/bin/bash
# SPDX-License-Identifier: MIT
# tool-corpus: the extraction and cleaning steps of tools/corpus-build.py on inputs written
# here (no corpus packages needed): man page rendering (when groff is installed), HTML without
# navigation, dictd entries cut by their index, fortune cookies, cleaning, chunking at
# paragraph boundaries, and the hash split rule; plus that the source table names the reserved
# sources and that every corpus package is in tools/install-deps.sh's corpus list.
set -u
src=${MOLLY_SOURCE_DIR:?}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$py" - "$src/tools/corpus-build.py" "$tmp" <<'PY' || exit 1
import base64, gzip, hashlib, importlib.util, os, shutil, sys

spec = importlib.util.spec_from_file_location("cb", sys.argv[1])
cb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cb)
tmp = sys.argv[2]
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


# cleaning: controls out, tabs, trailing spaces, one blank line at most
t = cb.clean("a\x01b\tc  \r\n\n\n\nd\x7f\n\n")
check(t == "ab    c\n\nd", "clean: %r" % t)

# chunks: at most CHUNK_MAX bytes, cut between paragraphs, nothing lost
paras = ["paragraph %d " % i + "é" * (300 + 37 * i) for i in range(60)]
text = "\n\n".join(paras)
parts = list(cb.chunks(text))
check(all(len(p.encode()) <= cb.CHUNK_MAX for p in parts), "chunk over the limit")
check("\n\n".join(parts) == text, "chunks do not add up to the text")
check(all(p.startswith("paragraph") for p in parts), "a chunk starts mid-paragraph")
huge = "x" * (3 * cb.CHUNK_MAX)
check(all(len(p.encode()) <= cb.CHUNK_MAX for p in cb.chunks(huge)), "huge line")

# HTML: navigation and scripts out, <pre> kept, Sphinx anchors out
html = os.path.join(tmp, "p.html")
open(html, "w").write(
    "<html><head><title>T</title><style>x{}</style></head><body>"
    "<div class='related' role='navigation'><div>Docs »</div><ul><li>Index</li></ul></div>"
    "<h1>Title<a class='headerlink'>\u00b6</a></h1><p>One   <b>two</b>\nthree.</p>"
    "<pre>  indented\n    code</pre><script>var x;</script>"
    "<div class='footer'>© footer</div></body></html>")
t = cb.clean(next(cb.html_pages(html))[1])
check("Docs" not in t and "Index" not in t and "footer" not in t and "var x" not in t,
      "html: navigation left in: %r" % t)
check("Title\n\nOne two three." in t and "  indented\n    code" in t, "html text: %r" % t)
check("\u00b6" not in t, "html: anchor left in")

# dictd: entries by the index, metadata entries out, grouped in order
entries = [("00-database-url", "url of it\n"), ("apple", "apple\n   a fruit\n"),
           ("bee", "bee\n   an insect\n")]
b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def enc(v):
    s = ""
    while True:
        s = b64[v % 64] + s
        v //= 64
        if not v:
            return s


data, index, off = b"", "", 0
for word, body in entries:
    raw = body.encode()
    index += "%s\t%s\t%s\n" % (word, enc(off), enc(len(raw)))
    data += raw
    off += len(raw)
with gzip.open(os.path.join(tmp, "t.dict.dz"), "wb") as f:
    f.write(data)
open(os.path.join(tmp, "t.index"), "w").write(index)
docs = list(cb.dict_entries(os.path.join(tmp, "t.dict.dz")))
check(len(docs) == 1 and docs[0][1] == "apple\n   a fruit\n\nbee\n   an insect",
      "dict: %r" % docs)

# fortunes: cookies split on %, offensive sets skipped
os.makedirs(os.path.join(tmp, "off"))
for d in ("", "off"):
    open(os.path.join(tmp, d, "wit"), "w").write("First.\n%\nSecond\n  -- someone\n%\n")
docs = list(cb.fortune_cookies(os.path.join(tmp, "wit")))
check(len(docs) == 1 and docs[0][1] == "First.\n\nSecond\n  -- someone", "fortune: %r" % docs)
check(list(cb.fortune_cookies(os.path.join(tmp, "off", "wit"))) == [], "off/ not skipped")

# man pages (groff is in the corpus packages; the rest of this test does not need it)
if shutil.which("groff") and shutil.which("preconv") and shutil.which("tbl"):
    mdir = os.path.join(tmp, "man", "man1")
    os.makedirs(mdir)
    page = os.path.join(mdir, "demo.1")
    open(page, "w").write(".TH DEMO 1 2024-01-01 \"demo 1.0\"\n.SH NAME\ndemo \\- shows "
                          "things\n.SH DESCRIPTION\n.B demo\nprints \\fIcaffè\\fP and "
                          "exits.\n")
    t = cb.clean(next(cb.man_pages(page))[1])
    check(t.startswith("NAME\ndemo - shows things") or t.startswith("NAME\ndemo \u2010 shows"),
          "man: %r" % t)
    check("demo prints caffè and exits." in t and "\b" not in t and "\x1b" not in t,
          "man body: %r" % t)
    check("DEMO(1)" not in t, "man: header or footer left in")
else:
    print("note: groff is not installed: the man page step was not run")

# the split rule: 5 in 100 by the first 32 bits of the hash
held = sum(int(hashlib.sha256(b"%d" % i).hexdigest()[:8], 16) % 100 < cb.HELDOUT_PERCENT
           for i in range(20000))
check(800 < held < 1200, "held-out share %d of 20000" % held)

names = [s[0] for s in cb.SOURCES]
check(len(set(names)) == len(names), "source names repeat")
check(sorted(s[0] for s in cb.SOURCES if s[6]) == ["elements-en", "jargon-en"],
      "reserved sources")
check({s[1] for s in cb.SOURCES} == {"en", "it", "es"}, "languages")
with open(os.path.join(tmp, "pkgs"), "w") as f:
    for s in cb.SOURCES:
        for p in s[3]:
            f.write(p + "\n")
sys.exit(1 if failures else 0)
PY

listed=$(MOLLY_DEPS_LIST=corpus "$src/tools/install-deps.sh")
while read -r p; do
	grep -qx -- "$p" <<<"$listed" || { echo "FAIL: $p is not in install-deps.sh's corpus list"; exit 1; }
done <"$tmp/pkgs"
echo ok
