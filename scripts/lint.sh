#!/usr/bin/env bash
# scripts/lint.sh: the lint stage (CI runs it, and so can you). It checks and
# changes nothing; scripts/format.sh applies the formatters. Its steps:
#   - ruff: ruff check and ruff format --check on python/ tests/ bench/ scripts/
#   - mypy: python/mlflow_profiler (settings: pyproject.toml's [tool.mypy])
#   - stubtest: _core.pyi against a built extension (--stubtest PYTHON, a Python
#     that imports mlflow_profiler._core: an install, or devpath.sh's PYTHONPATH)
#   - clang-format: --dry-run -Werror on the C and C++ of pyext/ userspace/ bpf/
#     tests/cpp/ bench/ fuzz/
#   - clang-tidy: .clang-tidy's checks over the product sources (pyext/,
#     userspace/) in each --build DIR's compile_commands.json (configured
#     with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
#   - shellcheck: scripts/*.sh and .ci/run
# Missing tools are installed first: ruff and mypy (pinned below) into a venv
# under ~/.cache/mlflow-profiler-lint; clang-format, clang-tidy and
# ShellCheck from Debian's archive (apt-get waits for another apt's lock).
# Every step runs and prints its time; the script fails if any found anything.
#   scripts/lint.sh [--stubtest PYTHON] [--build DIR]... [--only STEP[,STEP...]]
#                   [--tidy-fast] [--tidy-files REGEX]
# --tidy-fast leaves out clang-analyzer-* (CI's choice: its cost, below); --tidy-files
# narrows clang-tidy to the sources whose path matches REGEX.
#   scripts/lint.sh --tools   installs the tools only, and prints the venv's path
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Bump together with the fixes a new version asks for.
PINS=(ruff==0.8.4 mypy==1.13.0)
# Debian 12's: another major version formats some lines differently.
CLANG_MAJOR=14
CACHE=${MLPROF_LINT_CACHE:-$HOME/.cache/mlflow-profiler-lint}

stubtest_python="" only="" builds=() tools_only=0 tidy_fast=0 tidy_files=""
while [ $# -gt 0 ]; do
  case "$1" in
    --stubtest) stubtest_python=${2:?--stubtest needs a Python}; shift 2 ;;
    --build) builds+=("${2:?--build needs a CMake build directory}"); shift 2 ;;
    --only) only=",${2:?--only needs steps},"; shift 2 ;;
    --tools) tools_only=1; shift ;;
    --tidy-fast) tidy_fast=1; shift ;;
    --tidy-files) tidy_files=${2:?--tidy-files needs a regex}; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "lint.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
wanted() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }

# --- tools -------------------------------------------------------------------

apt_install() {  # apt_install PKG...: Debian packages, waiting up to 10 min for apt's lock
  local sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo)
  echo "lint.sh: installing $* (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null; then
    # No package lists yet, or old ones. (update takes no lock timeout: retry.)
    local i
    for i in $(seq 60); do
      "${sudo[@]}" apt-get update -qq && break
      echo "lint.sh: apt-get update failed (another apt holds the lock?); retry $i in 10 s" >&2
      sleep 10
    done
    "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null
  fi
}

lint_venv() {  # lint_venv PY: prints a venv of PY's X.Y with PINS, made once
  local ver venv
  ver=$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  venv="$CACHE/venv-$ver"
  mkdir -p "$CACHE"
  (
    flock 9
    if [ "$(cat "$venv/PINS" 2>/dev/null)" != "${PINS[*]}" ]; then
      echo "lint.sh: installing ${PINS[*]} into $venv (pip)" >&2
      rm -rf "$venv"
      "$1" -m venv "$venv" >&2
      "$venv/bin/python" -m pip install -q --disable-pip-version-check "${PINS[@]}" >&2
      echo "${PINS[*]}" >"$venv/PINS"
    fi
  ) 9>"$CACHE/lock"
  echo "$venv"
}

