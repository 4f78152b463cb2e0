"""Writes bench/RESULTS.md from the committed raw results in bench/results/.

The page opens with the current figure for each target, the commit it was
measured at, and the peers of the same run side by side; a Method section
follows. Nothing on the page is typed by hand: it is rendered from
bench/results/*.json, so it cannot drift from them.

Two kinds of file live in bench/results/:

  overhead-*.json  the raw output of `bench_overhead.py --json` (run.sh
                   writes it to bench/out/overhead-V.json; copy it here to
                   publish it). The headline rows and the peer tables are
                   computed from its medians here.
  *.json           a figures file: rows already reduced, with the bench,
                   command, commit, date, load and method they came from.
                   Figures carried over from the old lab notebook are of
                   this kind, marked "carried over" with the notebook
                   section they came from.

A figures file holds: title, bench, command, commit, date (YYYY-MM-DD),
load (as measured) and loaded (true when at least LOADED), provenance
("measured" or "carried over") and carried_from, method, limit (how far
from the physical limit), targets (rows of key, area, order, target,
figure, verdict, peers), tables (rows of table, key, cells) and
table_heads (table, order, title, columns) for tables of its own.

Each row has a key (a target, or a row of a peer table); when two files
give the same key, the later date wins, so publishing a new run replaces
the old figure without editing anything else.

    python bench/results.py            # rewrite bench/RESULTS.md
    python bench/results.py --check    # exit 1 if RESULTS.md differs (CI)
"""

from __future__ import annotations

import argparse
import difflib
import glob
import json
import os
import sys
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(HERE, "results")
PAGE = os.path.join(HERE, "RESULTS.md")

# The last commit at which bench/RESULTS.md was the lab notebook.
NOTEBOOK = "b21c769"

# Above this 1-minute load average on the 2-core VM a figure is marked.
LOADED = 2.0

AREAS = [
    "Capture",
    "autoprofile and serving",
    "Exports and report",
    "eBPF agent",
    "Store and queries",
    "diff",
]

PEER_COLUMNS = [
    "base2",
    "ours-d0",
    "ours-d1",
    "ours-d2",
    "ours-d-1",
    "cProfile",
    "viztracer",
    "pyinstr",
]
PEER_NAMES = {"cProfile": "cProfile", "viztracer": "viztracer", "pyinstr": "pyinstrument"}
OVERHEAD_METHOD = (
    "bench_overhead.py runs every contender once per repeat in a shuffled order, one profiler session per "
    "call as in production; start and stop are timed, tree building and saving are not, for anyone. Figures "
    "are median time over the unprofiled run's median, paired = median of the per-repeat ratio; `base2`, a "
    "second unprofiled run, is the noise floor. Full capture's share is (ours - 1) / (cProfile - 1). The "
    "physical limit is the `floor` contender, a no-op C hook on the same events (its row in the raw file)."
)
PEER_TITLES = {
    "fib": "fib(25), 242,786 Python calls",
    "tabular": "tabular pure-Python predict, ~16k calls",
    "calls": "the calls predict, ~16k calls (a generator resumed by the root, generator expressions in sum(), a recursion)",
    "predict": "scikit-learn Pipeline.predict, 1000 rows",
}
PEER_HEADS = [
    "base2 (noise)",
    "depth 0",
    "depth 1",
    "depth 2",
    "depth -1",
    "cProfile",
    "viztracer",
    "pyinstrument",
    "d-1 / cProfile overhead",
]


# ----------------------------------------------------------------- loading ---


def overhead_command(args: dict, ver: str) -> str:
    """The bench_overhead.py command a raw file came from (run.sh passes
    only --repeats: its default workloads and contenders)."""
    chosen = "".join(
        f" --{opt} {args[opt]}" for opt in ("workloads", "contenders") if args.get(opt)
    )
    if not chosen:
        return f"bench/run.sh {ver} (bench_overhead.py --repeats {args.get('repeats', '?')} --json)"
    return f"bench_overhead.py{chosen} --repeats {args.get('repeats', '?')} --json (Python {ver})"


