#!/usr/bin/env bash
# Development: a PYTHONPATH directory that pairs the Python sources (symlinked,
# so edits show at once) with the extension of one CMake build directory.
#   eval "$(bash scripts/devpath.sh build-py311 /tmp/pp-mine)"   # exports PYTHONPATH
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$root" && realpath "$1")
out=$2
pkg="$out/mlflow_profiler"
rm -rf "$pkg"
mkdir -p "$pkg"
for f in "$root"/python/mlflow_profiler/*; do
  case "$f" in *.so) continue ;; esac
  ln -s "$f" "$pkg/"
done
ln -s "$build"/python/mlflow_profiler/_core*.so "$pkg/"
echo "export PYTHONPATH=$out"