need_apt=()
wanted clang-format && ! command -v clang-format >/dev/null && need_apt+=(clang-format)
wanted clang-tidy && [ ${#builds[@]} -gt 0 ] && ! command -v run-clang-tidy >/dev/null && need_apt+=(clang-tidy)
wanted shellcheck && ! command -v shellcheck >/dev/null && need_apt+=(shellcheck)
[ ${#need_apt[@]} -eq 0 ] || apt_install "${need_apt[@]}"
VENV=$(lint_venv "${MLPROF_LINT_PYTHON:-python3}")
if [ $tools_only = 1 ]; then echo "$VENV"; exit 0; fi

# --- steps -------------------------------------------------------------------

failed=()
T0=$(date +%s)
step() {  # step NAME CMD...: runs CMD, prints its time, remembers a failure
  local name=$1 t rc=0
  shift
  wanted "$name" || return 0
  printf '\n--- %s\n' "$name"
  t=$(date +%s)
  "$@" || rc=$?
  printf -- '--- %s: %s (%ss)\n' "$name" "$([ $rc = 0 ] && echo ok || echo FAILED)" "$(($(date +%s) - t))"
  [ $rc = 0 ] || failed+=("$name")
}

PY_DIRS=(python tests bench scripts)
ruff_step() {
  local rc=0
  "$VENV/bin/ruff" check --no-cache "${PY_DIRS[@]}" || rc=1
  "$VENV/bin/ruff" format --no-cache --check "${PY_DIRS[@]}" || rc=1
  return $rc
}

mypy_step() {  # files and settings: pyproject.toml
  "$VENV/bin/mypy" --no-incremental --config-file pyproject.toml
}

stubtest_step() {
  # The runtime is PYTHON's own import of the extension; the stub is this
  # checkout's, alone in a scratch package (MYPYPATH comes before
  # site-packages), so that only it is checked (mypy checks the rest);
  # mypy comes from a venv of PYTHON's X.Y, on PYTHONPATH. From the scratch
  # directory, so that nothing in the sources shadows the import.
  local venv site tmp rc=0
  venv=$(lint_venv "$stubtest_python")
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  tmp=$(mktemp -d)
  mkdir -p "$tmp/stubs/mlflow_profiler"
  : >"$tmp/stubs/mlflow_profiler/__init__.pyi"
  cp python/mlflow_profiler/_core.pyi "$tmp/stubs/mlflow_profiler/"
  (cd "$tmp" && MYPYPATH="$tmp/stubs" PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" \
     "$stubtest_python" -m mypy.stubtest --allowlist "$root/scripts/stubtest-allowlist.txt" \
     mlflow_profiler._core) || rc=$?
  rm -rf "$tmp"
  return $rc
}

c_sources() {  # NUL-separated tracked C and C++ files that the formatter owns
  git ls-files -z -- pyext userspace bpf tests/cpp bench fuzz | grep -zE '\.(c|cpp|h)$'
}

clang_format_step() {
  local v
  v=$(clang-format --version | grep -oE 'version [0-9]+' | grep -oE '[0-9]+')
  [ "$v" = "$CLANG_MAJOR" ] ||
    echo "lint.sh: clang-format $v, not $CLANG_MAJOR (Debian 12's): lines may be judged differently" >&2
  c_sources | xargs -0 -n 50 clang-format --dry-run -Werror
}

clang_tidy_step() {
  # The product's translation units (pyext/, userspace/; not tests/ or
  # bench/), each once, from the --build directories' databases merged: the
  # C++ build has the core and the agent, an extension build pyext/.
  local dir tmp log rc=0 jobs checks=()
  jobs=${MLPROF_LINT_JOBS:-$(nproc)}
  tmp=$(mktemp -d)
  for dir in "${builds[@]}"; do
    [ -f "$dir/compile_commands.json" ] ||
      { echo "lint.sh: no $dir/compile_commands.json (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)"; rc=1; }
  done
  [ $rc = 0 ] || { rm -rf "$tmp"; return 1; }
  "$VENV/bin/python" - "$root" "$tmp/compile_commands.json" "$tidy_files" "${builds[@]}" <<'PY'
import json, os, re, sys
root, out, only, dirs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
keep = re.compile(re.escape(root) + r"/(pyext|userspace)/.*\.(c|cpp)$")
wanted = lambda f: keep.match(f) and not (only and not re.search(only, f))
# MLPROF_UNITY_BUILD's units (generated in the build directory) are checked
# as they compile: clang-tidy reports what it finds in the sources a unit
# includes (HeaderFilterRegex), and parses the headers they share once a
# unit, not once a source (about 3 times faster). A source a unit includes
# is not checked again alone.
units, singles, covered = [], [], set()
for d in dirs:
    for e in json.load(open(os.path.join(d, "compile_commands.json"))):
        f = os.path.realpath(os.path.join(e["directory"], e["file"]))
        if "/Unity/unity_" in f:
            inside = {os.path.realpath(m) for m in re.findall(r'#include "([^"]+)"', open(f).read())}
            if any(wanted(m) for m in inside) and not inside <= covered:
                covered |= inside
                units.append(dict(e, file=f))
        elif wanted(f):
            singles.append(dict(e, file=f))
seen, merged = set(), list(units)
for e in singles:
    if e["file"] not in covered and e["file"] not in seen:
        seen.add(e["file"])
        merged.append(e)
# GCC's TLS dialect flag (pyext/CMakeLists.txt): clang 14 does not know it.
gcc_only = ("-mtls-dialect=gnu2",)
for e in merged:
    if "command" in e:
        e["command"] = " ".join(a for a in e["command"].split(" ") if a not in gcc_only)
    if "arguments" in e:
        e["arguments"] = [a for a in e["arguments"] if a not in gcc_only]
json.dump(merged, open(out, "w"), indent=1)
print(f"lint.sh: clang-tidy on {len(merged)} translation units ({len(units)} of them unity units "
      f"of {len(covered)} sources)")
PY
  # --tidy-fast: without clang-analyzer-* (path-sensitive). Measured on this
  # 2-core machine over 6 of the 98 product units: about 11 s of CPU a unit
  # with it, 4.3 s without, so about 9 minutes against 3.5 for all 98. CI
  # runs --tidy-fast; the analyzer runs when a developer leaves it out.
  [ "$tidy_fast" = 0 ] || checks=(-checks=-clang-analyzer-*)
  log="$tmp/clang-tidy.log"
  # The configuration given, not looked up from each unit: a build
  # directory outside the tree (its unity units) has no .clang-tidy above it.
  run-clang-tidy -quiet -j "$jobs" -p "$tmp" -config "$(cat "$root/.clang-tidy")" "${checks[@]}" \
    >"$log" 2>&1 || rc=1
  # Its exit status is not enough: warnings are findings. A header's show once.
  # (run-clang-tidy colours clang-tidy's output: the colour codes go.)
  sed -i 's/\x1b\[[0-9;]*m//g' "$log"
  if grep -E '^/.*: (warning|error): ' "$log" | sort -u | grep .; then rc=1; fi
  if [ $rc != 0 ]; then
    mkdir -p "$root/build-lint" && cp "$log" "$root/build-lint/clang-tidy.log"
    echo "lint.sh: clang-tidy's whole output: $root/build-lint/clang-tidy.log"
  fi
  rm -rf "$tmp"
  return $rc
}

shellcheck_step() {
  shellcheck scripts/*.sh .ci/run
}

step ruff ruff_step
step mypy mypy_step
if [ -n "$stubtest_python" ]; then
  step stubtest stubtest_step
elif wanted stubtest && [ -n "$only" ]; then
  echo "lint.sh: stubtest needs --stubtest PYTHON" >&2; failed+=(stubtest)
fi
step clang-format clang_format_step
[ ${#builds[@]} -eq 0 ] || step clang-tidy clang_tidy_step
step shellcheck shellcheck_step

printf '\nlint.sh: %ss in all; ' "$(($(date +%s) - T0))"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "everything passed"