def overhead_doc(raw: dict, name: str) -> dict:
    """A figures document computed from one bench_overhead.py --json output."""
    if raw.get("args", {}).get("smoke"):
        raise SystemExit(f"{name}: a --smoke run (one repeat, tiny inputs) is not a result")
    meta = raw.get("meta", {})
    py = raw["python"]
    ver = ".".join(py.split(".")[:2])
    wls = raw["workloads"]

    def rows(wl):
        return {r["contender"]: r for r in wls[wl]["rows"]} if wl in wls else {}

    def ratio(r):
        return f"{r['ratio']:.3f}"

    def peers(rs):
        return ", ".join(f"{PEER_NAMES[n]} {ratio(rs[n])}" for n in PEER_NAMES if n in rs)

    order = {"3.11": 0, "3.12": 1, "3.13": 2}.get(ver, 3)

    targets = []
    pred = rows("predict")
    if "ours-d2" in pred:
        r = pred["ours-d2"]
        limit = 1.05 if ver == "3.11" else 1.02
        targets.append(
            {
                "key": f"capture.predict.d2.{ver}",
                "area": "Capture",
                "target": f"Depth 2 on the Pipeline predict, {ver}: at most +{round((limit - 1) * 100)}%",
                "figure": f"{r['ratio']:.3f} (paired {r['paired_p50']:.3f})",
                "verdict": "met" if r["paired_p50"] <= limit else "**missed**",
                "peers": peers(pred),
                "order": 10 + order,
            }
        )
    for first, wl in ((20, "fib"), (24, "tabular")):
        rs = rows(wl)
        if "ours-d-1" in rs and "cProfile" in rs:
            share = (rs["ours-d-1"]["ratio"] - 1) / (rs["cProfile"]["ratio"] - 1)
            limit = 0.85 if ver == "3.11" else 0.6
            targets.append(
                {
                    "key": f"capture.full.{wl}.{ver}",
                    "area": "Capture",
                    "target": f"Full capture (depth -1) on {wl}, {ver}: at most {limit}x cProfile's overhead",
                    "figure": f"{share:.2f}x ({ratio(rs['ours-d-1'])} against {ratio(rs['cProfile'])})",
                    "verdict": "met" if share <= limit else "**missed**",
                    "peers": peers(rs),
                    "order": first + order,
                }
            )
    tables = []
    for wl, title in PEER_TITLES.items():
        rs = rows(wl)
        if not rs:
            continue
        cells = [ratio(rs[c]) if c in rs else "-" for c in PEER_COLUMNS]
        if "ours-d-1" in rs and "cProfile" in rs and wl != "predict":
            cells.append(f"{(rs['ours-d-1']['ratio'] - 1) / (rs['cProfile']['ratio'] - 1):.2f}")
        else:
            cells.append("-")
        tables.append({"table": "peers." + wl, "key": f"peers.{wl}.{ver}", "cells": [ver] + cells})
    load = meta.get("load")
    return {
        "file": name,
        "title": f"Capture overhead beside the peers, {py}",
        "bench": "bench_overhead.py",
        "provenance": "measured",
        "commit": meta.get("commit", "?")
        + (" + uncommitted changes" if meta.get("uncommitted") else ""),
        "date": meta.get("date", "?")[:10],
        "when": meta.get("date", "?"),
        "load": f"{load:.1f}" if isinstance(load, (int, float)) else load,
        "loaded": isinstance(load, (int, float)) and load >= LOADED,
        "command": overhead_command(raw.get("args", {}), ver),
        "method": OVERHEAD_METHOD,
        "targets": targets,
        "tables": tables,
    }


def load_docs(directory: str = RESULTS_DIR) -> List[dict]:
    """Every results file as a figures document, in file name order."""
    docs = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        name = os.path.basename(path)
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if "workloads" in data:
            docs.append(overhead_doc(data, name))
        else:
            data["file"] = name
            docs.append(data)
    return docs


