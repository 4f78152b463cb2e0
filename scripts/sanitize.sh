#!/usr/bin/env bash
# Builds the C++ core, the eBPF agent and their GoogleTest suites with clang
# under sanitizers, and runs ctest there: the C++ tier of docs/fuzzing.md's
# "untrusted input" checks, on the tests' inputs rather than the fuzzers'.
#
#   scripts/sanitize.sh              ASan + UBSan (build-asan/): memory errors,
#                                    leaks, undefined behaviour; any report fails
#   scripts/sanitize.sh --thread     TSan (build-tsan/): data races
#   scripts/sanitize.sh -R REGEX     only the ctest tests matching REGEX
#   scripts/sanitize.sh --python PY  also the extension for PY (a venv with
#                                    pytest, pytest-xdist and pybind11), and
#                                    the Python tier: capture tests on PY
#   scripts/sanitize.sh --python-only PY
#                                    the extension and the Python tier only:
#                                    no agent, no GoogleTest suites, no ctest
#                                    (CI's TSan stage)
#   scripts/sanitize.sh --fuzz       ASan + UBSan with libFuzzer's coverage
#                                    (fuzzer-no-link), the fuzz targets built
#                                    too: scripts/fuzz.sh then runs them from
#                                    this build (MLPROF_FUZZ_BUILD; CI does)
#   scripts/sanitize.sh --build-only the build only (CI builds ahead on idle
#                                    CPU, and runs the tests later)
# Root runs the agent's BPF tests too, as in CI. Exit 1 on a failed test or
# any sanitizer report. Environment: MLPROF_SANITIZE_BUILD, the build
# directory; MLPROF_LIBBPF_DIR, libbpf-dev 1.4.6's prefix (bpf/README.md);
# MLPROF_SANITIZE_JOBS, ninja's parallel jobs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

mode=address ctest_args=() python="" fuzz=0 python_only=0 build_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --thread) mode=thread; shift ;;
    -R) ctest_args+=(-R "$2"); shift 2 ;;
    --python) python=$2; shift 2 ;;
    --python-only) python=$2 python_only=1; shift 2 ;;
    --fuzz) fuzz=1; shift ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; $d'; exit 0 ;;
    *) echo "sanitize.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

if [ "$mode" = address ]; then
  build=${MLPROF_SANITIZE_BUILD:-$root/build-asan}
  # fuzz/ubsan.ignore: the one known-benign report class (docs/fuzzing.md).
  flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
  flags+=" -fsanitize-ignorelist=$root/fuzz/ubsan.ignore"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # fuzz.sh's flags (it reuses a configured build): coverage for libFuzzer.
  [ "$fuzz" = 0 ] || flags=${flags/address,undefined/address,undefined,fuzzer-no-link}
else
  [ "$fuzz" = 0 ] || { echo "sanitize.sh: --fuzz is for ASan + UBSan, not --thread" >&2; exit 2; }
  build=${MLPROF_SANITIZE_BUILD:-$root/build-tsan}
  flags="-fsanitize=thread"
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
fi
# -O1 and line tables: half the build time of -O2 -g, stacks still readable.
flags+=" -O1 -gline-tables-only -fno-omit-frame-pointer"

# --python-only: the extension and what it links, nothing else.
on=$([ "$python_only" = 1 ] && echo OFF || echo ON)
t0=$(date +%s)
if [ ! -f "$build/build.ninja" ]; then
  libbpf=${MLPROF_LIBBPF_DIR:-$HOME/.cache/mlflow-profiler-tests/libbpf-1.4.6/usr}
  pyext=(-DMLPROF_BUILD_PYEXT=OFF)
  # No LTO: pybind11 adds it, and under --fuzz's coverage clang's LTO link
  # of the extension fails (sancov constructors in discarded sections).
  [ -n "$python" ] && pyext=(-DMLPROF_BUILD_PYEXT=ON -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF
    -DPython_EXECUTABLE="$("$python" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')"
    -Dpybind11_DIR="$("$python" -m pybind11 --cmakedir)")
  # ccache, but not with --fuzz: as fuzz.sh, which does not use it (ccache
  # does not hash the ignorelist's content).
  launcher=()
  command -v ccache >/dev/null && [ "$fuzz" = 0 ] &&
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=${mode/address/address,undefined}" \
    "${pyext[@]}" -DMLPROF_BUILD_TESTS="$on" -DMLPROF_BUILD_AGENT="$on" -DMLPROF_LIBBPF_DIR="$libbpf" \
    -DMLPROF_BUILD_BENCH=OFF -DMLPROF_BUILD_FUZZ="$([ "$fuzz" = 1 ] && echo ON || echo OFF)" >/dev/null
fi
echo "== build ($build, $mode)"
ninja -C "$build" ${MLPROF_SANITIZE_JOBS:+-j "$MLPROF_SANITIZE_JOBS"}
echo "== built in $(( $(date +%s) - t0 ))s"
[ "$build_only" = 0 ] || exit 0
if [ "$python_only" = 0 ]; then
  t1=$(date +%s)
  ctest --test-dir "$build" --output-on-failure -j 2 "${ctest_args[@]}"
  echo "== ctest in $(( $(date +%s) - t1 ))s"
fi

[ -n "$python" ] || exit 0
# The Python tier: the extension of this build, in an interpreter that is
# not instrumented. ASan: its runtime preloaded into PY; CPython's own
# blocks left at exit are not leaks of ours (ctest and the fuzz targets
# check leaks), so leak checking is off here. The capture tests of
# scripts/test-fast.sh. TSan: clang 14's shared TSan runtime crashes any
# process it is preloaded into here (even /bin/true), so PY's libpython is
# linked into a small launcher built with -fsanitize=thread, which runs
# pytest with PY's site-packages; the tests that run threads, asyncio and
# the delivery thread.
t2=$(date +%s)
eval "$(bash scripts/devpath.sh "$build" "$build/pythonpath")"
if [ "$mode" = address ]; then
  run=(env LD_PRELOAD="$(clang -print-file-name=libclang_rt.asan-x86_64.so)" "$python")
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
  tier=(test_basic.py test_nesting.py test_generators.py test_asyncio.py test_threads.py
        test_recursion.py test_exceptions.py test_names.py test_user_code.py test_decorators.py
        test_engines_agree.py test_save_load.py test_summarize.py test_render_shallower.py
        test_waiting.py)
else
  read -r inc libdir ver purelib < <("$python" -c 'import sysconfig as s
p = s.get_paths()
print(p["include"], s.get_config_var("LIBDIR"), s.get_config_var("LDVERSION"), p["purelib"])')
  printf '#include <Python.h>\nint main(int argc, char** argv) { return Py_BytesMain(argc, argv); }\n' |
    clang -fsanitize=thread -O1 -x c - -I"$inc" -L"$libdir" -l"python$ver" -Wl,-rpath,"$libdir" \
      -Wl,--export-dynamic -lm -ldl -o "$build/python-tsan"
  run=("$build/python-tsan")
  export PYTHONPATH=$PYTHONPATH:$purelib
  tier=(test_threads.py test_asyncio.py test_waiting.py test_save_load.py test_engines_agree.py)
fi
args=()
for f in "${tier[@]}"; do args+=("tests/python/$f"); done
"${run[@]}" -m pytest -q -n 2 -p no:cacheprovider -m "not processes and not mlflow_tracking" "${args[@]}"
echo "== Python tier in $(( $(date +%s) - t2 ))s"
