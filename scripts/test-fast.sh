#!/usr/bin/env bash
# The fast test tier: a developer's inner loop of about two minutes on two
# cores (after the first build). It builds, incrementally, the core's
# GoogleTest suite and the extension for one CPython (build-fast/, one
# translation unit per source so an edit rebuilds little; ccache if
# installed), runs ctest (the core's tests: no BPF, no agent) and a pytest
# subset against the sources (scripts/devpath.sh), two workers, stopping at
# the first failure.
#
# Covers: libmlprof_core (every core test); the capture engine on this
# CPython (trees, nesting, generators, asyncio, threads, recursion,
# exceptions, names, user code, blocks, both engines compared); the profile
# document (save/load, the exports Chrome/pprof/folded), summaries.
# Does not cover (CI does, .ci/run): the agent and BPF (ctest's agent tests,
# tests/e2e, tests/vm), tests marked `processes` or `mlflow_tracking` (MLflow
# servers, model serving, tracking stores), the HTML report in Chromium, the
# profile store, other CPythons (3.9-3.15, 3.14t), the installed wheel, lint.
#
#   scripts/test-fast.sh                  build, ctest, the pytest subset
#   scripts/test-fast.sh --all            every test not marked processes/mlflow_tracking (5+ min)
#   scripts/test-fast.sh -- ARGS...       pytest ARGS instead of the subset (e.g. -k name tests/python/x.py)
# Environment: MLPROF_TEST_PYTHON, a Python with pytest and pytest-xdist
# (default: .venv/bin/python, else python3); MLPROF_BUILD_PYTHON, the
# interpreter CMake builds the extension for, with pybind11 (default: the
# test Python's base interpreter).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

subset=(test_basic.py test_nesting.py test_generators.py test_asyncio.py test_threads.py
        test_recursion.py test_exceptions.py test_names.py test_user_code.py test_decorators.py
        test_engines_agree.py test_save_load.py test_export_chrome.py test_export_pprof.py
        test_export_folded.py test_summarize.py test_render_shallower.py test_waiting.py)
pytest_args=()
case "${1:-}" in
  --all) pytest_args=(tests/python) ;;
  --) shift; pytest_args=("$@") ;;
  "") for f in "${subset[@]}"; do pytest_args+=("tests/python/$f"); done ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; $d'; exit 2 ;;
esac

py=${MLPROF_TEST_PYTHON:-}
[ -n "$py" ] || { [ -x .venv/bin/python ] && py=.venv/bin/python; } || py=python3
build_py=${MLPROF_BUILD_PYTHON:-$("$py" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')}
build=$root/build-fast
t0=$(date +%s)

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLPROF_UNITY_BUILD=OFF \
    -DMLPROF_BUILD_TESTS=ON -DMLPROF_BUILD_BENCH=OFF -DMLPROF_BUILD_AGENT=OFF -DMLPROF_BUILD_PYEXT=ON \
    -DPython_EXECUTABLE="$build_py" "${launcher[@]}" >/dev/null
fi
echo "== build (build-fast/)"
nice -n 10 ninja -C "$build" -j2 mlprof_core_tests _core
echo "== ctest: the core ($(( $(date +%s) - t0 ))s so far)"
ctest --test-dir "$build" -j2 --output-on-failure --no-tests=error >"$build/ctest.log" 2>&1 ||
  { cat "$build/ctest.log"; exit 1; }
tail -n 3 "$build/ctest.log"
echo "== pytest ($(( $(date +%s) - t0 ))s so far)"
eval "$(bash scripts/devpath.sh "$build" "$build/pythonpath")"
"$py" -m pytest -q -x -n 2 -p no:cacheprovider -m "not processes and not mlflow_tracking" "${pytest_args[@]}"
echo "== test-fast: passed in $(( $(date +%s) - t0 ))s"
