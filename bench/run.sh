#!/usr/bin/env bash
# Sets up and runs every benchmark; raw outputs go to bench/out/ (gitignored).
#
#   bench/run.sh                 # 3.11 and 3.13, full run (about 5 minutes)
#   bench/run.sh 3.12            # other versions: pyenv's newest 3.12.x
#   MLPROF_BENCH_SMOKE=1 bench/run.sh   # each contender once, tiny inputs
#
# Per Python version X it creates bench/out/venv-X from pyenv's interpreter
# (or pythonX on PATH), installs scikit-learn, pandas, viztracer and
# pyinstrument from PyPI (binary wheels only), installs this project with
# `pip install .` and, if that fails, builds the extension with CMake
# (Release) into bench/out/build-X and puts it on PYTHONPATH. It builds the
# no-op floor hook (bench/floor/_mlprof_floor.c) with the C compiler, then
# runs bench_noop.py, bench_render.py and bench_overhead.py. Last it builds
# and runs the core benchmark (bench_core: 1M synthetic events -> tree -> JSON).
#
# Threads of the numeric libraries are pinned to 1 (OMP, OpenBLAS, MKL) so
# the predict workload runs in one thread on this 2-core shared machine.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/bench/out
mkdir -p "$OUT"
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(3.11 3.13)
SMOKE=${MLPROF_BENCH_SMOKE:-}
REPEATS=${MLPROF_BENCH_REPEATS:-21}
PKGS=(scikit-learn pandas viztracer pyinstrument pybind11)

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1

log() { printf '[run.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

find_python() {  # scripts/python.sh: pyenv's 3.9-3.13, 3.14/3.15 built from source
  bash "$ROOT/scripts/python.sh" "$1"
}

setup_version() {  # prints the PYTHONPATH to use with the venv's python
  local v=$1 py venv pyexe extra=""
  py=$(find_python "$v")
  venv=$OUT/venv-$v
  pyexe=$venv/bin/python
  if [ ! -x "$pyexe" ]; then
    log "$v: creating $venv from $py"
    "$py" -m venv "$venv"
  fi
  if ! "$pyexe" -c "import sklearn, pandas, viztracer, pyinstrument, pybind11" 2>/dev/null; then
    log "$v: installing ${PKGS[*]}"
    # one by one: a peer with no wheel for a new CPython is skipped (the
    # bench prints "skipped" for it), not fatal
    for pkg in "${PKGS[@]}"; do
      "$pyexe" -m pip install -q --only-binary=:all: "$pkg" >&2 || log "$v: $pkg has no wheel here; skipped"
    done
  fi
  "$pyexe" -m pip uninstall -q -y mlflow-profiler >/dev/null 2>&1 || true
  log "$v: pip install $ROOT"
  if "$pyexe" -m pip install -q --no-deps "$ROOT" >"$OUT/pip-install-$v.log" 2>&1; then
    echo "pip install ." >"$OUT/install-$v.txt"
  else
    log "$v: pip install failed (see bench/out/pip-install-$v.log); building with CMake instead"
    local build=$OUT/build-$v pkg=$OUT/pkg-$v
    cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLPROF_BUILD_TESTS=OFF \
      -DMLPROF_BUILD_BENCH=OFF -DMLPROF_BUILD_AGENT=OFF -DPython_EXECUTABLE="$pyexe" >"$OUT/cmake-$v.log" 2>&1
    cmake --build "$build" --target _core >>"$OUT/cmake-$v.log" 2>&1
    rm -rf "$pkg" && mkdir -p "$pkg"
    cp -r "$ROOT/python/mlflow_profiler" "$pkg/"
    rm -f "$pkg"/mlflow_profiler/_core*.so
    cp "$build"/python/mlflow_profiler/_core*.so "$pkg/mlflow_profiler/"
    extra=$pkg
    echo "CMake Release build (pip install . failed: $(grep -m1 -oE '[A-Za-z]*Error: .*' "$OUT/pip-install-$v.log" || echo see log))" \
      >"$OUT/install-$v.txt"
  fi
  # The floor: a no-op C hook, built against this interpreter.
  local floor=$OUT/floor-$v inc suffix
  mkdir -p "$floor"
  inc=$("$pyexe" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  suffix=$("$pyexe" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  ${CC:-cc} -O2 -shared -fPIC -I"$inc" "$ROOT/bench/floor/_mlprof_floor.c" -o "$floor/_mlprof_floor$suffix"
  echo "${extra:+$extra:}$floor"
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm); $(getconf _NPROCESSORS_ONLN) CPUs online; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "uncommitted outside bench/: $(git -C "$ROOT" status --short -- . ':!bench' 2>/dev/null | tr '\n' ' ')"
} >"$OUT/env.txt"
cat "$OUT/env.txt" >&2

for v in "${VERSIONS[@]}"; do
  pp=$(setup_version "$v")
  pyexe=$OUT/venv-$v/bin/python
  "$pyexe" -m pip freeze >"$OUT/freeze-$v.txt" 2>/dev/null || true
  if [ -n "$SMOKE" ]; then
    log "$v: smoke"
    PYTHONPATH=$pp "$pyexe" "$ROOT/bench/bench_overhead.py" --smoke | tee "$OUT/smoke-$v.txt"
    PYTHONPATH=$pp "$pyexe" "$ROOT/bench/bench_noop.py" --smoke | tee -a "$OUT/smoke-$v.txt"
    PYTHONPATH=$pp "$pyexe" "$ROOT/bench/bench_render.py" --smoke | tee -a "$OUT/smoke-$v.txt"
    continue
  fi
  log "$v: bench_noop.py"
  PYTHONPATH=$pp "$pyexe" "$ROOT/bench/bench_noop.py" --json "$OUT/noop-$v.json" | tee "$OUT/noop-$v.txt"
  log "$v: bench_render.py"
  PYTHONPATH=$pp "$pyexe" "$ROOT/bench/bench_render.py" | tee "$OUT/render-$v.txt"
  log "$v: bench_overhead.py"
  PYTHONPATH=$pp "$pyexe" "$ROOT/bench/bench_overhead.py" --repeats "$REPEATS" --show-tree \
    --json "$OUT/overhead-$v.json" | tee "$OUT/overhead-$v.txt"
done

if [ -z "$SMOKE" ]; then
  log "core: bench_core (1M events)"
  cmake -S "$ROOT" -B "$OUT/build-core" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLPROF_BUILD_PYEXT=OFF \
    -DMLPROF_BUILD_TESTS=OFF -DMLPROF_BUILD_BENCH=ON >"$OUT/cmake-core.log" 2>&1
  cmake --build "$OUT/build-core" --target bench_core >>"$OUT/cmake-core.log" 2>&1
  "$OUT/build-core/bench/bench_core" 1000000 | tee "$OUT/core.txt"
fi
log "done; raw outputs in $OUT (to publish: cp $OUT/overhead-V.json bench/results/ && python bench/results.py)"
