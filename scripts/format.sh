#!/usr/bin/env bash
# scripts/format.sh: applies the formatters that scripts/lint.sh checks:
# clang-format -i on the C and C++ of pyext/ userspace/ bpf/ tests/cpp/ bench/,
# ruff's safe fixes (import order, unused imports, ...) and ruff format on
# python/ tests/ bench/ scripts/. The tools are lint.sh's (same versions,
# installed the same way). What is left for a person: scripts/lint.sh.
#   scripts/format.sh [--python-only | --cpp-only]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
what=${1:-all}
case "$what" in all|--python-only|--cpp-only) ;; *) echo "usage: scripts/format.sh [--python-only | --cpp-only]" >&2; exit 2 ;; esac

venv=$(bash scripts/lint.sh --tools)
if [ "$what" != --cpp-only ]; then
  "$venv/bin/ruff" check --no-cache --fix --exit-zero --quiet python tests bench scripts
  "$venv/bin/ruff" format --no-cache python tests bench scripts
fi
if [ "$what" != --python-only ]; then
  git ls-files -z -- pyext userspace bpf tests/cpp bench | grep -zE '\.(c|cpp|h)$' | xargs -0 -n 50 clang-format -i
fi
