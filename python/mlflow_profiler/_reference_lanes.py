"""The reference engine (_reference.py): a lane and its stack of open levels.
Starts, returns, yields and resumes of frames in one lane
(pyext/lane_stack.cpp, pyext/suspend_resume.h), I/O summaries
(pyext/io_capture.cpp), per-span readings and the off-CPU readings of a
lane's events."""

from __future__ import annotations

import sys
import time
import types
from typing import TYPE_CHECKING, List, Optional, Tuple

from . import _core, _labels, _transparent
from ._reference_code import (
    _CO_AWAITS,
    _GEN_FLAGS,
    _MAX_FOLD,
    E_BLOCK,
    E_FRAME,
    EV_CHILDREN_DROPPED,
    EV_CONTINUED,
    EV_EXCEPTION,
    EV_RELABEL,
    EV_RESOURCE,
    K_CALL,
    K_FOLD,
    K_FOLD_COUNT,
    K_LABEL,
    K_RESUME,
    K_RETURN,
    K_SUSPEND,
)

if TYPE_CHECKING:
    from ._reference import ReferenceEngine
    from ._reference_hook import _Mark

# --- lanes ------------------------------------------------------------------------


class _Lane:
    __slots__ = (
        "engine",
        "index",
        "thread_id",
        "mark",
        "ceiling",
        "depth",
        "truncated",
        "skipped",
        "soft_cap",
        "hard_cap",
        "rec",
        "pending_code",
        "pending_label",
        "pending_resource",
        "chain_top",
        "chain_top_depth",
        "last_was_suspend",
        "events",
        "dropped",
        "out_truncated",
        "native_tid",
        "thread_name",
        "task",
        "parent_lane",
        "parent_call",
        "io_ceiling",
        "io",
        "overhead",
        "hidden",
        "readings",
        "depth_base",
        "loop_main",
        "loop_main_checked",
    )

    def __init__(self) -> None:
        self.engine: ReferenceEngine
        self.index = 0
        self.thread_id = 0
        self.mark: Optional[_Mark] = None
        self.ceiling = 0
        self.depth = -1  # depth of the innermost open level; -1: the entering frame
        self.truncated = False
        self.skipped = 0
        self.soft_cap = 0
        self.hard_cap = 0
        # Recorded open entries, innermost last: [call_index, depth, kind, key,
        # children_dropped, code] (engine.h StackEntry; key: generator identity
        # for a frame, 0 for a plain frame, the callable's identity for a C
        # call; code: a frame's code object, None otherwise).
        self.rec: List[list] = []
        self.pending_code: Optional[types.CodeType] = None
        self.pending_label: Optional[int] = None
        self.pending_resource: Optional[int] = None
        self.chain_top: Optional[int] = None
        self.chain_top_depth = 0
        self.last_was_suspend = False
        self.events: _ReadingEvents  # (ts, kind, id, flags); set by ReferenceEngine._new_lane
        self.dropped = 0
        self.out_truncated = False
        self.native_tid = 0
        self.thread_name = ""
        self.task = 0
        self.parent_lane = -1
        self.parent_call = 0
        self.io_ceiling = -1  # deepest level whose I/O is summarized; -1: none
        self.io: List[tuple] = []  # (call index, role, name, IOSummary)
        self.overhead: List[
            tuple
        ] = []  # (from, to) ns: the profiler's work (engine.h CaptureLane::overhead)
        self.hidden = 0  # open frames of a hidden code or under one (StackEntry::hides)
        self.readings: Optional[list] = None  # (event index, kind, counter) when values are wanted
        self.depth_base = (
            0  # tree depth of the lane's own level 0 (engine.h CaptureLane::depth_base)
        )
        # (id(frame), code) of the coroutine a loop runs to completion, the
        # body of the call that ran the loop (engine.h CaptureLane::loop_main).
        self.loop_main: Optional[tuple] = None
        self.loop_main_checked = False


def _room_for_structure(L: _Lane) -> bool:
    if len(L.events) < L.hard_cap:
        return True
    L.truncated = True
    L.out_truncated = True
    return False


