#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the text corpus of Molly's own model from installed Debian packages (docs/model.md).
#
#   tools/build-corpus.sh [OUT]        (default build/corpus)
#
# The packages are listed in tools/install-deps.sh (corpus_packages); the extraction, cleaning,
# deduplication and train/held-out split are in tools/corpus-build.py. The same package
# versions give the same bytes: OUT/corpus-split.tsv must then equal the committed
# data/corpus-split.tsv, which this script checks (a difference is reported, not fatal: a newer
# Debian point release may change a man page).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
out=${1:-$root/build/corpus}

mapfile -t pkgs < <(MOLLY_DEPS_LIST=corpus "$here/install-deps.sh")
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "build-corpus: missing packages: ${missing[*]}" >&2
	echo "build-corpus: install them with: MOLLY_DEPS=corpus tools/install-deps.sh" >&2
	exit 1
fi
for t in groff preconv tbl dpkg; do
	command -v "$t" >/dev/null || { echo "build-corpus: $t is missing" >&2; exit 1; }
done

mkdir -p "$out"
# the package versions the corpus came from, next to it
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Package}\t${Version}\n' "$p"
done >"$out/packages.tsv"

LC_ALL=C.UTF-8 /usr/bin/python3 "$here/corpus-build.py" --out "$out"

if [ -f "$root/data/corpus-split.tsv" ]; then
	if cmp -s "$root/data/corpus-split.tsv" "$out/corpus-split.tsv"; then
		echo "build-corpus: split identical to data/corpus-split.tsv"
	else
		echo "build-corpus: WARNING: $out/corpus-split.tsv differs from data/corpus-split.tsv" \
			"(other package versions? compare $out/packages.tsv with data/corpus-sources.md)" >&2
	fi
fi
echo "build-corpus: $(wc -l <"$out/train.jsonl") train and $(wc -l <"$out/heldout.jsonl")" \
	"held-out documents in $out"
