"""How often `mlprof diff` is right (issue 41): false alarms and power of the
gate on real captured runs.

    python bench/bench_diff.py --out bench/out/diff                 # about 15 min quiet, 30 loaded
    python bench/bench_diff.py --out /tmp/d --quads 4 --mlflow-quads 2 --loads quiet    # smoke

1. Capture. Per model kind (diff_workload.py: cpu, sleep, mlflow) and
   machine load (quiet; loaded: --hogs busy-looping processes, one per CPU
   by default, or whatever else runs beside), QUADS
   independent quads: each 10 runs of every variant, a (the baseline), a2
   (the same code again), b15 and b40 (score 15% and 40% slower). A run is
   one forked process (MLflow imported once by the parent, the model loaded
   in each child) of --calls predicts under profiling(). Within a quad the
   variants are interleaved run by run, their order rotated, so drift in
   the machine's load falls on all alike.
2. Decide. Each quad is one A/A pair (a vs a2), one +15% pair and one +40%
   pair (a vs b15, b40), given to analysis.diff at its defaults with 10
   runs a side, and with its first 5; two quads together make a pair of 20
   runs a side. Pairs of one effect share no run: they are independent.
3. Report: per configuration the share of pairs whose verdict is
   regression, pass, inconclusive; whether score was named; and the wrong
   verdicts: a regression in an A/A pair, "pass" when score is slower, or
   a named path that is not score, an ancestor of it, or under it (the
   slowed work itself). results.json, a markdown table (results.md) and a
   plot (power.svg, with matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

VARIANTS = {"a": 1.0, "a2": 1.0, "b15": 1.15, "b40": 1.40}
RUNS_A_QUAD = 10
EFFECTS = {0: "a2", 15: "b15", 40: "b40"}


def _capture_one(kind: str, factor: float, out: Path, calls: int, model_dir: Path) -> None:
    """In the forked child: one run's profile to `out`."""
    from mlflow_profiler import profiling

    if kind == "mlflow":
        import mlflow.pyfunc
        import numpy as np
        import pandas as pd

        os.environ["BENCH_SCORE_FACTOR"] = str(factor)
        model = mlflow.pyfunc.load_model(str(model_dir))
        df = pd.DataFrame(
            np.random.default_rng(1).standard_normal((64, 4)), columns=[f"f{i}" for i in range(4)]
        )
        model.predict(df)  # warm, outside the profile, as a served model is
        with profiling(depth=3) as session:
            for _ in range(calls):
                model.predict(df)
    else:
        from diff_workload import Steps

        steps = Steps(kind, factor)
        with profiling(depth=-1) as session:
            for _ in range(calls):
                steps.predict()
    session.save(str(out))


def _save_model(model_dir: Path) -> None:
    import mlflow.pyfunc
    import numpy as np
    import pandas as pd
    from diff_workload import pyfunc_model_class
    from mlflow.models import infer_signature

    if model_dir.exists():
        return
    df = pd.DataFrame(
        np.random.default_rng(1).standard_normal((4, 4)), columns=[f"f{i}" for i in range(4)]
    )
    mlflow.pyfunc.save_model(
        str(model_dir),
        python_model=pyfunc_model_class()(),
        signature=infer_signature(df, np.zeros(4, dtype=int)),
    )