def _close_entries(L: _Lane, start: int, exception: bool, ts: int) -> None:
    """Returns for rec[start:], innermost first."""
    flags = EV_EXCEPTION if exception else 0
    rec = L.rec
    for i in range(len(rec) - 1, start - 1, -1):
        if not _room_for_structure(L):
            return
        L.events.append((ts, K_RETURN, 0, flags | EV_CHILDREN_DROPPED if rec[i][4] else flags))
    del rec[start:]


def _top_frame(L: _Lane, end: Optional[int] = None) -> Tuple[int, int]:
    """For the frame that returns or yields now: (index of the entry that may
    be its own, or -1; the block/C-call entries above it). Those entries are
    the ones opened inside the frame and still open: a chain of levels
    ending at the depth counter. Blocks a caller opened sit below the
    counter and are not the frame's (a frame below the ceiling running under
    a block or C call at the ceiling)."""
    rec = L.rec
    i = (len(rec) if end is None else end) - 1
    k = 0
    while i >= 0 and rec[i][2] != E_FRAME and rec[i][1] == L.depth - k:
        k += 1
        i -= 1
    return i, k


def _is_frame_at(L: _Lane, j: int, depth: int, code) -> bool:
    if j < 0:
        return False
    e = L.rec[j]
    return e[2] == E_FRAME and e[1] == depth and e[5] is code


def _lane_transparent(L: _Lane, code) -> bool:
    """Transparent for every session, for this lane's session only
    (`transparent_codes`: autoprofile's user predict), or under a hidden code."""
    return L.hidden > 0 or code in _transparent.CODES or code in L.engine.transparent_codes


def _runs_to_completion(frame) -> bool:
    """Whether `frame` is the coroutine an event loop runs to completion
    (asyncio.run, run_until_complete): the current task's, an asyncio C task
    (as engine.cpp, which calls no Python code), carrying run_until_complete's
    done callback (engine.cpp runs_to_completion)."""
    base_events, c_asyncio = sys.modules.get("asyncio.base_events"), sys.modules.get("_asyncio")
    done = getattr(base_events, "_run_until_complete_cb", None)
    tasks = sys.modules.get("asyncio.tasks")
    if done is None or c_asyncio is None or tasks is None:
        return False
    try:
        task = tasks.current_task()
        if (
            type(task) is not c_asyncio.Task
            or getattr(task.get_coro(), "cr_frame", None) is not frame
        ):
            return False
        return any(entry[0] is done for entry in task._callbacks or ())
    except Exception:
        return False


def _loop_main(L: _Lane, code, frame, decide: bool = False) -> bool:
    """Whether `frame`, at the lane's root level, is its loop-run coroutine:
    decided (`decide`) at the task lane's first root start, then by identity;
    only under a recorded span (engine.cpp lane_start)."""
    if (
        decide
        and not L.loop_main_checked
        and L.task > 0
        and L.parent_lane >= 0
        and code.co_flags & _GEN_FLAGS
    ):
        L.loop_main_checked = True
        since = _stretch_start((L,))
        if _runs_to_completion(frame):
            L.loop_main = (id(frame), code)
        _note_stretch(L, since, _core.now_ns())
    return L.loop_main is not None and L.loop_main[0] == id(frame) and L.loop_main[1] is code


def _transparent_start(L: _Lane, code) -> None:
    if L.hidden or code in _transparent.HIDDEN:
        L.hidden += 1


def _transparent_end(L: _Lane) -> None:
    if L.hidden:
        L.hidden -= 1


def _call_label(L: _Lane, code, frame) -> Optional[int]:
    """The label id a labeller (_labels) gives this call, or None; its time
    is the profiler's (cut like I/O summaries)."""
    labeller = _labels.LABELLERS.get(code)
    if labeller is None or frame is None:
        return None
    since = _stretch_start((L,))
    names = code.co_varnames[: min(2, code.co_argcount + code.co_kwonlyargcount)]
    local_vars = frame.f_locals
    args = [local_vars.get(n) for n in names] + [None] * (2 - len(names))
    try:
        text = labeller(args[0], args[1])
    except Exception as exc:
        L.engine._note(
            f"a labeller raised {exc!r} naming a call of {code.co_name}; "
            "such calls keep the function's name"
        )
        text = None
    _note_stretch(L, since, _core.now_ns())
    return L.engine._label_id(text) if isinstance(text, str) else None


