"""What an SRE asks of the agent's kernel figures, checked against oracles
that share no code with it, on the same run: a bpftrace script summing
scheduler events in the kernel, /proc/PID/task/TID/schedstat, and the
target's own clocks. Who woke a span (a thread by its name at the wakeup, or
a timer), why it waited (syscall and D/S state), a span's own thread apart
from the threads it starts, and a thread followed to its last switch-out."""

from __future__ import annotations

import os
import re
from typing import Dict, List

from conftest import Bpftrace, Document, pin, qualname

MS = 1_000_000


def capture(agent, target, tmp_out, *commands: str):
    """Attaches the agent to `target`, runs the commands, stops it (SIGINT):
    (the target's replies, the agent's result, the document)."""
    out = tmp_out / "agent.json"
    run = agent("--pid", str(target.pid), "-o", str(out))
    run.wait_attached(target.pid)
    replies = [target.ask(c) for c in commands]
    result = run.stop()
    assert result.returncode == 0, result.stderr
    return replies, result, Document(str(out))


def waits_of(doc: Document, span) -> list:
    """kernel.waits rows of one span, as dicts, largest first."""
    k = doc.doc["kernel"]
    rows = [dict(zip(k["wait_fields"], r)) for r in k.get("waits", [])]
    return sorted((r for r in rows if r["span"] == span.index), key=lambda r: -r["blocked_ns"])


def shares(text: str) -> list:
    """Every percentage the agent printed."""
    return [float(m) for m in re.findall(r"(\d+(?:\.\d+)?)%", text)]


def runq_of(doc: Document, tid: int) -> tuple:
    """The agent's run-queue total of thread `tid` from its raw intervals, and their count."""
    total, n = 0, 0
    for iv in doc.off_cpu:
        if iv["tid"] != tid:
            continue
        n += 1
        if not iv["blocked"]:
            total += iv["end_ns"] - iv["start_ns"]
        elif iv["wake_ns"] >= iv["start_ns"]:
            total += iv["end_ns"] - iv["wake_ns"]
    return total, n


# Run-queue wait per thread, summed in the kernel by bpftrace: from the
# wakeup (or a switch-out that left it runnable: prev_state's state bits 0)
# to its next switch-in. Independent of the agent: other tracepoints
# (sched_wakeup, not sched_waking), no filter, its own arithmetic.
BPFTRACE_RUNQ = r"""
tracepoint:sched:sched_wakeup, tracepoint:sched:sched_wakeup_new { @q[args->pid] = nsecs; }
tracepoint:sched:sched_switch {
  if ((args->prev_state & 0xff) == 0) { @q[args->prev_pid] = nsecs; }
  $t = @q[args->next_pid];
  if ($t) { @runq[args->next_pid] += nsecs - $t; @n[args->next_pid] += 1; delete(@q[args->next_pid]); }
}
END { clear(@q); clear(@runq); clear(@n); }
"""


def run_queue_of(lines: List[str], name: str = "runq") -> Dict[int, int]:
    """Run-queue ns by tid (or, with name="n", the intervals summed), from
    BPFTRACE_RUNQ's maps."""
    out = "".join(lines)
    runq = {
        int(m.group(1)): int(m.group(2))
        for m in re.finditer(rf"^@{name}\[(\d+)\]: (\d+)$", out, re.M)
    }
    assert runq, out[-2000:]
    return runq


def test_a_renamed_waker_is_named_by_its_name_at_the_wakeup(agent, python_target, tmp_out):
    target = python_target()
    (reply,), result, doc = capture(agent, target, tmp_out, "run rename 3")
    spans = doc.find(qualname("_rename"), target.pid)
    assert len(spans) == 3
    main = target.ready["tid"]
    helpers = {w[0] for c in reply["calls"] for w in c["workers"]}
    assert len(helpers) == 3, reply
    for s, call in zip(sorted(spans, key=lambda s: s.start_ns), reply["calls"]):
        assert call["t0"] <= s.start_ns < call["t1"], (s.start_ns, call["t0"], call["t1"])
        # The helper's 10 ms sleep, then its Event.set(), ends the main thread's wait.
        assert s.values.get("waker") in helpers, s.values
        ((r0, r1),) = call["renamed"]  # the helper's clock around its prctl(PR_SET_NAME)
        woke = [
            iv
            for iv in doc.off_cpu
            if iv["tid"] == main
            and iv["waker_tid"] == s.values["waker"]
            and s.start_ns <= iv["start_ns"] < s.end_ns
        ]
        # Each wakeup names the helper as it was called at its sched_waking: "model-main"
        # (its comm at fork) before the rename, "renamed-waker" after it. The document's
        # wake_ns is the later sched_wakeup (the enqueue, after an IPI to an idle CPU), so
        # a wakeup stamped just after r1 may have been woken inside the rename (ctypes lets
        # the GIL go around prctl): judged are those surely before or after it. After it:
        # the Event.set() after 10 ms, and join()'s wait when the helper exits.
        assert all(iv["waker_name"] == "model-main" for iv in woke if iv["wake_ns"] < r0), woke
        after = [iv for iv in woke if iv["start_ns"] > r1 or iv["wake_ns"] > r1 + 5 * MS]
        assert all(iv["waker_name"] == "renamed-waker" for iv in after), woke
        assert any(iv["wake_ns"] >= r1 + 10 * MS for iv in after), woke  # the Event.set()
        assert all(iv["waker_kind"] == "task" for iv in woke), woke
    # The stall report names it so, not by its comm at fork ("model-main").
    row = next(
        line for line in result.stdout.splitlines() if qualname("_rename") in line and "%" in line
    )
    assert "renamed-waker" in row and "model-main" not in row, result.stdout