def capture(kind: str, load: str, quads: int, calls: int, out: Path, hogs: int) -> Path:
    """Captures `quads` quads of 10 runs a variant into out/KIND-LOAD/
    (q{quad}-{variant}-{run}.json); returns that folder."""
    folder = out / f"{kind}-{load}"
    folder.mkdir(parents=True, exist_ok=True)
    model_dir = out / "model"
    if kind == "mlflow":
        _save_model(model_dir)
        import mlflow.pyfunc  # noqa: F401  (imported once: each forked run skips the 5 s import)
        import pandas  # noqa: F401
    busy = []
    if load == "loaded":
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    loads = [os.getloadavg()[0]]
    try:
        names = list(VARIANTS)
        for q in range(quads):
            for r in range(RUNS_A_QUAD):
                turn = (q * RUNS_A_QUAD + r) % len(names)
                for v in names[turn:] + names[:turn]:
                    path = folder / f"q{q:03d}-{v}-{r:02d}.json"
                    if path.exists():
                        continue
                    pid = os.fork()
                    if pid == 0:
                        code = 0
                        try:
                            _capture_one(kind, VARIANTS[v], path, calls, model_dir)
                        except BaseException:
                            traceback.print_exc()
                            code = 1
                        os._exit(code)
                    _, status = os.waitpid(pid, 0)
                    if status != 0:
                        raise SystemExit(f"bench_diff: the run for {path} failed")
            loads.append(os.getloadavg()[0])
    finally:
        for h in busy:
            h.kill()
            h.wait()
    (folder / "load.json").write_text(json.dumps({"hogs": len(busy), "loadavg_1min": loads}))
    return folder


def _score_path(result):
    """The slowed step's path: the shortest one ending in score."""
    paths = [p.path for p in result.paths if p.path[-1].rsplit(".", 1)[-1].startswith("score")]
    return min(paths, key=len) if paths else None


def _tally(c: dict, result, effect: int) -> None:
    c["pairs"] += 1
    c[result.verdict] += 1
    score = _score_path(result)
    named = [p.path for p in result.regressions()]
    # score, its ancestors, and what it calls (the slowed work itself).
    allowed = [score[:k] for k in range(1, len(score) + 1)] if score else []
    other = any(p not in allowed and p[: len(score or [])] != score for p in named)
    c["score_named"] += score in named
    c["other_named"] += other
    slowed = next((p for p in result.paths if p.path == score), None)
    c["wrong"] += (
        (effect == 0 and result.verdict == "regression")
        or other
        or (effect > 0 and slowed is not None and slowed.verdict == "pass")
    )


def decide(folder: Path, quads: int):
    """Every pair's verdicts for one capture folder: {effect: {runs a side: counts}}."""
    from mlflow_profiler import analysis, load

    def runs(q: int, v: str, n: int):
        return [load(str(folder / f"q{q:03d}-{v}-{r:02d}.json")) for r in range(n)]

    out = {}
    for effect, variant in EFFECTS.items():
        out[effect] = {}
        for n in (5, 10, 20):
            c = {
                "pairs": 0,
                "regression": 0,
                "pass": 0,
                "inconclusive": 0,
                "score_named": 0,
                "wrong": 0,
                "other_named": 0,
                "error": 0,
                "seconds": 0.0,
            }
            groups = (
                [[q] for q in range(quads)]
                if n <= RUNS_A_QUAD
                else [[q, q + 1] for q in range(0, quads - 1, 2)]
            )
            for group in groups:
                a = [s for q in group for s in runs(q, "a", min(n, RUNS_A_QUAD))]
                b = [s for q in group for s in runs(q, variant, min(n, RUNS_A_QUAD))]
                t = time.perf_counter()
                try:
                    result = analysis.diff(a, b)
                except analysis.DiffError:
                    c["error"] += 1
                    continue
                c["seconds"] += time.perf_counter() - t
                _tally(c, result, effect)
            out[effect][n] = c
    return out


def _rate(n: int, d: int) -> str:
    return "-" if d == 0 else f"{100 * n / d:.0f}%"


