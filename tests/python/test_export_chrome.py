"""Chrome Trace Event export of real captures (threads, asyncio tasks,
generators, exceptions, I/O), checked against the rules of Perfetto's JSON
importer.

Perfetto itself is not run: its trace_processor binary is downloaded from
Google's storage at first use (unreachable from this machine) and is not
published on PyPI or npm. So check_perfetto_rules() replays the importer's
rules on the file, as its source states them (google/perfetto,
src/trace_processor/):
- importers/json/json_trace_tokenizer.cc: outer keys are read in order and
  the file is cut at a key other than traceEvents, displayTimeUnit,
  otherData, metadata, systemTraceEvents; "ts" is found by scanning an
  event's keys in order, and an array met before it fails the whole file.
- importers/json/json_trace_parser_impl.cc and json_utils.cc: pid and tid are
  uint32; 'X' needs "dur"; ts of a number is read textually (three
  fractional digits of microseconds kept), dur as a double * 1000 truncated.
- sorter/trace_sorter.h: equal ts sorts the longer complete event first.
- importers/common/slice_tracker.cc (MaybeCloseStack): a slice ending at or
  before the next one's ts is closed; one that starts inside the open slice
  and ends after it is dropped; a negative duration is an error."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from decimal import Decimal
from typing import Dict, List, Tuple

from mlflow_profiler import _core, profiling

OUTER_KEYS = {"traceEvents", "displayTimeUnit", "otherData", "metadata", "systemTraceEvents"}


def chrome_trace(session) -> Tuple[str, dict]:
    text = _core.export_bytes(session._built(), "chrome_trace").decode("utf-8")
    return text, json.loads(text, parse_float=Decimal)


def textual_ns(us) -> int:
    """Perfetto's reading of a number's text: microseconds with three decimals."""
    return int(Decimal(us) * 1000)


def double_ns(us) -> int:
    """Perfetto's reading of a JSON real: the double times 1000, truncated."""
    return int(float(us) * 1000.0)


def has_list(value) -> bool:
    if isinstance(value, list):
        return True
    if isinstance(value, dict):
        return any(has_list(v) for v in value.values())
    return False


def slice_drops(slices: List[Tuple[int, int]]) -> int:
    """Slices of one track that Perfetto's SliceTracker would drop."""
    slices = sorted(slices, key=lambda s: (s[0], -s[1]))  # stable, like its sorter
    stack: List[Tuple[int, int]] = []
    drops = 0
    for ts, dur in slices:
        if dur < 0:
            drops += 1
            continue
        while stack:
            top_ts, top_dur = stack[-1]
            end = top_ts + top_dur
            if end < ts or (end == ts and not (top_dur == 0 and dur == 0)):
                stack.pop()
            else:
                break
        if any(ts < t + d < ts + dur for t, d in stack):
            drops += 1
            continue
        stack.append((ts, dur))
    return drops


def check_perfetto_rules(text: str, doc: dict) -> Dict[int, List[dict]]:
    """Asserts the import rules above; returns the complete events by tid."""
    keys = list(doc)
    assert keys[0] == "traceEvents" and set(keys) <= OUTER_KEYS, keys
    assert doc["displayTimeUnit"] == "ms"
    events = doc["traceEvents"]
    pids = set()
    by_tid: Dict[int, List[dict]] = {}
    named = set()
    for ev in events:
        assert list(ev)[:2] == ["ph", "ts"], ev
        assert not has_list(ev), ev
        assert isinstance(ev["pid"], int) and 0 < ev["pid"] < 2**32
        pids.add(ev["pid"])
        if "tid" in ev:
            assert isinstance(ev["tid"], int) and 0 <= ev["tid"] < 2**32
        if ev["ph"] == "X":
            assert "dur" in ev
            # The same nanoseconds whichever way a reader turns the text into them.
            assert textual_ns(ev["ts"]) == double_ns(ev["ts"]) >= 0, ev["ts"]
            assert textual_ns(ev["dur"]) == double_ns(ev["dur"]) >= 0, ev["dur"]
            by_tid.setdefault(ev["tid"], []).append(ev)
        elif ev["ph"] == "M" and ev["name"] == "thread_name":
            named.add(ev["tid"])
            assert ev["args"]["name"]
        elif ev["ph"] == "C":
            assert ev["args"] and all(isinstance(v, (int, Decimal)) for v in ev["args"].values())
    assert len(pids) == 1
    assert set(by_tid) <= named, "every track with slices has a thread_name"
    for tid, slices in by_tid.items():
        assert slice_drops([(textual_ns(e["ts"]), textual_ns(e["dur"])) for e in slices]) == 0, tid
    return by_tid


def document(session) -> dict:
    return json.loads(session.to_json())


def work(ms):
    time.sleep(ms / 1000)


