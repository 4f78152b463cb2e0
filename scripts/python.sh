#!/usr/bin/env bash
# scripts/python.sh X.Y[t]: prints the path of a CPython X.Y interpreter,
# installing it first if needed; quiet otherwise (build logs go to a file).
#   3.9 - 3.13   pyenv's newest installed X.Y (~/.pyenv/versions)
#   3.14, 3.15   built from Debian sid's source package (the upstream
#                .orig tarball), at -O2 without PGO, LTO or -g, into
#                ~/.cache/mlflow-profiler-tests/cpython-X.Y
#   3.14t        the same source, free-threaded (--disable-gil), into cpython-3.14t
# A second call is instant. The deb-src lookup uses a private apt
# configuration (its own sources list, lists and cache directories): sid is
# never added to the system's sources, and nothing on the system is upgraded.
set -euo pipefail
want=${1:?usage: scripts/python.sh X.Y[t]}
cache=${MLPROF_PYTHON_CACHE:-$HOME/.cache/mlflow-profiler-tests}

case "$want" in
  3.9|3.10|3.11|3.12|3.13)
    # shellcheck disable=SC2012  # ls: pyenv's own directory names, sorted by version
    py=$(ls -d "$HOME"/.pyenv/versions/"$want".*/bin/python 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -z "$py" ]; then
      command -v pyenv >/dev/null || { echo "python.sh: no CPython $want under ~/.pyenv and no pyenv to install it" >&2; exit 1; }
      latest=$(pyenv install --list | tr -d ' ' | grep -E "^$want\.[0-9]+$" | sort -V | tail -n 1)
      pyenv install -s "$latest" >&2
      py="$HOME/.pyenv/versions/$latest/bin/python"
    fi
    echo "$py"
    exit 0
    ;;
  3.14|3.15|3.14t) ;;
  *) echo "python.sh: unsupported version '$want' (3.9 to 3.15, or 3.14t)" >&2; exit 2 ;;
esac

ver=${want%t}
prefix="$cache/cpython-$want"
py="$prefix/bin/python$want"
if [ -x "$py" ] && "$py" -c 'import ssl, sqlite3, zlib, ctypes' 2>/dev/null; then
  echo "$py"
  exit 0
fi

mkdir -p "$cache"
log="$cache/cpython-$want.log"
: > "$log"
# Serialize: CI and the matrix may ask for the same version at once.
exec 9>"$cache/cpython-$want.lock"
flock 9
if [ -x "$py" ] && "$py" -c 'import ssl, sqlite3, zlib, ctypes' 2>/dev/null; then echo "$py"; exit 0; fi

# Build headers from the base system's own suite (bookworm). Only missing
# packages are installed, and nothing installed is upgraded.
deps=(build-essential pkg-config libssl-dev libffi-dev zlib1g-dev libbz2-dev liblzma-dev
      libsqlite3-dev libreadline-dev libncurses-dev uuid-dev xz-utils unzip curl)
missing=()
for d in "${deps[@]}"; do dpkg -s "$d" >/dev/null 2>&1 || missing+=("$d"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >>"$log" 2>&1
  apt-get install -y -qq --no-upgrade "${missing[@]}" >>"$log" 2>&1
fi

# The source: Debian sid's source package (its .orig tarball is the upstream
# release), through a private apt configuration.
src="$cache/src-$want"
rm -rf "$src" && mkdir -p "$src"
apt_dir="$cache/apt-sid-src"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/etc"
printf 'deb-src http://deb.debian.org/debian sid main\n' > "$apt_dir/etc/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/etc/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o "Dir::State::status=/var/lib/dpkg/status" -o "APT::Sandbox::User=root")
tree=""
if apt-get "${apt_opts[@]}" update -qq >>"$log" 2>&1 &&
   (cd "$src" && apt-get "${apt_opts[@]}" source --download-only "python$ver" >>"$log" 2>&1); then
  # shellcheck disable=SC2012  # ls: the one tarball apt-get source just wrote
  tarball=$(ls "$src"/python"$ver"_*.orig.tar.* | head -n 1)
  mkdir -p "$src/tree" && tar -xf "$tarball" -C "$src/tree" --strip-components=1
  tree="$src/tree"
  origin="Debian sid source package $(basename "$tarball")"
else
  # This workplace's Debian mirror answers 404 for these source files
  # (checked 2026-11-25; the binary packages are served). The same upstream
  # release tree comes from the Go module proxy, which serves tags of
  # github.com/python/cpython as module zips; pinned by SHA-256.
  case "$ver" in
    3.14) mod="v3.14.7+incompatible"; tag=v3.14.7; sum=e79b1270b4b62593f6686c8db8edd384b4a9b14e5824a8c9fce0a95656dd6321 ;;
    # v3.15.0rc2 (commit 435c9e5a798c): the newest 3.15 the proxy has, under
    # a pseudo-version (the proxy does not list the tag).
    3.15) mod="v3.6.1-0.20260901091436-435c9e5a798c+incompatible"; tag="v3.15.0rc2 (commit 435c9e5a798c)"
          sum=b5a0dbe3538cf7c916ec69e6f493e60d900454ffd47a90eeae27518f13fbd935 ;;
  esac
  echo "python.sh: Debian's python$ver source is not served here; using github.com/python/cpython@$mod from the Go module proxy" >&2
  curl -sSf -m 600 -o "$src/cpython.zip" "https://proxy.golang.org/github.com/python/cpython/@v/$mod.zip" >>"$log" 2>&1 ||
    { echo "python.sh: could not download CPython $ver from Debian or the Go module proxy (see $log)" >&2; exit 1; }
  echo "$sum  $src/cpython.zip" | sha256sum -c --quiet - >>"$log" 2>&1 ||
    { echo "python.sh: the CPython $ver zip from the Go module proxy does not match its pinned SHA-256" >&2; exit 1; }
  unzip -q "$src/cpython.zip" -d "$src"
  tree=$(ls -d "$src"/github.com/python/cpython@*)
  # Zip entries carry no modes: scripts get their executable bit back.
  grep -rlI --exclude-dir=.git -m1 '^#!' "$tree" | xargs -d '\n' chmod +x
  origin="upstream CPython $tag (Go module proxy: $mod)"
fi

build="$cache/build-$want"
rm -rf "$build" "$prefix"
mv "$tree" "$build"
rm -rf "$src"
extra=()
[ "$want" = "3.14t" ] && extra+=(--disable-gil)
echo "python.sh: building CPython $want from $origin into $prefix (log: $log)" >&2
# OPT: -O2 and no -g, as Debian's own build (less PGO and LTO): CPython's
# default "-g -O3" took twice the compile time (unicodeobject.c: 16.8 s of
# CPU against 8.1 s), and nothing here reads its debug information. pycs at
# optimization level 0 only: nothing here runs python -O, and the levels 1
# and 2 were two thirds of `make install`'s compileall.
(
  cd "$build"
  ./configure --prefix="$prefix" --with-ensurepip=install OPT="-DNDEBUG -O2 -Wall" "${extra[@]}"
  sed -i 's/-o 0 -o 1 -o 2 /-o 0 /' Makefile
  make -j"$(nproc)"
  make install
) >>"$log" 2>&1 || { echo "python.sh: building CPython $want failed (see $log)" >&2; exit 1; }
rm -rf "$build"
echo "$origin" > "$prefix/SOURCE"
"$py" -c 'import ssl, sqlite3, zlib, ctypes' || { echo "python.sh: CPython $want built without a core module (see $log)" >&2; exit 1; }
echo "$py"
