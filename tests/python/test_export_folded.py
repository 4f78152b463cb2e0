"""Folded stacks of real captures: the lines are the profile's stacks and self
times, threads and tasks are roots, and a real flame graph tool (inferno, the
Rust port of flamegraph.pl) reads every line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections import defaultdict
from typing import Dict, List

from _helpers import require_tool

from mlflow_profiler import _core, profile_span, profiling

INFERNO = shutil.which("inferno-flamegraph") or next(
    (p for p in [os.path.expanduser("~/.cargo/bin/inferno-flamegraph")] if os.path.exists(p)), None
)


def folded(session) -> str:
    return _core.export_bytes(session._built(), "folded").decode("utf-8")


def parse(text: str) -> Dict[str, int]:
    """{stack: value}, read the way flamegraph.pl does: the count is after the
    last space."""
    assert text.endswith("\n")
    out: Dict[str, int] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        assert stack and count.isdigit(), line
        assert stack not in out, f"stack written twice: {stack}"
        out[stack] = int(count)
    return out


def expected(session) -> Dict[str, int]:
    """The stacks and summed self times, computed from the profile document."""
    doc = json.loads(session.to_json())
    strings, functions, lanes = doc["strings"], doc["functions"], doc["lanes"]
    spans = [dict(zip(doc["span_fields"], row)) for row in doc["spans"]]

    def frame(name: str) -> str:
        name = name.replace(";", ":")
        return "".join(" " if ord(c) < 0x20 or c == "\x7f" else c for c in name) or "?"

    names = [
        frame(strings[s["label"]] if s["label"] else strings[functions[s["function"]][0]])
        for s in spans
    ]
    self_ns = [s["active_ns"] for s in spans]
    for s in spans:
        if s["parent"] >= 0 and spans[s["parent"]]["lane"] == s["lane"]:
            self_ns[s["parent"]] -= s["active_ns"]
    several = len({s["lane"] for s in spans}) > 1
    out: Dict[str, int] = defaultdict(int)
    for i, s in enumerate(spans):
        stack: List[str] = []
        j = i
        while j >= 0:
            stack.append(names[j])
            j = spans[j]["parent"]
        if several:
            lane = lanes[s["lane"]]
            title = f"thread {lane['thread_name'] or lane['thread_id']}"
            stack.append(frame(title + (f", task {lane['task']}" if lane["task"] else "")))
        out[";".join(reversed(stack))] += max(self_ns[i], 0)
    return {k: v for k, v in out.items() if v > 0}


def load_model():
    time.sleep(0.02)


def transform():
    time.sleep(0.005)


def predict():
    load_model()
    for _ in range(3):
        transform()


def test_lines_are_the_profile_stacks_and_self_times(engine):
    with profiling(depth=-1, engine=engine) as session:
        predict()
    stacks = parse(folded(session))
    assert stacks == expected(session)
    assert stacks["predict;load_model"] >= 20_000_000
    assert stacks["predict;transform"] >= 15_000_000  # three calls, one line
    assert not any(s.startswith("thread ") for s in stacks)  # one lane: no thread frame


def work(ms):
    time.sleep(ms / 1000)


def run_workers():
    threads = [threading.Thread(target=work, args=(3,), name=f"worker;{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_each_thread_is_a_root(engine):
    with profiling(depth=-1, all_threads=True, engine=engine) as session:
        run_workers()
    stacks = parse(folded(session))
    assert stacks == expected(session)
    roots = {s.split(";", 1)[0] for s in stacks}
    # ';' in a thread's name would split the frame: it is written as ':'.
    assert roots == {"thread MainThread", "thread worker:0", "thread worker:1"}
    for i in range(2):
        (stack,) = [s for s in stacks if s.startswith(f"thread worker:{i};")]
        # The worker's stack continues the span that started it.
        assert stack.endswith(";work") and ";run_workers;" in stack
        assert stacks[stack] >= 3_000_000


@profile_span("step; one\nof two")
def labelled_step():
    time.sleep(0.001)


def test_separators_in_labels_are_replaced(engine):
    with profiling(depth=-1, engine=engine) as session:
        labelled_step()
    stacks = parse(folded(session))
    assert list(stacks) == ["step: one of two"]


def test_inferno_draws_every_line(engine, tmp_path):
    require_tool(
        INFERNO,
        "inferno-flamegraph",
        "cargo install --locked inferno --no-default-features --features cli",
    )
    with profiling(depth=-1, all_threads=True, engine=engine) as session:
        predict()
        run_workers()
        labelled_step()
    text = folded(session)
    path = tmp_path / "profile.folded"
    path.write_text(text)
    out = subprocess.run(
        [INFERNO, "--title", "predict", str(path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "invalid" not in out.stderr.lower() and "ignored" not in out.stderr.lower(), out.stderr
    svg = out.stdout
    assert svg.startswith("<?xml") and "</svg>" in svg
    # inferno titles each frame "name (N samples, P%)": the whole graph's total
    # is the sum of the lines, and every frame name is there.
    total = sum(parse(text).values())
    assert f"<title>all ({total:,} samples, 100%)</title>" in svg
    for name in (
        "thread MainThread",
        "thread worker:0",
        "load_model",
        "transform",
        "work",
        "step: one of two",
    ):
        assert f"<title>{name} (" in svg, name
