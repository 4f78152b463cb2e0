#!/usr/bin/env bash
# scripts/matrix.sh [VERSION ...]: the whole pytest suite (tests/python) on
# every CPython that requires-python admits, 3.9 to 3.15 and the
# free-threaded 3.14t, each against a `pip install .` of the package in its
# own virtualenv (build-matrix/venv-X.Y, reused), as four pytest-xdist
# workers (MATRIX_WORKERS). Prints a table; exit status 0 only if no version
# had a failure.
#
# Interpreters come from scripts/python.sh (3.14, 3.15 and 3.14t are built
# on first use, 4-8 minutes each). Test dependencies are installed where
# PyPI has them for that version: MLflow, pyarrow or scikit-learn missing on
# a new release makes their tests skip (the table counts skips), never fail.
#   MATRIX_CPYTHON_TESTS=1  also runs tests/cpython/regrtest_in_session.py
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${MATRIX_OUT:-$root/build-matrix}
mkdir -p "$out"
versions=("$@")
[ ${#versions[@]} -eq 0 ] && versions=(3.9 3.10 3.11 3.12 3.13 3.14 3.15 3.14t)
export PIP_DISABLE_PIP_VERSION_CHECK=1

declare -a rows
status=0
for v in "${versions[@]}"; do
  t0=$(date +%s)
  py=$(bash "$root/scripts/python.sh" "$v") || { rows+=("$v|no interpreter|||||"); status=1; continue; }
  venv="$out/venv-$v"
  log="$out/pytest-$v.log"
  if [ ! -x "$venv/bin/python" ]; then
    "$py" -m venv "$venv" >"$log" 2>&1 || { rows+=("$v|venv failed|||||"); status=1; continue; }
    "$venv/bin/pip" install -q --upgrade pip >>"$log" 2>&1
  fi
  # The package with every test extra PyPI has for this version.
  if ! "$venv/bin/pip" install -q "${root}[test,mlflow]" >>"$log" 2>&1; then
    "$venv/bin/pip" install -q "$root" pytest >>"$log" 2>&1 || { rows+=("$v|install failed|||||"); status=1; continue; }
    for dep in numpy pandas scipy pyarrow polars selenium scikit-learn "mlflow>=2.10"; do
      "$venv/bin/pip" install -q "$dep" >>"$log" 2>&1 || echo "matrix: $dep is not installable on $v" >>"$log"
    done
  fi
  # Four workers where pytest-xdist installed, as CI runs it (the tests wait
  # on servers and subprocesses); a file's tests stay on one worker.
  workers=()
  "$venv/bin/python" -c 'import xdist' 2>/dev/null && workers=(-n "${MATRIX_WORKERS:-4}" --dist loadfile)
  (cd "$out" && "$venv/bin/python" -m pytest -c "$root/pyproject.toml" --rootdir "$root" -p no:cacheprovider \
      --basetemp "$out/tmp-$v" -q "${workers[@]}" "$root/tests/python" >>"$log" 2>&1)
  rc=$?
  summary=$(grep -E "^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)" "$log" | tail -n 1 | tr -d '=')
  passed=$(grep -oE "[0-9]+ passed" <<<"$summary" | cut -d' ' -f1)
  failed=$(grep -oE "[0-9]+ failed" <<<"$summary" | cut -d' ' -f1)
  errors=$(grep -oE "[0-9]+ errors?" <<<"$summary" | cut -d' ' -f1)
  skipped=$(grep -oE "[0-9]+ skipped" <<<"$summary" | cut -d' ' -f1)
  regr=""
  if [ "${MATRIX_CPYTHON_TESTS:-0}" = 1 ]; then
    if (cd "$out" && "$venv/bin/python" "$root/tests/cpython/regrtest_in_session.py" --all >"$out/cpython-$v.log" 2>&1); then
      regr="ok"
    else
      regr="FAILED"
      status=1
    fi
  fi
  [ $rc -ne 0 ] && status=1
  rows+=("$v|$("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])')|${passed:-0}|${failed:-0}|${errors:-0}|${skipped:-0}|$(( $(date +%s) - t0 ))s|$regr")
done

printf '\n| CPython | version | passed | failed | errors | skipped | time |%s\n' "$([ "${MATRIX_CPYTHON_TESTS:-0}" = 1 ] && echo ' CPython tests in a session |')"
printf '|---|---|---|---|---|---|---|%s\n' "$([ "${MATRIX_CPYTHON_TESTS:-0}" = 1 ] && echo '---|')"
for r in "${rows[@]}"; do
  IFS='|' read -r a b c d e f g h <<<"$r"
  printf '| %s | %s | %s | %s | %s | %s | %s |%s\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$([ "${MATRIX_CPYTHON_TESTS:-0}" = 1 ] && echo " $h |")"
done
echo "logs: $out/pytest-*.log"
exit $status