def test_a_timer_wakeup_is_labelled_timer_not_the_hog_it_interrupted(
    agent, python_target, cpu_hog, tmp_out
):
    cpu = os.cpu_count() - 1
    target = python_target(preexec_fn=pin(cpu))  # taskset -c CPU
    cpu_hog(cpu)
    _, result, doc = capture(agent, target, tmp_out, "run sleep 5")
    sleeps = doc.find(qualname("_sleep"), target.pid)
    assert len(sleeps) == 5
    for s in sleeps:
        # The hrtimer interrupt that ends time.sleep hits the hog (or idle):
        # the waker is the timer, with no tid.
        assert s.values.get("waker_kind") == 1 and "waker" not in s.values, s.values
        assert s.values.get("waker_blocked", 0) >= 18 * MS, s.values
        slept = [
            iv
            for iv in doc.off_cpu
            if iv["tid"] == target.ready["tid"]
            and iv["blocked"]
            and s.start_ns <= iv["start_ns"] < s.end_ns
            and iv["wake_ns"] - iv["start_ns"] >= 15 * MS
        ]
        assert len(slept) == 1, slept
        # waker_tid is whatever task the interrupt hit (the hog, idle, another process).
        assert slept[0]["waker_kind"] == "timer", slept
        assert waits_of(doc, s)[0]["syscall_name"] == "clock_nanosleep", waits_of(doc, s)
    row = next(
        line for line in result.stdout.splitlines() if qualname("_sleep") in line and "%" in line
    )
    assert row.rstrip().endswith("timer"), result.stdout


def test_a_span_blocked_in_a_pipe_read_waited_in_read_S_and_on_a_lock_in_futex_S(
    agent, python_target, tmp_out
):
    target = python_target()
    replies, result, doc = capture(agent, target, tmp_out, "run pipe 3", "run lock 3")
    # A lock's futex is named for what it is (test_agent_waits.py checks it).
    for reply, (name, syscall, wait, text) in zip(
        replies, (("_pipe", "read", "", "read S"), ("_lock", "futex", "lock", "lock"))
    ):
        spans = doc.find(qualname(name), target.pid)
        assert len(spans) == 3
        for s, call in zip(spans, reply["calls"]):
            # Oracle: the target's own clock around the read or acquire. The
            # thread sleeps inside it for most of it: what is left is the
            # syscall's own work and the run-queue wait after the wakeup (a
            # few ms on a loaded machine). A read sleeps at most that long; the
            # lock's row also holds Thread.start's wait for the helper (a lock).
            ((t0, t1),) = call["waits"]
            rows = [
                w
                for w in waits_of(doc, s)
                if (w["syscall_name"], w["state"], w["wait"]) == (syscall, "S", wait)
            ]
            assert rows, waits_of(doc, s)
            top = t1 - t0 if name == "_pipe" else s.values["own_blocked"]
            assert 0.5 * (t1 - t0) <= rows[0]["blocked_ns"] <= min(top, s.values["own_blocked"]), (
                rows,
                t1 - t0,
            )
            # Running vs waiting under the agent: the kernel's own off-CPU
            # time (blocked + run queue), never less than the blocked time
            # of the read or acquire, within the span's wall time.
            assert s.waiting_ns == s.values.get("own_off_cpu", 0) + (s.wall_ns - s.active_ns), (
                s,
                s.values,
            )
            assert rows[0]["blocked_ns"] <= s.waiting_ns <= s.wall_ns, (s, rows)
        assert f"{text} " in result.stdout, result.stdout