def report(results: dict, meta: dict) -> str:
    """The markdown table of every configuration."""
    lines = [
        f"{meta['quads']} quads (mlflow {meta['mlflow_quads']}) of 10 runs a variant, {meta['calls']} predicts "
        "a run; pairs of 20 runs a side join two quads; diff at its defaults (p50 wall time per root call, "
        "threshold 10%, 95%, floors 5% and 20 us)",
        "",
        "| model | machine | effect on score | runs a side | pairs | regression | score named | pass | inconclusive "
        "| wrong | other path named | s a diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, per_effect in results.items():
        kind, load = key.split("-")
        for effect, per_runs in per_effect.items():
            for runs, c in per_runs.items():
                n = c["pairs"]
                what = "A/A" if int(effect) == 0 else f"+{effect}%"
                lines.append(
                    f"| {kind} | {load} | {what} | {runs} | {n} "
                    f"| {_rate(c['regression'], n)} | {_rate(c['score_named'], n)} | {_rate(c['pass'], n)} "
                    f"| {_rate(c['inconclusive'], n)} | {_rate(c['wrong'], n)} | {_rate(c['other_named'], n)} "
                    f"| {c['seconds'] / max(n, 1):.3f} |"
                )
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> bool:
    """Detection rate of score (and A/A false alarms) against runs a side, a
    panel per model and machine; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    results = json.loads(json.dumps(results))  # every key a string
    kinds = sorted({k.split("-")[0] for k in results})
    loads = sorted({k.split("-")[1] for k in results}, reverse=True)  # quiet first
    fig, axes = plt.subplots(
        len(loads),
        len(kinds),
        figsize=(3.3 * len(kinds), 2.8 * len(loads)),
        sharey=True,
        squeeze=False,
    )
    for row, load in enumerate(loads):
        for col, kind in enumerate(kinds):
            ax = axes[row][col]
            for effect, per_runs in results.get(f"{kind}-{load}", {}).items():
                xs = sorted(int(r) for r in per_runs)
                key = "regression" if effect == "0" else "score_named"
                ys = [100 * per_runs[str(r)][key] / max(per_runs[str(r)]["pairs"], 1) for r in xs]
                ax.plot(
                    xs,
                    ys,
                    "k--o" if effect == "0" else "-o",
                    label="A/A: false alarms" if effect == "0" else f"+{effect}%: score caught",
                )
            ax.set_title(f"{kind}, {load} machine", fontsize=9)
            ax.set_xlabel("runs a side")
            ax.set_xticks([5, 10, 20])
            ax.set_ylim(-5, 105)
            ax.axhline(5, color="grey", lw=0.5)
            ax.axhline(90, color="grey", lw=0.5)
    for row in range(len(loads)):
        axes[row][0].set_ylabel("% of pairs")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    return True


def main() -> int:
    """Captures, decides, reports."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--kinds", default="cpu,sleep,mlflow")
    ap.add_argument("--loads", default="quiet,loaded")
    ap.add_argument("--quads", type=int, default=100)
    ap.add_argument("--mlflow-quads", type=int, default=25)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument(
        "--hogs",
        type=int,
        default=os.cpu_count() or 1,
        help="busy-looping processes while a loaded machine is captured (default: one per CPU); 0 when "
        "something else loads it (the project's CI, run beside)",
    )
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    results, timing = {}, {}
    for kind in args.kinds.split(","):
        for load in args.loads.split(","):
            quads = args.mlflow_quads if kind == "mlflow" else args.quads
            t = time.time()
            folder = capture(kind, load, quads, args.calls, args.out, args.hogs)
            t2 = time.time()
            results[f"{kind}-{load}"] = decide(folder, quads)
            timing[f"{kind}-{load}"] = {
                "capture_s": round(t2 - t, 1),
                "decide_s": round(time.time() - t2, 1),
            }
            print(
                f"{kind}-{load}: captured in {t2 - t:.0f} s, decided in {time.time() - t2:.0f} s",
                flush=True,
            )
    meta = {
        "quads": args.quads,
        "mlflow_quads": args.mlflow_quads,
        "calls": args.calls,
        "timing": timing,
        "python": sys.version.split()[0],
        "loadavg": os.getloadavg(),
    }
    saved = args.out / "results.json"
    if (
        saved.exists()
    ):  # another --loads or --kinds run into the same folder: kept beside this one's
        before = json.loads(saved.read_text())
        results = {**before["results"], **json.loads(json.dumps(results))}
        meta["timing"] = {**before["meta"].get("timing", {}), **timing}
    saved.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    table = report(results, meta)
    (args.out / "results.md").write_text(table)
    print(table)
    if plot(results, args.out / "power.svg"):
        print(f"plot: {args.out / 'power.svg'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