def _fold_label(L: _Lane, code) -> Optional[str]:
    """The label of a fold of `code` into the span open at the lane's depth
    counter: profiling()'s PythonModel.predict called by PyFuncModel.predict
    through transparent frames only (EngineOptions::fold_codes)."""
    label = L.engine.fold_codes.get(id(code))
    if label is None or not L.rec:
        return None
    top = L.rec[-1]
    if top[2] != E_FRAME or top[1] != L.depth or id(top[5]) not in L.engine.fold_parents:
        return None
    return label


def _lane_start(L: _Lane, code, frame, continued: bool) -> Optional[int]:
    """Records a start; returns the call's event index if its I/O is wanted."""
    d = L.depth + 1
    if d > L.ceiling:
        L.depth = d
        L.skipped += 1
        return None
    # Transparency is checked wherever the counter is within the ceiling,
    # above the root too, so that a frame's start and its return agree on it.
    if d < 0:
        if not _lane_transparent(L, code):
            L.depth = d
        return None
    if _lane_transparent(L, code) or (d == 0 and _loop_main(L, code, frame, decide=True)):
        _transparent_start(L, code)
        return None  # not counted
    eng = L.engine
    fid = eng._code_ids.get(code)
    if fid is None:  # first sight (naming it) is the profiler's work
        since = _stretch_start((L,))
        fid = eng._function_id(code, frame)
        _note_stretch(L, since, _core.now_ns())
    if eng.fold_codes:
        fold = _fold_label(L, code)
        if fold is not None:  # not counted; names the span it folds into
            L.events.append((_core.now_ns(), K_LABEL, eng._label_id(fold), EV_RELABEL))
            return None
    L.depth = d
    if L.truncated:
        return None
    if len(L.events) >= L.soft_cap:
        L.dropped += 1
        if L.rec:
            L.rec[-1][4] = True
        return None
    key = id(frame) if code.co_flags & _GEN_FLAGS else 0
    label: Optional[int] = None
    resource: Optional[int] = None
    if L.pending_code is code:
        label, resource = L.pending_label, L.pending_resource
        L.pending_code = None
    elif key and eng._gen_labels:
        entry = eng._gen_labels.get(key)
        if entry is not None and entry[1] is code:
            label, resource = entry[0], entry[2]
            del eng._gen_labels[key]
    if label is None and _labels.LABELLERS:
        label = _call_label(L, code, frame)
    ts = _core.now_ns()
    if label is not None:
        L.events.append((ts, K_LABEL, label, 0))
    if resource is not None:
        L.events.append((ts, K_LABEL, resource, EV_RESOURCE))
    idx = len(L.events)
    L.events.append((ts, K_CALL, fid, EV_CONTINUED if continued else 0))
    L.rec.append([idx, d, E_FRAME, key, False, code])
    L.last_was_suspend = False
    # A continued coroutine's locals are not its arguments any more.
    return idx if d <= L.io_ceiling and not continued else None


def _names_resource(L: _Lane) -> bool:
    """An open span of the lane names a resource: its K_CALL follows a
    K_LABEL flagged EV_RESOURCE."""
    events = L.events
    for entry in L.rec:
        idx = entry[0]
        if isinstance(idx, int) and 0 < idx < len(events):
            before = events[idx - 1]
            if before[1] == K_LABEL and before[3] & EV_RESOURCE:
                return True
    return False