def test_a_span_starting_threads_keeps_its_own_thread_apart_and_agrees_with_schedstat(
    agent, python_target, tmp_out
):
    target = python_target()
    (reply,), result, doc = capture(agent, target, tmp_out, "run threads 5")
    spawns = doc.find(qualname("_spawn"), target.pid)
    assert len(spawns) == 5
    for s in spawns:
        v = s.values
        # Its own thread: on + off = wall; the workers' 2 x 5 ms sleeps are
        # theirs (off_cpu - own_off_cpu), not its.
        assert v.get("cpu", 0) + v.get("own_off_cpu", 0) == s.wall_ns, v
        assert v["off_cpu"] - v.get("own_off_cpu", 0) >= 2 * 4 * MS, v
    assert max(shares(result.stdout)) <= 100.0, result.stdout
    # The root span against the main thread's schedstat over a window that
    # holds it (read, predict, 1 ms sleep, read): the kernel's figures are at
    # least the agent's, and more only by what the window adds outside the
    # span. Off the CPU outside it is at most the window's wall time outside
    # it (the 1 ms sleep, the GIL after the workers' exits, the session's
    # own work): so the span's off-CPU time is at least the rest.
    roots = doc.roots_of(target.pid)
    assert len(roots) == 5
    for root, call in zip(roots, reply["calls"]):
        run0, delay0, ts0, run1, delay1, ts1 = call["sched"]
        window_off = (ts1 - ts0) - (run1 - run0)  # the main thread off the CPU in the window
        cpu, own_off, runq = (root.values.get(k, 0) for k in ("cpu", "own_off_cpu", "own_runq"))
        outside = (ts1 - ts0) - root.wall_ns  # the window's wall time outside the span
        figures = (cpu, own_off, runq, run1 - run0, window_off, delay1 - delay0, outside)
        assert cpu <= (run1 - run0) + 0.2 * MS, figures
        assert own_off <= window_off + 0.2 * MS, figures  # with the workers' sleeps it was 2x
        assert window_off - own_off <= outside + 0.2 * MS, figures
        assert runq <= (delay1 - delay0) + 0.2 * MS, figures
        assert root.waiting_ns == own_off + (root.wall_ns - root.active_ns), (root, figures)


def test_a_workers_run_queue_with_its_exit_path_agrees_with_bpftrace_and_schedstat(
    agent, python_target, cpu_hog, tmp_out
):
    cpu = os.cpu_count() - 1
    # The workers wait for the CPU after each wakeup, and can be preempted on their way out.
    cpu_hog(cpu)
    # bpftrace's tracepoint programs are skipped (and counted: bpf_misses)
    # when they fire inside another BPF program of their kind on that CPU
    # (the agent's uprobe programs are such): a run whose oracle missed
    # events cannot judge the sums, and runs again. CI once had one worker
    # 4.0 ms over the oracle, its wakeup after a sleep and its first
    # preemptions absent from bpftrace's sum; whether the oracle had missed
    # them is not known (it was not counted then), hence the figures the
    # assertion below prints.
    for _ in range(3):
        target = python_target(preexec_fn=pin(cpu))
        oracle = Bpftrace(BPFTRACE_RUNQ)
        try:
            # linger: the session goes on 100 ms after join() returned, so that
            # the workers' way out (their last switch-out) falls inside it.
            (reply,), _, doc = capture(agent, target, tmp_out, "run linger 3")
        finally:
            lines = oracle.stop(maps="@runq[")
        kernel, kernel_n = run_queue_of(lines), run_queue_of(lines, "n")
        if oracle.missed == 0:
            break
        print(f"the oracle missed {oracle.missed} events: run again")
    assert oracle.missed == 0, f"the oracle missed events in each of 3 runs ({oracle.missed})"
    workers = [w for c in reply["calls"] for w in c["workers"]]
    assert len(workers) == 6, reply
    for tid, _, delay_at_end in workers:
        agent_runq, n = runq_of(doc, tid)
        assert n >= 2, (tid, n)  # its first run and the one after its sleep
        # Same events, same tracepoints (sched_wakeup, sched_switch): the two
        # programs' clocks are read microseconds apart (under 2 us per
        # thread measured; 20 us per interval allowed), plus 3% for the rare
        # event one side missed at attach.
        slack = n * 0.02 * MS + 0.03 * kernel[tid]
        # What to look at when they disagree: each side's count of intervals,
        # the worker's own run_delay, and the agent's intervals.
        why = (tid, agent_runq, kernel[tid], n, kernel_n.get(tid), delay_at_end)
        ivs = [
            (iv["start_ns"], iv["wake_ns"], iv["end_ns"], iv["blocked"], iv["waker_kind"])
            for iv in doc.off_cpu
            if iv["tid"] == tid
        ]
        assert abs(agent_runq - kernel[tid]) <= slack, (why, ivs)
        # schedstat, read last thing in the worker's function, has all but
        # its exit path: the agent has at least that much.
        assert agent_runq >= delay_at_end - n * 0.05 * MS, (tid, agent_runq, delay_at_end)
    # Its exit is stamped (sched_process_exit); what followed it until its
    # last switch-out is in the intervals above, which agree with bpftrace.
    exits = {t["tid"]: t["end_ns"] for t in doc.threads}
    assert all(exits.get(tid, 0) > 0 for tid, _, _ in workers), (exits, workers)
