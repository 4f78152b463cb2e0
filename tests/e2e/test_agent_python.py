"""mlprof-ebpf against a real Python process serving an MLflow pyfunc model
under autoprofile(sample_rate=0): the agent switches capture on from outside,
its tree is the in-process tree, and the kernel's figures hold the off-CPU
tolerances of docs/decisions/0025-off-cpu-test-tolerances.md."""

from __future__ import annotations

import os
import statistics

from conftest import Document, pin, qualname

MS = 1_000_000


def capture(agent, target, tmp_out, *commands: str, extra=()):
    """Attaches the agent to `target`, runs the commands there, stops the
    agent with SIGINT; returns (the target's replies, the agent's result, the document)."""
    out = tmp_out / "agent.json"
    run = agent("--pid", str(target.pid), "-o", str(out), *extra)
    run.wait_attached(target.pid)
    replies = [target.ask(c) for c in commands]
    result = run.stop()
    assert result.returncode == 0, result.stderr
    return replies, result, Document(str(out))


def test_the_agents_tree_is_the_in_process_tree_inside_the_predict_calls(
    agent, python_target, tmp_out
):
    target = python_target()
    # Sampling is off: nothing is profiled before the agent attaches.
    before = target.ask("run nested 2")["calls"]
    assert [c["tree"] for c in before] == [None, None]

    (reply,), result, doc = capture(agent, target, tmp_out, "run nested 5")
    calls = reply["calls"]
    # Switched on from outside: every call made a session in the process (last_profile()).
    assert all(c["tree"] is not None for c in calls), calls
    assert calls[-1]["traced"] - calls[0]["traced"] == 4

    roots = doc.roots_of(target.pid)
    assert len(roots) == 5, [r.name for r in doc.roots]
    for root, call in zip(roots, calls):
        assert [root.shape()] == call["tree"]
        assert root.name.startswith("predict [pyfunc E2EModel]"), root.name
        # Every span's times fall inside the predict() call that made it.
        for span in root.walk():
            assert call["t0"] <= span.start_ns <= span.end_ns <= call["t1"], (span.name, call)
    assert {qualname(n) for n in ("_clean", "_features", "_ratio", "_log", "_score")} <= {
        s.name for s in doc.spans
    }
    assert doc.meta["source"] == "ebpf" and doc.meta["agent"].startswith("mlprof-ebpf ")
    assert all(lane["pid"] == target.pid for lane in doc.lanes)
    assert f"5 sessions of 1 process (pid {target.pid})" in result.stdout, result.stdout

    # Detached: switched off again, with no restart.
    after = target.ask("run nested 2")["calls"]
    assert [c["tree"] for c in after] == [None, None]
    assert target.ask("attached") == {"attached": False}


def test_a_20ms_sleep_is_18_to_25ms_blocked_and_off_cpu_with_its_run_queue_wait(
    agent, python_target, tmp_out
):
    target = python_target()
    _, _, doc = capture(agent, target, tmp_out, "run sleep 5")
    sleeps = doc.find(qualname("_sleep"), target.pid)
    assert len(sleeps) == 5
    for s in sleeps:
        off, blocked, runq = (s.values.get(k, 0) for k in ("off_cpu", "blocked", "runq"))
        assert 18 * MS <= blocked <= 25 * MS, (s.wall_ns, s.values)  # asleep
        # Off-CPU is the sleep plus the wait for a CPU once woken, which a
        # loaded machine lengthens (6.9 ms seen beside two other test runs).
        assert off == blocked + runq and off <= s.wall_ns, (s.wall_ns, s.values)
        assert s.values.get("voluntary_switches", 0) >= 1
        # The root holds it too (inclusive figures).
        root = doc.spans[s.parent]
        assert root.values.get("off_cpu", 0) >= off


def test_a_cpu_bound_span_sharing_its_cpu_with_a_hog_waits_in_the_run_queue(
    agent, python_target, cpu_hog, tmp_out
):
    cpu = os.cpu_count() - 1
    target = python_target(preexec_fn=pin(cpu))  # taskset -c CPU
    cpu_hog(cpu)
    _, _, doc = capture(agent, target, tmp_out, "run spin 3")
    spins = doc.find(qualname("_spin"), target.pid)
    assert len(spins) == 3
    for s in spins:
        runq = s.values.get("runq", 0)
        assert runq >= 0.2 * s.wall_ns, (s.wall_ns, s.values)
        assert s.values.get("involuntary_switches", 0) >= 1
        assert s.values.get("blocked", 0) < 0.05 * s.wall_ns  # it never sleeps


def test_a_span_that_never_blocks_is_under_1ms_off_cpu(agent, python_target, tmp_out):
    target = python_target()
    _, _, doc = capture(agent, target, tmp_out, "run compute 10")
    spans = doc.find(qualname("_compute"), target.pid)
    assert len(spans) == 10
    for s in spans:
        assert s.values.get("blocked", 0) == 0, s.values
        assert s.values.get("voluntary_switches", 0) == 0, s.values
    # Off-CPU is then preemption only: this machine's other load can preempt
    # one call now and then, so the median call is what must be under 1 ms.
    assert statistics.median(s.values.get("off_cpu", 0) for s in spans) < 1 * MS, [
        s.values for s in spans
    ]


def test_worker_threads_started_inside_a_predict_appear_with_their_start_and_exit(
    agent, python_target, tmp_out
):
    target = python_target()
    (reply,), _, doc = capture(agent, target, tmp_out, "run threads 1")
    call = reply["calls"][0]
    spawn = doc.find(qualname("_spawn"), target.pid)
    assert len(spawn) == 1
    spawn = spawn[0]
    workers = [
        t for t in doc.threads if t["pid"] == target.pid and t["parent_tid"] == target.ready["tid"]
    ]
    assert len(workers) == 2, doc.threads
    # join() returns once a worker's Python thread state is released, before
    # the OS thread has finished exiting: the kernel's exit can be stamped a
    # little after the span that joined it ended (75 ns seen in CI).
    # It is later still by the time the worker then waited off the CPU (a
    # preemption on a busy machine: 1.09 ms seen in a CI run), which the
    # agent recorded (the base slack is 2 ms).
    for t in workers:
        waited = sum(
            iv["end_ns"] - max(iv["start_ns"], spawn.end_ns)
            for iv in doc.off_cpu
            if iv["tid"] == t["tid"] and iv["end_ns"] > spawn.end_ns
        )
        exit_slack = 2 * MS + waited
        assert spawn.start_ns <= t["start_ns"] < t["end_ns"] <= spawn.end_ns + exit_slack, (
            t,
            spawn,
            waited,
        )
        assert call["t0"] <= t["start_ns"] and t["end_ns"] <= call["t1"] + exit_slack
        # Started under _spawn: the innermost span open then (threading's
        # Thread.start, within the captured depth) or _spawn itself.
        assert t["started_under"] in {s.index for s in spawn.walk()}, (t, spawn.shape())
    # Their 5 ms sleeps are theirs, reported under the span that started them.
    worker_tids = {t["tid"] for t in workers}
    slept = [iv for iv in doc.off_cpu if iv["tid"] in worker_tids and iv["blocked"]]
    assert sum(iv["end_ns"] - iv["start_ns"] for iv in slept) >= 2 * 4 * MS, doc.off_cpu
    assert spawn.values.get("off_cpu", 0) >= 2 * 4 * MS, spawn.values
