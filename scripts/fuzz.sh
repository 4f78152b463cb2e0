#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang under ASan and UBSan in
# build-fuzz/, replays each target's regression inputs (fuzz/regressions/),
# then fuzzes each from its seed corpus (fuzz/corpus/) for a bounded time,
# and prints executions and new corpus size per target. Exit 1 on a crash, a
# leak, a sanitizer report, a timeout (10 s an input) or an out-of-memory
# (2 GB); the input is left in build-fuzz/artifacts/<target>/.
#
#   scripts/fuzz.sh                         every target, 60 s each
#   scripts/fuzz.sh --seconds 600 T...      the named targets, 10 min each
#   scripts/fuzz.sh --runs 10000000 T       until 10 million executions
#   scripts/fuzz.sh --runs 10000 --seed 1   a bounded count from a fixed seed (CI)
#   scripts/fuzz.sh --replay-only           the regression inputs and seeds, once each
#   scripts/fuzz.sh --ledger                executions so far per target, on this code
#                                           (with what fuzz/carried.tsv carries to it)
#   --jobs N                                targets fuzzed at once (default: the CPUs)
#   --idle                                  yield the CPUs to everything else
# Every run appends a row to build-fuzz/ledger.tsv: its executions, result,
# seed and the fuzzed code (the last commit that changed userspace/, fuzz/
# or CMakeLists.txt; "dirty" with uncommitted changes there). A run stopped
# with SIGINT to its libFuzzer process (exit 72) counts: libFuzzer prints
# its final stats first. docs/fuzzing.md says how the sums are read.
# Environment: MLPROF_FUZZ_BUILD, the build directory (default: build-fuzz/).
set -euo pipefail
# One compound command, read whole before it runs: a run takes hours, and
# bash reads a script as it goes, so an edit meanwhile would change what
# the run does next.
{
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

seconds=60 runs=0 seed=0 replay_only=0 ledger=0 jobs=$(nproc) idle=0 targets=()
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; seconds=0; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --replay-only) replay_only=1; shift ;;
    --ledger) ledger=1; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    --idle) idle=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; $d'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
# --idle: the fuzzers run at SCHED_IDLE in a session of their own whose
# autogroup has nice 19. SCHED_IDLE alone does not yield across sessions: with autogroups on
# (/proc/sys/kernel/sched_autogroup_enabled), each session is one group and
# groups share the CPUs equally, so two fuzzers started with `setsid chrt -i 0`
# took 520 of 1,000 ticks in 5 s from callgrind in another session; with
# their group at nice 19, 27 (docs/fuzzing.md).
if [ "$idle" = 1 ] && [ -z "${MLPROF_FUZZ_IDLE:-}" ]; then
  exec env MLPROF_FUZZ_IDLE=1 setsid -w chrt -i 0 bash "$0" "${args[@]}"
fi
if [ -n "${MLPROF_FUZZ_IDLE:-}" ] && [ -w /proc/self/autogroup ]; then
  echo 19 >/proc/self/autogroup
fi
build=${MLPROF_FUZZ_BUILD:-$root/build-fuzz}
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(ls fuzz/corpus)

