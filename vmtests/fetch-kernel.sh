#!/usr/bin/env bash
# vmtests/fetch-kernel.sh KERNEL: prints the directory of an extracted Debian
# kernel (with modules.dep), downloading it first if it is not cached. KERNEL: 5.10 (bullseye), 6.1 (bookworm), 6.12
# (trixie) or newest (sid's newest). The directory holds boot/vmlinuz-RELEASE
# and lib/modules/RELEASE whatever the package's layout. The packages come from Debian's mirror
# and are extracted with dpkg-deb under the cache, never installed.
set -euo pipefail
kernel=${1:?usage: fetch-kernel.sh 5.10|6.1|6.12|newest}
mirror=${MLPROF_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${MLPROF_VM_CACHE:-$HOME/.cache/mlflow-profiler-tests/vmtests}
case "$kernel" in
  5.10) suite=bullseye; series='5\.10\.' ;;
  6.1) suite=bookworm; series='6\.1\.' ;;
  6.12) suite=trixie; series='6\.12\.' ;;
  newest) suite=sid; series='' ;;
  *) echo "fetch-kernel.sh: unknown kernel '$kernel' (5.10, 6.1, 6.12 or newest)" >&2; exit 2 ;;
esac
export PATH="$PATH:/usr/sbin:/sbin"  # depmod
for tool in curl xz dpkg-deb depmod; do
  command -v "$tool" >/dev/null || { echo "fetch-kernel.sh: needs $tool (apt-get install curl xz-utils dpkg kmod)" >&2; exit 2; }
done
mkdir -p "$cache/debs"
index="$cache/Packages.$suite"
# The suite's package index, at most a day old.
if [ ! -s "$index" ] || [ -n "$(find "$index" -mmin +1440)" ]; then
  curl -fsS "$mirror/dists/$suite/main/binary-amd64/Packages.xz" | xz -d > "$index.new" \
    || { echo "fetch-kernel.sh: cannot read $mirror/dists/$suite (is the mirror reachable?)" >&2; exit 2; }
  mv "$index.new" "$index"
fi
# field PACKAGE FIELD: a field of a package's stanza in the index.
field() {
  awk -v p="$1" -v f="$2:" '$1 == "Package:" { hit = ($2 == p) } hit && $1 == f { print $2; exit }' "$index"
}
# The newest generic amd64 image of the series (not -rt, not -cloud, not -dbg).
pkg=$(awk '$1 == "Package:" { print $2 }' "$index" \
        | grep -E "^linux-image-${series}[0-9][^ ]*-amd64$" | grep -Ev -- '-(rt|cloud)-' | sort -V | tail -n 1)
[ -n "$pkg" ] || { echo "fetch-kernel.sh: no linux-image for $kernel in $suite" >&2; exit 2; }
release=${pkg#linux-image-}
dir="$cache/$release"
if [ ! -f "$dir/lib/modules/$release/modules.dep" ]; then
  # The image, or (sid) the meta package's parts: the kernel binary and its modules.
  parts=("$pkg")
  if [ "$(field "$pkg" Size)" -lt 1000000 ]; then
    parts=("linux-binary-$release" "linux-modules-$release")
  fi
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp"
  for p in "${parts[@]}"; do
    file=$(field "$p" Filename)
    [ -n "$file" ] || { echo "fetch-kernel.sh: $p is not in $suite's index" >&2; exit 2; }
    deb="$cache/debs/$(basename "$file")"
    if [ ! -s "$deb" ]; then
      curl -fsS -o "$deb.part" "$mirror/$file" || { echo "fetch-kernel.sh: cannot download $mirror/$file" >&2; exit 2; }
      mv "$deb.part" "$deb"
    fi
    dpkg-deb -x "$deb" "$dir.tmp"
  done
  # Newer packages are merged-/usr (usr/lib/modules/R/vmlinuz): one layout for both.
  if [ -d "$dir.tmp/usr/lib/modules" ] && [ ! -e "$dir.tmp/lib" ]; then ln -s usr/lib "$dir.tmp/lib"; fi
  if [ ! -d "$dir.tmp/boot" ]; then
    mkdir -p "$dir.tmp/boot"
    ln -s "../lib/modules/$release/vmlinuz" "$dir.tmp/boot/vmlinuz-$release"
  fi
  # modules.dep: made here, as the package's postinst would on install.
  depmod -b "$dir.tmp" "$release" 2>/dev/null || { echo "fetch-kernel.sh: depmod failed for $release" >&2; exit 2; }
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
echo "$dir"
