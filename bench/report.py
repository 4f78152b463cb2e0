"""Markdown tables from the raw outputs of bench/run.sh (bench/out/*.json,
core.txt), versions side by side, for bench/RESULTS.md.

    python3 bench/report.py [bench/out] [3.11 3.13]
"""

from __future__ import annotations

import json
import os
import re
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
VERSIONS = sys.argv[2:] or ["3.11", "3.13"]


def load(name):
    path = os.path.join(OUT, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


over = {v: load(f"overhead-{v}.json") for v in VERSIONS}
noop = {v: load(f"noop-{v}.json") for v in VERSIONS}
vs = [v for v in VERSIONS if over[v]]


def rows_of(v, wl):
    return {r["contender"]: r for r in over[v]["workloads"][wl]["rows"]}


def overhead_table(wl, per_call):
    names = list(rows_of(vs[0], wl))
    head = "| contender |"
    sep = "|---|"
    for v in vs:
        py = over[v]["python"]
        head += f" {py} median ms | {py} ratio | {py} paired p50 (p25-p75) |"
        sep += "---:|---:|---:|"
        if per_call:
            head += f" {py} ns/call |"
            sep += "---:|"
    print(head)
    print(sep)
    for n in names:
        line = f"| {n} |"
        for v in vs:
            r = rows_of(v, wl).get(n)
            if r is None:
                line += " n/a | n/a | n/a |" + (" n/a |" if per_call else "")
                continue
            line += (f" {r['median_ms']:.4g} | {r['ratio']:.3f} |"
                     f" {r['paired_p50']:.3f} ({r['paired_p25']:.3f}-{r['paired_p75']:.3f}) |")
            if per_call:
                line += f" {r['ns_per_call']:.0f} |"
        print(line)
    calls = " / ".join(
        f"{over[v]['python']}: {over[v]['workloads'][wl]['calls']['call']:,} Python calls, "
        f"{over[v]['workloads'][wl]['calls']['c_call']:,} C calls" for v in vs)
    print(f"\nCalls per run ({wl}): {calls}\n")


def session_table():
    names = list(rows_of(vs[0], "empty"))
    print("| contender | " + " | ".join(f"{over[v]['python']} us/session over base" for v in vs) + " |")
    print("|---|" + "---:|" * len(vs))
    for n in names:
        cells = []
        for v in vs:
            rows = rows_of(v, "empty")
            cells.append(f"{(rows[n]['median_ms'] - rows['base']['median_ms']) * 1e3:.1f}" if n in rows else "n/a")
        print(f"| {n} | " + " | ".join(cells) + " |")
    print()


def noop_table():
    nv = [v for v in VERSIONS if noop[v]]
    if not nv:
        return
    cases = list(noop[nv[0]]["cases"])
    print("| case | " + " | ".join(f"{noop[v]['python']} ns (p25-p75) | {noop[v]['python']} over bare"
                                    for v in nv) + " |")
    print("|---|" + "---:|---:|" * len(nv))
    for c in cases:
        cells = []
        for v in nv:
            d = noop[v]["cases"][c]
            cells.append(f"{d['median_ns']:.1f} ({d['p25']:.1f}-{d['p75']:.1f})")
            cells.append("" if d["over_bare_ns"] is None else f"{d['over_bare_ns']:+.1f}")
        print(f"| `{c}` | " + " | ".join(cells) + " |")
    print()


def core():
    path = os.path.join(OUT, "core.txt")
    if not os.path.exists(path):
        return
    text = open(path).read()
    print("```\n" + text.strip() + "\n```")
    b = re.search(r"build_tree:.*median ([\d.]+) ms", text)
    j = re.search(r"to_json_document:.*median ([\d.]+) ms", text)
    if b and j:
        print(f"\nbuild + JSON: {float(b.group(1)) + float(j.group(1)):.1f} ms (sum of the medians)\n")
    for v in VERSIONS:
        path = os.path.join(OUT, f"render-{v}.txt")
        if os.path.exists(path):
            print("From Python (`bench_render.py`), a real capture:\n\n```\n" + open(path).read().strip() + "\n```\n")


if vs:
    print("### fib (call-heavy)\n")
    overhead_table("fib", True)
    if all("tabular" in over[v]["workloads"] for v in vs):
        print("### tabular pure-Python predict (generators, comprehensions)\n")
        overhead_table("tabular", True)
    print("### Pipeline.predict, 1000 rows (per predict)\n")
    overhead_table("predict", False)
    print("### Session start + stop (empty body)\n")
    session_table()
print("### Disabled profile_span / profile_block\n")
noop_table()
print("### Core: 1M events\n")
core()