def current(docs: List[dict], field: str) -> Dict[str, tuple]:
    """key -> (row, doc) for the newest document that gives each key."""
    best: Dict[str, tuple] = {}
    for doc in docs:
        for row in doc.get(field, []):
            old = best.get(row["key"])
            if old is None or doc.get("when", doc["date"]) > old[1].get("when", old[1]["date"]):
                best[row["key"]] = (row, doc)
    return best


# --------------------------------------------------------------- rendering ---


def measured_at(doc: dict, link: bool = True) -> str:
    """The commit and date, linked to the raw file; 'carried' and 'load' are marked."""
    text = f"`{doc['commit']}` {doc['date']}"
    if link:
        text = f"[{text}](results/{doc['file']})"
    marks = []
    if doc.get("provenance") != "measured":
        marks.append("carried")
    if doc.get("loaded"):
        marks.append(f"load {doc['load']}")
    return text + (f" ({', '.join(marks)})" if marks else "")


def cell(text: Optional[str]) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def render(docs: List[dict]) -> str:
    """The whole page."""
    out: List[str] = []
    w = out.append
    w("# Benchmark results")
    w("")
    w("<!-- Generated by bench/results.py from bench/results/*.json: do not edit by hand.")
    w("     Regenerate: python bench/results.py; CI checks: python bench/results.py --check -->")
    w("")
    w("The current figure for each target, the commit and date it was measured at (linked to")
    w('its raw file in bench/results/), and the peers of the same run. "carried": carried over')
    w("from the lab notebook this page replaced (`git log -p bench/RESULTS.md` keeps it), not")
    w('re-run since. "load": measured while the shared 2-vCPU VM\'s 1-minute load average was')
    w(f"{LOADED:.0f} or more: read the ratios, not the milliseconds. How each figure is measured,")
    w("and how far it is from its physical limit: [Method](#method).")
    w("")
    render_depths(docs, w)
    targets = current(docs, "targets")
    order = {a: i for i, a in enumerate(AREAS)}
    rows = sorted(
        targets.values(), key=lambda rd: (order.get(rd[0]["area"], 99), rd[0].get("order", 0))
    )
    w("## Targets")
    w("")
    w("| area | target | current figure | verdict | peers, same run | measured at |")
    w("|---|---|---|---|---|---|")
    for row, doc in rows:
        w(
            f"| {cell(row['area'])} | {cell(row['target'])} | {cell(row['figure'])} | {cell(row['verdict'])} |"
            f" {cell(row.get('peers')) or '-'} | {measured_at(doc)} |"
        )
    w("")
    render_peers(docs, w)
    w("## Method")
    w("")
    w("Figures come from the shared 2-vCPU VMs (KVM guests, Linux 6.18) other engineers")
    w("build and test on. Their host is not always the same CPU (AMD EPYC before; an Intel")
    w("Xeon on 2026-12-06, whose rdtsc costs 10.5 ns: capture-wallclock-bbe0fd1), so")
    w("nanoseconds are compared only within one run. Every comparison is made within one run")
    w("(contenders interleaved or alternated), and its noise floor, a second unprofiled run")
    w("(`base2`, A/A', A1/A2), is reported beside it in the raw file.")
    w("")
    for doc in sorted(docs, key=lambda d: d["file"]):
        w(f"### {doc['title']}")
        w("")
        w(
            f"- **Measured at** {measured_at(doc, link=False)}"
            + (f"; load average {doc['load']}" if doc.get("load") and not doc.get("loaded") else "")
            + "."
        )
        if doc.get("carried_from"):
            w(f"- **Carried over from** {doc['carried_from']}.")
        w(f"- **Command:** `{doc['command']}`")
        if doc.get("method"):
            w(f"- **How:** {doc['method']}")
        if doc.get("limit"):
            w(f"- **Physical limit:** {doc['limit']}")
        w(f"- **Raw:** [results/{doc['file']}](results/{doc['file']})")
        w("")
    w("### History")
    w("")
    w(f"Until {NOTEBOOK} this page was a lab notebook: every session's runs, what was tried and")
    w("not kept, and why targets were missed at the time. Code and docs that cite a section of")
    w('bench/RESULTS.md by name ("Issue 16, eighth session", "Issue 19, item 2", ...) cite')
    w(f"that notebook: `git show {NOTEBOOK}:bench/RESULTS.md`.")
    w("")
    w("### Regenerating")
    w("")
    w("Run a benchmark (its command above; `bench/run.sh V` writes `bench/out/overhead-V.json`),")
    w("copy its raw output into `bench/results/` (a bench_overhead JSON as it is; other")
    w("benches' figures as a figures file with the commit, date and load), then")
    w("`python bench/results.py`. The newest file for a key replaces the older figure; delete")
    w("a superseded file once none of its keys is current. `python bench/results.py --check`")
    w("fails when this page and the files disagree.")
    return "\n".join(out) + "\n"