def _lane_return(L: _Lane, code, exception: bool, frame=None) -> Optional[int]:
    """Records a return; returns the closed call's event index if its return
    value is wanted."""
    # A transparent frame did not move the counter: it was checked at depth + 1.
    if L.depth + 1 <= L.ceiling and (
        _lane_transparent(L, code) or (L.depth == -1 and _loop_main(L, code, frame))
    ):
        _transparent_end(L)
        return None
    if L.engine.fold_codes and L.depth + 1 <= L.ceiling and _fold_label(L, code) is not None:
        return None
    j, extra = _top_frame(L)
    frame_depth = L.depth - extra
    wanted = None
    if _is_frame_at(L, j, frame_depth, code):
        if frame_depth <= L.io_ceiling and not exception:
            wanted = L.rec[j][0]
        _close_entries(L, j, exception, _core.now_ns())
        L.last_was_suspend = False
    L.depth = frame_depth - 1
    return wanted


# --- I/O capture: the same summaries as the native engine (_core.summarize) ---

_MAX_IO_ARGUMENTS = 16
_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08  # inspect.CO_*, stable since 2.x


def _append_io(targets, role: int, name: str, summary: tuple) -> None:
    for L, call in targets:
        if L.engine.state == "collecting":
            L.io.append((call, role, name, summary))


def _note_overhead(targets, since: int) -> None:
    """The profiler's work from `since` to now, on each target's lane: taken
    out of the lane's timeline when the profile is built (engine.cpp)."""
    now = _core.now_ns()
    for L, _ in targets:
        if L.engine.state == "collecting":
            _note_stretch(L, since, now)


def _restart_calls(targets, since: int) -> None:
    """The spans start again after their arguments were summarized (engine.cpp
    restart_calls): a slow first repr is the profiler's time, not the call's."""
    ts = _core.now_ns()
    for L, call in targets:
        if L.engine.state == "collecting" and call < len(L.events):
            L.events[call] = (ts,) + L.events[call][1:]
            _note_stretch(L, since, ts)
            if L.readings is not None:  # so do its readings (engine.cpp restart_readings)
                now = dict(_take_readings(L.engine.values, call))
                L.readings[:] = [
                    (e, k, now.get(k, v) if e == call else v) for e, k, v in L.readings
                ]


# --- per-span values (cpu_time, alloc_bytes) ---------------------------------------

VALUE_CPU, VALUE_ALLOC = 0, 1  # model/span_value.h ValueKind: bits of the engines' `values`


def _take_readings(values: int, event: int) -> list:
    """The counters of `values` now, as readings of `event` (engine.cpp
    take_readings): the thread's CPU clock, the native allocation counter."""
    out = []
    if values & (1 << VALUE_ALLOC):
        out.append((event, VALUE_ALLOC, _core.alloc_thread_bytes()))
    if values & (1 << VALUE_CPU):
        out.append((event, VALUE_CPU, time.thread_time_ns()))
    return out


_warned: set = set()


def _warn_once(why: str) -> None:
    """A RuntimeWarning once per process and message (engine.cpp does the same)."""
    if why not in _warned:
        _warned.add(why)
        import warnings

        warnings.warn(why, RuntimeWarning, stacklevel=3)


class _ReadingEvents(list):
    """A lane's events list that reads the counters after each span event
    when the session wants values, and the thread's CPU clock at most once a
    quantum for running vs waiting (engine.cpp push, views/waiting.h)."""

    __slots__ = ("readings", "values", "cpu_reads", "read_at")

    def __init__(self, values: int) -> None:
        super().__init__()
        self.values = values
        self.readings: Optional[list] = [] if values else None
        self.cpu_reads: list = []  # (ns, the thread's CPU ns)
        self.read_at: Optional[int] = None

    def append(self, ev) -> None:
        list.append(self, ev)
        if ev[1] != K_LABEL:
            if self.readings is not None:  # values wanted (set together)
                self.readings.extend(_take_readings(self.values, len(self) - 1))
            self.maybe_read_cpu(ev[0])

    def maybe_read_cpu(self, ts: int) -> None:
        """Reads the CPU clock when a quantum has passed since the last reading."""
        if self.read_at is None or ts - self.read_at >= _core.OFF_CPU_QUANTUM_NS:
            self.read_cpu()

    def read_cpu(self) -> None:
        """Reads the CPU clock, timed now, not at the event: the profiler's
        work since the event is CPU time of a stretch cut from the timeline
        (lane_stack.cpp read_off_cpu)."""
        now = _core.now_ns()
        self.read_at = now
        self.cpu_reads.append((now, time.thread_time_ns()))