# The fuzzed code: what a run's executions count for. fuzz/carried.tsv is
# the ledger's, not code the targets run.
code_paths=(userspace fuzz CMakeLists.txt ':!fuzz/carried.tsv')
code=$(git log -1 --format=%h -- "${code_paths[@]}" 2>/dev/null || true)
[ -n "$code" ] && [ -z "$(git status --porcelain -- "${code_paths[@]}")" ] || code=dirty
if [ "$ledger" = 1 ]; then
  # Executions per target on this code, over runs that found nothing. Not
  # a fixed seed's (CI's): run again, it executes the same inputs. Nothing
  # on uncommitted code: two such runs may have fuzzed different code.
  # fuzz/carried.tsv (code, from, not carried, why) carries the runs on an
  # earlier code to a later one for the targets whose code the change
  # between them cannot reach (docs/fuzzing.md says when).
  printf '%-26s %12s %6s  %s\n' target executions runs "code $code"
  carried=/dev/null
  [ -f fuzz/carried.tsv ] && carried=fuzz/carried.tsv
  for t in "${targets[@]}"; do
    awk -F'\t' -v t="$t" -v c="$code" '
      FILENAME != ARGV[2] { if ($0 !~ /^#/ && NF >= 3) { n_c++; cc[n_c] = $1; cf[n_c] = $2; cx[n_c] = "," $3 "," } next }
      FNR == 1 && !started { started = 1; counts[c] = 1
        for (changed = 1; changed;) { changed = 0
          for (i = 1; i <= n_c; i++)
            if ((cc[i] in counts) && !(cf[i] in counts) && index(cx[i], "," t ",") == 0) {
              counts[cf[i]] = 1; changed = 1; from = from " +" cf[i] } } }
      $2 == t && ($6 in counts) && c != "dirty" && $7 == 0 && ($5 == "ok" || $5 == "interrupted") {
        n += $3; r++ }
      END { printf "%-26s %12d %6d  %s%s\n", t, n, r, (n >= 10000000 ? "10 million: done" : ""),
            (from != "" ? "  (carried:" from ")" : "") }' \
      "$carried" "$build/ledger.tsv" 2>/dev/null || printf '%-26s %12d %6d\n' "$t" 0 0
  done
  exit 0
fi

t0=$(date +%s)
# No ccache: it does not hash the ignorelist's content. A changed list
# needs a fresh build-fuzz/.
if [ ! -f "$build/build.ninja" ]; then
  # OSS-Fuzz's flags: -O1 and line tables only build in half the time of
  # -O2 -g, and keep the stacks readable.
  flags="-O1 -gline-tables-only -fno-omit-frame-pointer -fsanitize=address,undefined,fuzzer-no-link"
  flags+=" -fno-sanitize-recover=undefined -fsanitize-ignorelist=$root/fuzz/ubsan.ignore"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DMLPROF_BUILD_FUZZ=ON -DMLPROF_BUILD_PYEXT=OFF -DMLPROF_BUILD_TESTS=OFF \
    -DMLPROF_BUILD_BENCH=OFF -DMLPROF_BUILD_AGENT=OFF >/dev/null
fi
echo "== build ($build)"
ninja -C "$build" "${targets[@]}"
echo "== built in $(( $(date +%s) - t0 ))s"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The entropic schedule stays on; it stops counting a feature's hits at 32
# (libFuzzer's default is 255). Its bookkeeping took 59% of fuzz_agent_records'
# CPU (perf: UpdateFeatureFrequency, AddRareFeature); from the seeds, seed 11,
# 60 s: 43,754 executions, cov 9,613 -> 54,028, cov 9,738.
common=(-rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -entropic_feature_frequency_threshold=32)
# fuzz_one TARGET: replays, then fuzzes one target; prints its row of the
# table and exits 1 if it failed. The targets are independent processes, so
# --jobs of them run at once (CI: both cores), each in the order given.
fuzz_one() {
  local t=$1 exe=$build/fuzz/$1 dict=() max_len=65536 log=$build/$1.log replay limit s0 rc took execs rate corpus result
  case "$t" in
    fuzz_document|fuzz_import_chrome|fuzz_import_speedscope|fuzz_import_any|fuzz_agent_k8s|\
    fuzz_agent_inject_result) dict=(-dict=fuzz/json.dict) ;;
  esac
  # Whole files (a BoltDB, a store) need room; the rest stay small and fast.
  case "$t" in fuzz_agent_boltdb|fuzz_store_read) max_len=262144 ;; esac
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  # Known inputs first: every regression and every seed, once.
  replay=("fuzz/corpus/$t")
  [ -d "fuzz/regressions/$t" ] && replay+=("fuzz/regressions/$t")
  if ! "$exe" "${common[@]}" -max_len=$max_len -runs=0 -artifact_prefix="$build/artifacts/$t/" \
      "${replay[@]}" >"$log" 2>&1; then
    printf '%-26s %8s %12s %10s %8s  %s\n' "$t" - - - - "FAILED on a known input ($log)"
    return 1
  fi
  [ "$replay_only" = 1 ] && { printf '%-26s %8s %12s %10s %8s  %s\n' "$t" - - - - "replayed"; return 0; }
  limit=(-max_total_time="$seconds")
  [ "$runs" -gt 0 ] && limit=(-runs="$runs")
  [ "$seed" -gt 0 ] && limit+=(-seed="$seed")
  s0=$(date +%s)
  rc=0
  "$exe" "${common[@]}" -max_len=$max_len "${dict[@]}" "${limit[@]}" -artifact_prefix="$build/artifacts/$t/" \
    "$build/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  took=$(( $(date +%s) - s0 ))
  # libFuzzer prints its final stats twice when it dies on a finding.
  execs=$(grep -aoE 'stat::number_of_executed_units: *[0-9]+' "$log" | tail -n 1 | grep -oE '[0-9]+$' || echo 0)
  rate=$(( took > 0 ? execs / took : execs ))
  corpus=$(find "$build/corpus/$t" -type f | wc -l)
  result=ok
  [ "$rc" = 72 ] && grep -q 'libFuzzer: run interrupted' "$log" && rc=0 result=interrupted
  [ "$rc" = 0 ] ||
    result="FAILED (exit $rc): $(grep -a -m1 -E 'ERROR: |runtime error|fuzz: ' "$log" || echo "see $log")"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$execs" "$took" \
    "${result%%:*}" "$code" "$seed" >>"$build/ledger.tsv"
  printf '%-26s %8s %12s %10s %8s  %s\n' "$t" "$took" "$execs" "$rate" "$corpus" "$result"
  [ "$rc" = 0 ]
}

# Up to --jobs targets at once; each writes its row to a file of its own,
# and the table is printed in the targets' order once all are done.
# The slowest targets (about 100-300 executions a second) start first.
order=()
for t in fuzz_store_read fuzz_agent_body fuzz_agent_records fuzz_import_any; do
  [[ " ${targets[*]} " == *" $t "* ]] && order+=("$t")
done
for t in "${targets[@]}"; do [[ " ${order[*]} " == *" $t "* ]] || order+=("$t"); done
rows=$(mktemp -d)
trap 'rm -rf "$rows"' EXIT
running=0
for t in "${order[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$(( running - 1 )); fi
  { fuzz_one "$t" >"$rows/$t" || touch "$rows/$t.failed"; } &
  running=$(( running + 1 ))
done
wait
failed=()
printf '%-26s %8s %12s %10s %8s  %s\n' target seconds executions exec/s corpus result
for t in "${targets[@]}"; do
  cat "$rows/$t"
  [ ! -e "$rows/$t.failed" ] || failed+=("$t")
done
echo "== fuzz.sh: $(( $(date +%s) - t0 ))s in all"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs in $build/artifacts/, logs $build/<target>.log)" >&2
  exit 1
fi
exit 0
}
