#!/usr/bin/env bash
# Builds the agent's container image from a built mlprof-ebpf, the way
# Google's distroless images are built: the root filesystem holds the
# binary and the shared libraries it loads, each copied from the Debian
# package of this host that owns it, with that package's dpkg status entry
# (/var/lib/dpkg/status.d/PKG), the md5sums of the files copied
# (status.d/PKG.md5sums) and its copyright file, so that an image scanner
# (Trivy, Grype, Syft) knows which libcurl, libpq or OpenSSL it carries.
# libbpf, linked in statically, gets the status entry of the libbpf-dev
# package it came from (MLPROF_LIBBPF_DIR/../DEBIAN/control, kept by the
# extraction step of docs/ebpf.md, "Build"). No shell, no package manager,
# no base image pulled: imported with `podman import`, so it also works on a
# host without a registry. deploy/README.md, "Image", says why this form.
#   deploy/build-image.sh build-x/userspace/agent/mlprof-ebpf [IMAGE]   (default localhost/mlprof-ebpf:dev)
# $PODMAN: the podman command to import with (default podman), e.g. the kube
# runner's with its own storage (tests/e2e/test_agent_deploy.py).
# $MLPROF_LIBBPF_DIR: the libbpf the binary was built with (default: the
# binary's CMake cache, else /opt/libbpf-1.4.6/usr).
# $MLPROF_IMAGE_ROOT: also leave the root filesystem in this (empty) directory.
set -euo pipefail
die() { echo "build-image.sh: $*" >&2; exit 1; }
[ $# -ge 1 ] || die "usage: deploy/build-image.sh MLPROF_EBPF [IMAGE]"
agent=$(realpath "$1")
image=${2:-localhost/mlprof-ebpf:dev}
command -v dpkg-query >/dev/null || die "needs dpkg-query: the libraries are taken from this host's Debian packages"

libbpf_dir=${MLPROF_LIBBPF_DIR:-}
if [ -z "$libbpf_dir" ]; then
  d=$(dirname "$agent")
  for _ in 1 2 3 4; do
    if [ -f "$d/CMakeCache.txt" ]; then
      libbpf_dir=$(sed -n 's/^MLPROF_LIBBPF_DIR:[A-Z]*=//p' "$d/CMakeCache.txt")
      break
    fi
    d=$(dirname "$d")
  done
fi
libbpf_dir=${libbpf_dir:-/opt/libbpf-1.4.6/usr}
libbpf_control="$libbpf_dir/../DEBIAN/control"
[ -f "$libbpf_control" ] || die "no $libbpf_control: the image's package list names the libbpf-dev linked into the agent; extract its control file as docs/ebpf.md \"Build\" does (dpkg-deb -e libbpf-dev_*.deb $(dirname "$libbpf_dir")/DEBIAN), or set MLPROF_LIBBPF_DIR"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
chmod 0755 "$root"  # mktemp's 0700 would be the image's /
# Debian 12's merged /usr: /lib is usr/lib, so a library is found under the
# path ldd printed and under the one its package lists.
mkdir -p "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib" "$root/usr/lib64" "$root/var/lib/dpkg/status.d"
for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
install -D -m 0755 "$agent" "$root/usr/local/bin/mlprof-ebpf"

# The other spelling of a path under merged /usr (/lib/x <-> /usr/lib/x).
other_spelling() {
  case "$1" in
    /usr/lib/*|/usr/lib64/*|/usr/bin/*|/usr/sbin/*) echo "${1#/usr}" ;;
    /lib/*|/lib64/*|/bin/*|/sbin/*) echo "/usr$1" ;;
    *) echo "$1" ;;
  esac
}
owner() {  # owner PATH: "pkg:arch" owning PATH (either spelling), or nothing
  local p
  for p in "$1" "$(other_spelling "$1")"; do
    dpkg-query -S "$p" 2>/dev/null | grep -v '^diversion' | head -n 1 | sed 's/: .*//' && return 0
  done
}

declare -A packages=()  # pkg:arch -> the files copied from it (package paths, with a space after each)
# Every library ldd resolves (and the loader): the entries of its package
# that resolve to the same file (the soname link and the file itself),
# copied as the package has them.
for lib in $(ldd "$agent" | grep -o '/[^ ]*'); do
  real=$(realpath -e "$lib")
  pkg=$(owner "$real")
  [ -n "$pkg" ] || die "$lib ($real) belongs to no Debian package: the image would carry a library no scanner can name; install it from Debian"
  found=0
  while IFS= read -r entry; do
    [ -L "$entry" ] || [ -f "$entry" ] || continue
    [ "$(realpath -e "$entry" 2>/dev/null)" = "$real" ] || continue
    mkdir -p "$root$(dirname "$entry")"
    cp -a "$entry" "$root$entry"
    packages[$pkg]+="$entry "
    found=1
  done < <(dpkg-query -L "$pkg" | awk -v a="/$(basename "$lib")" -v b="/$(basename "$real")" \
             'substr($0, length($0) - length(a) + 1) == a || substr($0, length($0) - length(b) + 1) == b')
  [ "$found" = 1 ] || die "$pkg lists no file that is $real"
done

# Each package's status entry, the md5sums of the files copied (dpkg's own
# lines) and its copyright.
add_package() {  # add_package PKG:ARCH [FILES...]
  local pkg=$1 name=${1%%:*} sums f rel
  shift
  dpkg-query -s "$pkg" > "$root/var/lib/dpkg/status.d/$name"
  sums=$(ls /var/lib/dpkg/info/"$name".md5sums /var/lib/dpkg/info/"$pkg".md5sums 2>/dev/null | head -n 1 || true)
  for f in "$@"; do
    [ -L "$f" ] && continue  # md5sums lists files, not links
    rel=${f#/}
    awk -v p="$rel" '$2 == p {print; n++} END {exit n ? 0 : 1}' "$sums" \
      >> "$root/var/lib/dpkg/status.d/$name.md5sums" || die "$pkg's md5sums has no line for $f"
  done
  # /usr/share/doc/PKG may be a link to another package's directory (gcc-12-base's).
  if [ -f "/usr/share/doc/$name/copyright" ]; then
    install -D -m 0644 "/usr/share/doc/$name/copyright" "$root/usr/share/doc/$name/copyright"
  fi
}
for pkg in "${!packages[@]}"; do
  # shellcheck disable=SC2086  # the list is space-separated paths without spaces
  add_package "$pkg" ${packages[$pkg]}
done

# --sink https://: libcurl (OpenSSL) verifies the server against Debian's CA
# bundle, which update-ca-certificates makes from the ca-certificates package.
if [ -f /etc/ssl/certs/ca-certificates.crt ] && dpkg-query -s ca-certificates >/dev/null 2>&1; then
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  add_package ca-certificates
fi

# libbpf-dev: linked into the binary, so no file of it is in the image.
{
  sed -n '1p' "$libbpf_control"
  echo "Status: install ok installed"
  sed -n '2,$p' "$libbpf_control"
} > "$root/var/lib/dpkg/status.d/libbpf-dev"
if [ -f "$libbpf_dir/share/doc/libbpf-dev/copyright" ]; then
  install -D -m 0644 "$libbpf_dir/share/doc/libbpf-dev/copyright" "$root/usr/share/doc/libbpf-dev/copyright"
fi

# Mount points: the read-only root filesystem gets every writable path as a
# volume (deploy/daemonset.yaml): profiles, spool, the health file.
mkdir -p "$root/proc" "$root/sys" "$root/tmp" "$root/var/lib/mlprof/profiles" "$root/var/lib/mlprof/spool" \
  "$root/run/mlprof" "$root/host" "$root/etc"
echo 'root:x:0:0:root:/:/usr/local/bin/mlprof-ebpf' > "$root/etc/passwd"
echo 'root:x:0:' > "$root/etc/group"
if [ -n "${MLPROF_IMAGE_ROOT:-}" ]; then
  cp -a "$root/." "$MLPROF_IMAGE_ROOT"
fi
tar -C "$root" -c . | ${PODMAN:-podman} import \
  --change 'ENTRYPOINT ["/usr/local/bin/mlprof-ebpf"]' \
  --change 'CMD ["--help"]' \
  --message "mlprof-ebpf from $agent" - "$image" >/dev/null
echo "$image"