def _stretch_start(lanes) -> int:
    """Now, as the profiler starts its own work for `lanes`: each reads the
    CPU clock if a quantum has passed (engine.cpp thread_stretch_start)."""
    now = _core.now_ns()
    for L in lanes:
        L.events.maybe_read_cpu(now)
    return now


def _note_stretch(L: _Lane, since: int, now: int) -> None:
    """The profiler's work on L from `since` to `now`, cut from its timeline
    at build; one a quantum long ends with a reading, so the off-CPU time
    inside it goes with it (engine_internal.h note_stretch)."""
    L.overhead.append((since, now))
    if now - since >= _core.OFF_CPU_QUANTUM_NS:
        L.events.read_cpu()


def _capture_arguments(frame, code, targets) -> None:
    since = _stretch_start(L for L, _ in targets)
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & _CO_VARARGS) + bool(code.co_flags & _CO_VARKEYWORDS)
    names = code.co_varnames[: min(n, _MAX_IO_ARGUMENTS)]
    local_vars = frame.f_locals
    for i, name in enumerate(names):
        if i == 0 and name in ("self", "cls"):
            continue  # the receiver is the model object, not data flowing through
        if name in local_vars:
            _append_io(targets, _core.IO_ARGUMENT, name, _core.summarize(local_vars[name]))
    _restart_calls(targets, since)


def _capture_return(value, targets) -> None:
    since = _stretch_start(L for L, _ in targets)
    _append_io(targets, _core.IO_RETURN, "", _core.summarize(value))
    _note_overhead(targets, since)


def _lane_yield(L: _Lane, code, frame) -> None:
    if L.depth + 1 <= L.ceiling and (
        _lane_transparent(L, code) or (L.depth == -1 and _loop_main(L, code, frame))
    ):
        _transparent_end(L)
        return
    # Blocks deeper than the counter were left by a coroutine of the chain
    # that suspends with this frame (below): they leave with it (engine.cpp
    # lane_yield).
    chain = len(L.rec)
    while chain and L.rec[chain - 1][2] == E_BLOCK and L.rec[chain - 1][1] > L.depth:
        chain -= 1
    j, extra = _top_frame(L, chain)
    frame_depth = L.depth - extra
    start = chain - extra
    if _is_frame_at(L, j, frame_depth, code):
        start = j
    elif (
        start < len(L.rec)
        and code.co_flags & (0x80 | 0x100)
        and start > 0
        and L.rec[start - 1][2] == E_FRAME
        and L.rec[start - 1][3]
    ):
        # A coroutine the lane does not track, with only blocks of its own,
        # awaited by one it tracks: its blocks wait for that one's yield.
        L.depth = frame_depth - 1
        return
    if start < len(L.rec) and not L.truncated and _room_for_structure(L):
        key = L.rec[start][3] if (start == j and L.rec[start][3]) else id(frame)
        if key:
            if not L.last_was_suspend:
                L.chain_top = L.rec[-1][0]
                L.chain_top_depth = L.rec[-1][1]
            L.last_was_suspend = True
            entries = L.rec[start:]
            L.events.append((_core.now_ns(), K_SUSPEND, entries[0][0], 0))
            L.engine._suspended[key] = (L.index, frame_depth, entries, code, extra)
            del L.rec[start:]
    L.depth = frame_depth - 1


