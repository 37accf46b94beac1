#!/usr/bin/env bash
# make deb: build/rdcp_VERSION_ARCH.deb with dpkg-deb from a staged
# install (make install DESTDIR=...): programs (stripped), man pages, docs,
# systemd units, bash completion. Depends: what dpkg-shlibdeps finds the
# programs linked with, and the package of the libarchive that rdcp loads
# with dlopen (sync/archive/larchive.c: no linker or dpkg-shlibdeps sees it).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
VERSION=${VERSION:?}
ARCH=$(dpkg --print-architecture)
OUT=${DEB_OUT:-$BUILD}   # where the .deb goes (and the staging, in OUT/deb)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
work=$OUT/deb
stage=$work/root
rm -rf "$work"
mkdir -p "$stage/DEBIAN" "$work/shlibs/debian"

make --no-print-directory -s install PREFIX=/usr DESTDIR="$stage" BUILD="$BUILD" >/dev/null
strip --strip-unneeded "$stage"/usr/bin/*
# rdcp-mpi.so: loaded only under mpirun; Open MPI is a Suggests, not a
# Depends (dpkg-shlibdeps reads the programs only)
[ ! -d "$stage/usr/lib/rdcp" ] || strip --strip-unneeded "$stage"/usr/lib/rdcp/*.so
gzip -9n "$stage"/usr/share/man/man1/*.1
# Debian's place for the licence
cp LICENSE "$stage/usr/share/doc/rdcp/copyright"

# dpkg-shlibdeps needs a debian/control to run in; it reads nothing from it
printf 'Source: rdcp\n\nPackage: rdcp\nArchitecture: any\n' >"$work/shlibs/debian/control"
bins=()
for b in "$stage"/usr/bin/*; do bins+=("$b"); done
depends=$(cd "$work/shlibs" && dpkg-shlibdeps -O "${bins[@]}" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "deb: dpkg-shlibdeps found no libraries" >&2; exit 1; }
# libarchive: dlopen'd by its soname (the Makefile's LARCHIVE_SONAME)
# (no pipe here stops reading early: under pipefail the writer's SIGPIPE
# would end the script without a word)
soname=$(strings "$BUILD/rdcp" | grep -E '^libarchive\.so\.[0-9]+$' | sed -n 1p) || true
if [ -n "$soname" ]; then
	lib=$(ldconfig -p | awk -v s="$soname" '$1 == s && !f { print $NF; f = 1 }')
	pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | sed -n 1p | cut -d: -f1)
	[ -n "$pkg" ] || { echo "deb: no package holds $soname ($lib)" >&2; exit 1; }
	depends="$depends, $pkg"
fi

size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s|@VERSION@|$VERSION|" -e "s|@ARCH@|$ARCH|" -e "s|@SIZE@|$size|" \
    -e "s|@DEPENDS@|$depends|" packaging/debian/control.in >"$stage/DEBIAN/control"
# systemd: the units are new to the system manager after an install
cat >"$stage/DEBIAN/postinst" <<'SH'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	systemd-tmpfiles --create rdcp.conf >/dev/null 2>&1 || true   # the lock file
fi
SH
chmod 755 "$stage/DEBIAN/postinst"
deb=$OUT/rdcp_${VERSION}_${ARCH}.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "deb: $deb"
dpkg-deb -f "$deb" Package Version Depends
