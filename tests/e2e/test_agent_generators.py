"""A busy generator through the agent (issue 42 item 7): its resumes reach the
agent folded in the session body (contract v2, body version 3: docs/usdt.md),
so the agent stores a bounded number of segments with the exact resume
count, and the tree is the in-process tree."""

from __future__ import annotations

from test_agent_python import capture


def test_a_generator_resumed_20000_times_reaches_the_agent_as_a_few_segments(
    agent, python_target, tmp_out
):
    target = python_target()
    (reply,), result, doc = capture(agent, target, tmp_out, "run busy 3")
    calls = reply["calls"]
    roots = doc.roots_of(target.pid)
    assert [r.shape() for r in roots] == [c["tree"][0] for c in calls]
    d = doc.doc
    sf, gf = d["span_fields"], d["segment_fields"]
    generators = [s for s in doc.spans if s.name.endswith("<genexpr>")]
    assert len(generators) == 3
    for g in generators:
        row = dict(zip(sf, d["spans"][g.index]))
        segments = [dict(zip(gf, r)) for r in d["segments"] if r[0] == g.index]
        assert row["resumes"] == 20000
        assert 1 <= len(segments) <= 100
        running = sum(s["end_ns"] - s["start_ns"] - s["paused_ns"] for s in segments)
        assert running == row["active_ns"] <= row["end_ns"] - row["start_ns"]
    # The whole document stays small: 3 x 20,000 resumes were 60,003 segments.
    assert len(d["segments"]) <= 300