def render_depths(docs: List[dict], w) -> None:
    """The first table: per version and workload, each depth beside each
    peer and the noise floor (the peers.* rows of bench_overhead runs)."""
    rows = [rd for key, rd in current(docs, "tables").items() if key.startswith("peers.")]
    if not rows:
        return
    wls = list(PEER_TITLES)
    rows.sort(key=lambda rd: (rd[0]["cells"][0], wls.index(rd[0]["table"].split(".", 1)[1])))
    w("## Every depth beside every peer")
    w("")
    w("Wall clock, one profiler session per call: median time over the unprofiled run's median,")
    w("from one `bench_overhead.py` run per version (what `bench/run.sh` runs; contenders")
    w("shuffled per repeat); base2, a second unprofiled run, is that run's noise floor. Workloads:")
    w("; ".join(f"{wl}, {title}" for wl, title in PEER_TITLES.items()) + ".")
    w("")
    cols = ["Python", "workload"] + PEER_HEADS + ["measured at"]
    w("| " + " | ".join(cols) + " |")
    w("|" + "---|" * len(cols))
    for row, doc in rows:
        wl = row["table"].split(".", 1)[1]
        cells = [row["cells"][0], wl] + row["cells"][1:]
        w("| " + " | ".join(cell(c) for c in cells) + f" | {measured_at(doc)} |")
    w("")


def render_peers(docs: List[dict], w) -> None:
    """The other peer tables: each row from the newest run that has it."""
    rows = {k: rd for k, rd in current(docs, "tables").items() if not k.startswith("peers.")}
    by_table: Dict[str, list] = {}
    for key, (row, doc) in sorted(rows.items()):
        by_table.setdefault(row["table"], []).append((row, doc))
    heads = {doc_t["table"]: doc_t for doc in docs for doc_t in doc.get("table_heads", [])}
    w("## Peers side by side")
    w("")
    for name in sorted(by_table, key=lambda n: (heads.get(n, {}).get("order", 50), n)):
        head = heads[name]
        w(f"### {head['title']}")
        w("")
        cols = head["columns"] + ["measured at"]
        w("| " + " | ".join(cols) + " |")
        w("|" + "---|" * len(cols))
        for row, doc in by_table[name]:
            w("| " + " | ".join(cell(c) for c in row["cells"]) + f" | {measured_at(doc)} |")
        w("")
        if head.get("note"):
            w(head["note"])
            w("")


# -------------------------------------------------------------------- main ---


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--check", action="store_true", help="compare, do not write; exit 1 on a difference"
    )
    ap.add_argument("--results", default=RESULTS_DIR, help="the raw results folder")
    ap.add_argument("--out", default=PAGE, help="the page to write or check")
    args = ap.parse_args(argv)
    page = render(load_docs(args.results))
    if args.check:
        try:
            with open(args.out, encoding="utf-8") as f:
                have = f.read()
        except FileNotFoundError:
            have = ""
        if have != page:
            diff = difflib.unified_diff(
                have.splitlines(True), page.splitlines(True), args.out, "generated"
            )
            sys.stdout.writelines(list(diff)[:80])
            print(
                f"\n{args.out} is not what bench/results.py generates: run python bench/results.py",
                file=sys.stderr,
            )
            return 1
        print(f"{args.out}: up to date with {args.results}")
        return 0
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(page)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
