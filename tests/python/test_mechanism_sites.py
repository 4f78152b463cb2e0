"""Which mechanism a site's sessions use on 3.12+ (docs/capture.md, "Sites"):
the first measured session at a site (the frame that entered it, or the
model's predict under autoprofile) runs in windows, the next with global
events, and from then on the one whose hook events per recorded event were
fewer (global: under 1.4 times the windows figure). The tree never depends
on it. Each test runs in a fresh interpreter: sites are learnt per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="3.12+: the sites choose between windows and global events"
)

WINDOWS, GLOBAL = "eval_frame+sys.monitoring", "sys.monitoring"

WORKLOADS = """
import json, sys
from mlflow_profiler import _core, profiling

def clip(v):
    return min(max(v, -1.0), 1.0)

def weight(v):
    return clip(v * 0.5)

def settle(x, n):
    return x if n == 0 else settle(x * 0.5 + 0.1, n - 1)

def fields(row):
    for v in row:
        yield v

def shallow(rows):
    # Most calls within a ceiling of 2: a generator resumed per row, a
    # generator expression summed by a builtin, a short recursion.
    out = []
    for row in rows:
        s = sum(weight(v) for v in fields(row))
        out.append(settle(s, 3))
    return out

def chain(v, n):
    return v if n == 0 else chain(v + 1, n - 1)

def step(v):
    return chain(v, 40)

def deep(rows):
    # Most calls far below a ceiling of 2.
    return [sum(step(v) for v in row) for row in rows]

ROWS = [[0.1 * i, 0.2 * i, 0.3 * i] for i in range(300)]

def tree(s):
    counts = {}
    for sp in s.spans:
        counts[sp.function] = counts.get(sp.function, 0) + 1
    return sorted(counts.items())

def at_site(work, depth):
    with profiling(depth=depth) as s:
        e0 = _core.hook_event_count()
        result = work(ROWS)
        e1 = _core.hook_event_count()
    st = s.statistics()
    return {"engine": st["engine"], "hook_events": e1 - e0, "recorded": st["events_captured"],
            "tree": tree(s), "result": result, "failures": st["failures"]}
"""


def child(code: str) -> dict:
    """Runs WORKLOADS then `code` in a new interpreter; `code` prints one
    JSON object last."""
    proc = subprocess.run(
        [sys.executable, "-c", WORKLOADS + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def per_recorded(run: dict) -> float:
    """The figure a site's choice is made on: hook events per recorded event."""
    return run["hook_events"] / run["recorded"]


def assert_same_capture(runs: list) -> None:
    """The same tree and result whichever mechanism reported them."""
    first = runs[0]
    assert all(r["tree"] == first["tree"] and r["result"] == first["result"] for r in runs)


def test_a_site_whose_calls_are_mostly_recorded_moves_to_global_events():
    out = child("""
runs = [at_site(shallow, 2) for _ in range(5)]
print(json.dumps(runs))
""")
    assert [r["engine"] for r in out] == [WINDOWS, GLOBAL, GLOBAL, GLOBAL, GLOBAL]
    windows, global_ = out[0], out[1]
    assert windows["recorded"] >= 1000  # big enough to be measured
    # Global sent fewer hook events per recorded event than 1.4 times what
    # windows sent.
    assert per_recorded(global_) < 1.4 * per_recorded(windows)
    assert_same_capture(out)
    assert all(r["failures"] == [] for r in out)


def test_a_site_whose_calls_run_mostly_below_the_ceiling_stays_in_windows():
    out = child("""
runs = [at_site(deep, 2) for _ in range(5)]
print(json.dumps(runs))
""")
    # The second session is the probe; global events cost more here.
    assert [r["engine"] for r in out] == [WINDOWS, GLOBAL, WINDOWS, WINDOWS, WINDOWS]
    windows, global_ = out[0], out[1]
    assert per_recorded(global_) >= 1.4 * per_recorded(windows)
    assert_same_capture(out)
    assert all(r["failures"] == [] for r in out)


def test_a_site_whose_predicts_change_shape_measures_again():
    """A site whose sessions ran deep predicts (windows chosen, the global
    figure 15 times the windows one) and then shallow ones: the global
    figure was a deep predict's, and kept the shallow ones in windows for
    good. The figure not in use ages: after 8 sessions the other mechanism
    runs once (then 16, 32, ... while it confirms the choice), so the
    shallow predicts move to global events, and the deep ones back."""
    out = child("""
runs = [at_site(deep, 2) for _ in range(10)] + [at_site(shallow, 2) for _ in range(20)]
runs += [at_site(deep, 2) for _ in range(12)]
print(json.dumps(runs))
""")
    engines = [r["engine"] for r in out]
    # deep: the first in windows, the probe, then windows but for one
    # session of global events 8 sessions on
    assert engines[:2] == [WINDOWS, GLOBAL] and engines[2:10].count(GLOBAL) == 1
    # shallow: windows until global runs again (16 sessions after that), then global
    assert engines[10:25] == [WINDOWS] * 15 and engines[25:30] == [GLOBAL] * 5
    # deep again: its first global session's figure sends it back to windows
    assert engines[-4:] == [WINDOWS] * 4
    assert_same_capture(out[10:30])
    assert all(r["failures"] == [] for r in out)


