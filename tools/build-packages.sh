#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds Molly's distribution packages from this tree:
#   tools/build-packages.sh [--deb] [--rpm] [--out DIR] [--check] [--version V]
#                           [--upgrade-to V2] [--no-deps]
# --deb: the Debian binary packages (debian/, dpkg-buildpackage -us -uc -b); --rpm: the RPMs
# (packaging/rpm/molly.spec, rpmbuild -bb); neither: both. Output in --out (default
# build/packages/). The tree is exported first (git's tracked and untracked-but-not-ignored
# files, or, without .git, everything but build/), so a dirty build directory never leaks in.
# The test suite is not run (DEB_BUILD_OPTIONS=nocheck, rpmbuild --nocheck) unless --check.
# --version V builds the tree as version V (a changelog entry is added to the export): the
# upgrade test builds V and V+1 from one tree; --upgrade-to V2 packages the same build once
# more as V2 (a second changelog entry, dpkg-buildpackage -nc: no rebuild), so an upgrade can be
# tested without compiling twice. Build dependencies come from
# tools/install-deps.sh (--packages); --no-deps skips that.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)

want_deb=0 want_rpm=0 out= check=0 version= deps=1 upgrade_to=
while (($#)); do
	case $1 in
	--deb) want_deb=1 ;;
	--rpm) want_rpm=1 ;;
	--out) out=${2:?--out needs a directory}; shift ;;
	--out=*) out=${1#--out=} ;;
	--check) check=1 ;;
	--version) version=${2:?--version needs a version}; shift ;;
	--version=*) version=${1#--version=} ;;
	--upgrade-to) upgrade_to=${2:?--upgrade-to needs a version}; shift ;;
	--upgrade-to=*) upgrade_to=${1#--upgrade-to=} ;;
	--no-deps) deps=0 ;;
	-h | --help) sed -n '3,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "build-packages: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
	shift
done
((want_deb || want_rpm)) || want_deb=1 want_rpm=1
out=${out:-$src/build/packages}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if ((deps)); then
	"$src/tools/install-deps.sh" --packages
fi

# The project's version (CMakeLists.txt) unless --version names another.
upstream=$(sed -n 's/^project(molly VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
version=${version:-$upstream}
for v in "$version" $upgrade_to; do
	[[ $v =~ ^[0-9][0-9A-Za-z.+~]*$ ]] || { echo "build-packages: bad version '$v'" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/molly-pkg.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/molly-$version
mkdir -p "$tree"

# export: a clean copy of the sources
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	(cd "$src" && git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
		tar --null -T - -cf -) | tar -C "$tree" -xf -
else
	tar -C "$src" --exclude=./build --exclude='./obj-*' --exclude=./debian/.debhelper \
		--exclude=./debian/tmp -cf - . | tar -C "$tree" -xf -
fi
echo "build-packages: exported $(find "$tree" -type f | wc -l) files as molly-$version"

jobs=$(nproc)
if ((want_deb)); then
	# changelog_entry V: a changelog entry for version V on top (dch is in devscripts; not
	# needed for this)
	changelog_entry() {
		head -1 "$tree/debian/changelog" | grep -q "($1)" && return
		{
			echo "molly ($1) unstable; urgency=medium"
			echo
			echo "  * Built by tools/build-packages.sh as version $1."
			echo
			echo " -- Molly developers <molly-devel@example.org>  $(date -R)"
			echo
			cat "$tree/debian/changelog"
		} >"$work/changelog" && mv "$work/changelog" "$tree/debian/changelog"
	}
	opts="parallel=$jobs"
	((check)) || opts="nocheck $opts"
	changelog_entry "$version"
	echo "build-packages: dpkg-buildpackage (DEB_BUILD_OPTIONS='$opts')"
	(cd "$tree" && DEB_BUILD_OPTIONS=$opts dpkg-buildpackage -us -uc -b >"$work/deb.log" 2>&1) ||
		{ tail -60 "$work/deb.log" >&2; echo "build-packages: dpkg-buildpackage failed" >&2; exit 1; }
	cp "$work/deb.log" "$out/dpkg-buildpackage.log"
	mv "$work"/*.deb "$out"/
	mv "$work"/*.changes "$work"/*.buildinfo "$out"/ 2>/dev/null || true
	ls "$out"/*_"$version"_*.deb
	if [ -n "$upgrade_to" ]; then
		changelog_entry "$upgrade_to"
		rm -f "$tree/debian/files" # the first build's list, whose files moved to $out
		echo "build-packages: the same build packaged as $upgrade_to (dpkg-buildpackage -nc)"
		(cd "$tree" && DEB_BUILD_OPTIONS=$opts dpkg-buildpackage -us -uc -b -nc >"$work/deb2.log" 2>&1) ||
			{ tail -60 "$work/deb2.log" >&2; echo "build-packages: dpkg-buildpackage -nc failed" >&2; exit 1; }
		mv "$work"/*.deb "$out"/
		mv "$work"/*.changes "$work"/*.buildinfo "$out"/ 2>/dev/null || true
		ls "$out"/*_"$upgrade_to"_*.deb
	fi
fi

if ((want_rpm)); then
	top=$work/rpm
	mkdir -p "$top"/{SOURCES,SPECS,BUILD,RPMS,SRPMS}
	tar -C "$work" -czf "$top/SOURCES/molly-$version.tar.gz" "molly-$version"
	cp "$tree/packaging/rpm/molly.spec" "$top/SPECS/"
	args=(--define "_topdir $top" --define "molly_version $version" --define "_smp_mflags -j$jobs")
	if ((check)); then args+=(--with check); else args+=(--nocheck); fi
	# Debian's rpm: its dependency database is empty, so BuildRequires cannot be checked here
	# (tools/install-deps.sh installed the Debian equivalents).
	[ -f /etc/debian_version ] && args+=(--nodeps)
	echo "build-packages: rpmbuild -bb"
	rpmbuild -bb "${args[@]}" "$top/SPECS/molly.spec" >"$work/rpm.log" 2>&1 ||
		{ tail -60 "$work/rpm.log" >&2; echo "build-packages: rpmbuild failed" >&2; exit 1; }
	cp "$work/rpm.log" "$out/rpmbuild.log"
	find "$top/RPMS" -name '*.rpm' -exec mv {} "$out"/ \;
	ls "$out"/*-"$version"-*.rpm
fi