def _lane_resume(L: _Lane, code, frame) -> bool:
    """True if a suspended segment was pushed back (or the frame is transparent)."""
    d = L.depth + 1
    if d <= L.ceiling and (_lane_transparent(L, code) or (d == 0 and _loop_main(L, code, frame))):
        _transparent_start(L, code)
        return True
    if L.rec and L.rec[-1][2] == E_BLOCK and L.rec[-1][1] == d + 1 and d > L.ceiling:
        # A coroutine the lane does not track resuming inside its own block
        # (its yield left it to the chain): the block's level again.
        L.depth = d + 1
        return True
    suspended = L.engine._suspended
    if suspended:
        key = id(frame)
        s = suspended.get(key)
        if s is not None and s[3] is not code:
            # A generator closed at a yield without running (3.12+ closes one
            # resting outside any try so) left its segment; a new frame took
            # its address. Not this frame's: dropped.
            del suspended[key]
        elif s is not None and s[0] == L.index:
            del suspended[key]
            if not L.truncated and _room_for_structure(L):
                _, frame_depth, entries, _code, own = s
                shift = d - frame_depth
                fold = not (
                    code.co_flags & _CO_AWAITS
                )  # engine.cpp may_fold (this engine fires no probes)
                now = _core.now_ns()
                _append_resume(L.events, L.readings, L.engine.values, entries[0][0], now, fold)
                L.events.maybe_read_cpu(now)
                for call_index, depth, kind, ekey, dropped, ecode in entries:
                    L.rec.append([call_index, depth + shift, kind, ekey, dropped, ecode])
                L.depth = d + own  # the frame and its own blocks; the chain's are deeper
                L.last_was_suspend = False
                return True
    return False


def _append_resume(
    ev: list, readings: Optional[list], values: int, call: int, ts: int, fold: bool
) -> None:
    """The resume of the span whose kCall is at `call`, appended to the
    events `ev` (with `readings` of the counters in `values`, or None):
    model/resume.h's append_resume, mirrored (same events, same readings). When
    `fold`, a resume right after that span's flag-free kSuspend (the generator
    went straight back to its consumer) folds into a K_FOLD/K_FOLD_COUNT pair
    that counts the resumes and keeps the paused total as K_FOLD_COUNT.ts -
    K_FOLD.ts; its readings are what the counters grew while paused."""
    n = len(ev)
    last = ev[-1] if n else None
    if fold and last is not None and last[1] == K_SUSPEND and last[2] == call and last[3] == 0:
        paused = max(0, ts - last[0])
        now = dict((k, v) for _, k, v in _take_readings(values, 0)) if readings is not None else {}
        if (
            n >= 3
            and ev[-3][1] == K_FOLD
            and ev[-3][2] == call
            and ev[-2][1] == K_FOLD_COUNT
            and ev[-2][2] < _MAX_FOLD
        ):
            total = (ev[-2][0] - ev[-3][0]) + paused
            stamp = max(ts, ev[-2][0])
            list.__setitem__(ev, n - 3, (stamp - total, K_FOLD, call, 0))
            list.__setitem__(ev, n - 2, (stamp, K_FOLD_COUNT, ev[-2][2] + 1, 0))
            del ev[-1]
            if readings is not None:  # the last ones are the kSuspend's, then the fold's
                suspend, folded = n - 1, n - 3
                grew = {}
                while readings and readings[-1][0] >= suspend:
                    e, k, v = readings.pop()
                    if e == suspend and k in now:
                        grew[k] = max(0, now[k] - v)
                i = len(readings) - 1
                while i >= 0 and readings[i][0] >= folded:
                    e, k, v = readings[i]
                    if e == folded and k in grew:
                        readings[i] = (e, k, v + grew.pop(k))
                    i -= 1
                readings.extend((folded, k, g) for k, g in sorted(grew.items()))
            return
        if n < _MAX_FOLD:
            list.__setitem__(ev, n - 1, (last[0], K_FOLD, call, 0))
            list.append(ev, (max(ts, last[0]), K_FOLD_COUNT, 1, 0))
            if readings is not None:
                suspend = n - 1
                i = len(readings) - 1
                while i >= 0 and readings[i][0] >= suspend:
                    e, k, v = readings[i]
                    if e == suspend:
                        readings[i] = (e, k, max(0, now[k] - v) if k in now else 0)
                    i -= 1
            return
    ev.append((ts, K_RESUME, call, 0))