def run_workers():
    threads = [threading.Thread(target=work, args=(3,), name=f"worker-{i}") for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_threads_get_their_kernel_tids(engine):
    with profiling(depth=-1, all_threads=True, engine=engine) as session:
        run_workers()
    text, doc = chrome_trace(session)
    by_tid = check_perfetto_rules(text, doc)
    names = {
        e["tid"]: e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    lanes = session._built().threads
    for i in range(3):
        lane = lanes[f"worker-{i}"]
        assert names[lane["native_tid"]] == f"thread worker-{i}"
        assert [e["name"] for e in by_tid[lane["native_tid"]]] == ["work"]
    assert names[lanes["MainThread"]["native_tid"]] == "thread MainThread"
    assert doc["otherData"]["pid"] == str(doc["traceEvents"][0]["pid"])
    # Several lanes ran at once: the counter says how many, and ends at 0.
    counts = [int(e["args"]["count"]) for e in doc["traceEvents"] if e["ph"] == "C"]
    assert max(counts) >= 2 and counts[-1] == 0
    assert all(0 <= c <= len(lanes) for c in counts)


async def fetch(ms):
    await asyncio.sleep(ms / 1000)
    return ms


async def fetch_all():
    return await asyncio.gather(fetch(3), fetch(2), fetch(1))


def test_asyncio_tasks_get_their_own_tracks(engine):
    with profiling(depth=-1, engine=engine) as session:
        asyncio.run(fetch_all())
    text, doc = chrome_trace(session)
    by_tid = check_perfetto_rules(text, doc)
    lanes = session._built().threads
    lanes_with_spans = {s[3] for s in document(session)["spans"]}
    assert len(by_tid) == len(lanes_with_spans) > 1
    main_tid = lanes["MainThread"]["native_tid"]
    task_tracks = [tid for tid in by_tid if tid != main_tid]
    assert task_tracks and all(tid >= 2**22 for tid in task_tracks)  # no kernel tid is that high
    fetch_tracks = {tid for tid, evs in by_tid.items() if any(e["name"] == "fetch" for e in evs)}
    assert len(fetch_tracks) == 3  # one per task: their awaits interleave
    names = {
        e["tid"]: e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert all(names[tid].startswith("thread MainThread, task ") for tid in fetch_tracks)


def produce(n):
    for i in range(n):
        time.sleep(0.001)
        yield i


def consume(gen):
    return next(gen)


def pipeline():
    gen = produce(4)
    first = next(gen)
    second = consume(gen)  # resumed under another caller
    return [first, second, *gen]


def test_generators_are_drawn_by_segment(engine):
    with profiling(depth=-1, engine=engine) as session:
        pipeline()
    text, doc = chrome_trace(session)
    by_tid = check_perfetto_rules(text, doc)
    (events,) = by_tid.values()
    drawn = [e for e in events if e["name"] == "produce"]
    pdoc = document(session)
    strings, functions = pdoc["strings"], pdoc["functions"]
    (gen_span,) = [
        i for i, s in enumerate(pdoc["spans"]) if strings[functions[s[1]][0]] == "produce"
    ]
    fields = pdoc["segment_fields"]
    segments = [dict(zip(fields, seg)) for seg in pdoc["segments"] if seg[0] == gen_span]
    # The first start, the resume in consume, then `*gen` resumes it three
    # times straight from pipeline: one segment, the last two resumes folded
    # into it (docs/capture.md, "Busy generators").
    assert [s["resumes"] for s in segments] == [0, 0, 2]
    assert len(drawn) == len(segments)
    assert [(textual_ns(e["ts"]), textual_ns(e["dur"])) for e in drawn] == [
        (s["start_ns"] - pdoc["meta"]["start_ns"], s["end_ns"] - s["start_ns"]) for s in segments
    ]
    paused = sum(s["paused_ns"] for s in segments)
    assert (
        sum(textual_ns(e["dur"]) for e in drawn) - paused == pdoc["spans"][gen_span][8]
    )  # active_ns
    assert [e["args"]["segment"] for e in drawn] == [f"{k} of 3" for k in range(1, 4)]
    assert drawn[2]["args"]["folded resumes"] == 2 and "folded resumes" not in drawn[1]["args"]
    # The second segment runs inside consume, on the same track.
    (consume_ev,) = [e for e in events if e["name"] == "consume"]
    c0, c1 = (
        textual_ns(consume_ev["ts"]),
        textual_ns(consume_ev["ts"]) + textual_ns(consume_ev["dur"]),
    )
    assert (
        c0 <= textual_ns(drawn[1]["ts"])
        and textual_ns(drawn[1]["ts"]) + textual_ns(drawn[1]["dur"]) <= c1
    )


def fails(n):
    raise KeyError(n)


def recovers():
    for n in range(3):
        try:
            fails(n)
        except KeyError:
            pass


def test_exceptions_are_flagged(engine):
    with profiling(depth=-1, engine=engine) as session:
        recovers()
    text, doc = chrome_trace(session)
    check_perfetto_rules(text, doc)
    flagged = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "fails"]
    assert len(flagged) == 3
    assert all(e["args"]["flags"] == "exception, caught" for e in flagged)  # recovers caught it
    (outer,) = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "recovers"]
    assert "flags" not in outer["args"]


def preprocess(rows, scale=2):
    return [r * scale for r in rows]


def predict(rows):
    return sum(preprocess(rows))


def test_io_summaries_in_args(engine):
    rows = list(range(1000))
    with profiling(depth=-1, capture_io=True, engine=engine) as session:
        predict(rows)
    text, doc = chrome_trace(session)
    check_perfetto_rules(text, doc)
    (pre,) = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "preprocess"]
    (record,) = [s for s in session.spans if s.label == "preprocess"]
    # The same text print_tree(show_io=True) builds from the same summaries.
    assert pre["args"]["in"]["rows"].startswith("(list, len=1000")
    assert pre["args"]["in"]["scale"] == "(int, 2)"
    assert pre["args"]["out"].startswith("(list, len=1000")
    assert set(pre["args"]["in"]) == set(record.input_summary)
    assert pre["args"]["module"] == __name__
    assert pre["args"]["file"].endswith(
        f"test_export_chrome.py:{preprocess.__code__.co_firstlineno}"
    )


def test_same_session_same_bytes(engine):
    with profiling(depth=-1, engine=engine) as session:
        pipeline()
    p = session._built()
    assert _core.export_bytes(p, "chrome_trace") == _core.export_bytes(p, "chrome_trace")