def test_sites_are_told_apart_by_their_code_and_depth():
    out = child("""
def through(work, depth):     # calls at_site: the sessions are still at_site's
    return at_site(work, depth)

def another_site(work, depth):
    with profiling(depth=depth) as s:
        work(ROWS)
    return s.statistics()["engine"]

first = [at_site(shallow, 2)["engine"] for _ in range(3)]
same = [through(shallow, 2)["engine"] for _ in range(3)]
other = [another_site(shallow, 2) for _ in range(3)]
deeper = [at_site(shallow, 3)["engine"] for _ in range(3)]
print(json.dumps({"first": first, "same": same, "other": other, "deeper": deeper}))
""")
    assert out["first"] == [WINDOWS, GLOBAL, GLOBAL]
    # The site is the code of the frame that entered the session.
    assert out["same"] == [GLOBAL, GLOBAL, GLOBAL]
    assert out["other"] == [WINDOWS, GLOBAL, GLOBAL]
    # One code at two ceilings: two sites.
    assert out["deeper"] == [WINDOWS, GLOBAL, GLOBAL]


def test_small_sessions_overlapping_ones_and_depth_0_learn_nothing():
    out = child("""
small = [at_site(lambda rows: shallow(rows[:20]), 2)["engine"] for _ in range(3)]
ceiling0 = [at_site(shallow, 0)["engine"] for _ in range(3)]

def overlapped():
    with profiling(depth=2) as outer:
        shallow(ROWS)
        with profiling(depth=1):   # another session starting ends the measurement
            pass
        shallow(ROWS)
    return outer.statistics()["engine"]

nested = [overlapped() for _ in range(3)]
c_calls = []
for _ in range(3):
    with profiling(depth=2, capture_c_calls=True) as s:
        shallow(ROWS)
    c_calls.append(s.statistics()["engine"])
print(json.dumps({"small": small, "ceiling0": ceiling0, "nested": nested, "c_calls": c_calls}))
""")
    assert out["small"] == [WINDOWS] * 3  # fewer than 1,000 recorded events: not measured
    assert out["ceiling0"] == [WINDOWS] * 3
    assert out["nested"] == [WINDOWS] * 3
    assert out["c_calls"] == [WINDOWS] * 3


def test_a_site_named_before_start_is_its_own():
    """Autoprofile's sessions are all entered by one wrapper; it names the
    model's class as their site (_mark_autoprofile), so two models served by
    one process each get their own choice."""
    out = child("""
class Shallow:
    pass

class Deep:
    pass

def served(model, work):     # the wrapper: one entering frame for both
    s = profiling(depth=2)
    s._engine._mark_autoprofile(type(model))
    with s:
        work(ROWS)
    return s.statistics()["engine"]

a, b = Shallow(), Deep()
engines = {"a": [], "b": []}
for _ in range(4):
    engines["a"].append(served(a, shallow))
    engines["b"].append(served(b, deep))
print(json.dumps(engines))
""")
    assert out["a"] == [WINDOWS, GLOBAL, GLOBAL, GLOBAL]
    assert out["b"] == [WINDOWS, GLOBAL, WINDOWS, WINDOWS]


def test_with_no_tool_id_free_a_site_that_chose_global_events_runs_in_windows():
    """Global events need a sys.monitoring tool id; a program holding all
    six leaves none. A site that would choose them runs its sessions in
    windows instead, as its first one did: the choice adds no failure (3.12:
    none at all; 3.13+ needs an id in windows too, for the calls of classes,
    and every session says so alike)."""
    out = child("""
def flat(rows):   # no generator: windows need no tool id on 3.12
    out = []
    for row in rows:
        for v in row:
            out.append(settle(weight(v), 2))
    return out

free = [at_site(flat, 2)["engine"] for _ in range(3)]   # flat's site chooses global events

def taken(rows):
    return flat(rows)

for i in range(6):
    if sys.monitoring.get_tool(i) is None:
        sys.monitoring.use_tool_id(i, f"another tool {i}")
runs = [at_site(taken, 2) for _ in range(4)]
print(json.dumps({"free": free, "runs": runs}))
""")
    assert out["free"] == [WINDOWS, GLOBAL, GLOBAL]
    runs = out["runs"]
    assert [r["engine"] for r in runs] == [WINDOWS] * 4
    assert all(r["failures"] == runs[0]["failures"] and r["tree"] == runs[0]["tree"] for r in runs)
    if sys.version_info < (3, 13):
        assert runs[0]["failures"] == [] and runs[0]["recorded"] >= 1000
