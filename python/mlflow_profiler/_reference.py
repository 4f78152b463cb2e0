"""The pure-Python reference capture engine: the executable spec of
docs/capture.md, used by the tests.

It implements the same semantics as the native engine (pyext/engine.cpp and
the files pyext/engine_internal.h lists),
function by function where the two can be compared (``_lane_start``,
``_lane_return``, ``_lane_yield``, ``_lane_resume``, ``_new_lane``,
``_close_entries`` ...), and writes the same events
(userspace/core/model/event.h) into the same lanes. It never builds a tree or
renders: ``profile()`` hands the lanes to ``_core.build_profile`` and the C++
core does the rest, so the two engines can be compared on tree shape.

Its files (docs/engines.md says what must change in step with the native
engine): this one (the engine: lifecycle, lanes of threads and tasks,
profile_span and profile_block, the profile), ``_reference_hook.py`` (the
process-wide state, contexts and the setprofile hook), ``_reference_lanes.py``
(a lane's stack: start, return, yield, resume, I/O, readings) and
``_reference_code.py`` (event constants, bytecode reading, names).

The hook is ``sys.setprofile`` on every Python version (3.9-3.13; on 3.12+
it is the legacy profiler interface that CPython implements on top of
sys.monitoring with its own reserved tool id). It is slow (microseconds per
event); it exists to be read and to be compared against.

How the setprofile events map to the engine's on_* entry points
-----------------------------------------------------------------
- ``call`` of a plain function: a start. ``call`` of generator/coroutine
  code: a first start when the frame has not run yet (3.9/3.10:
  ``f_lasti < 0``; 3.11+: ``f_lasti`` is on ``RESUME`` with oparg 0), else a
  resume; a resume that matches no suspended span of the lane is a start
  flagged ``continued`` (like PY_RESUME on the native 3.12+ path).
- ``return`` of generator code is a yield/await when the frame is
  suspending: the instruction at ``f_lasti`` is ``YIELD_VALUE`` (3.9/3.10:
  also the instruction before ``YIELD_FROM``, where a delegating frame
  rests; 3.13: the ``RESUME`` that follows a ``YIELD_VALUE``).
- ``return`` with ``arg is None`` is an exception exit unless ``f_lasti`` is
  on ``RETURN_VALUE``/``RETURN_CONST`` (a function may return None).
- A generator closed or thrown into while it rests on a bare ``yield`` ends
  with ``arg is None`` on that same yield instruction, which looks like a
  ``yield None``. The reference marks such resumes as throws: on 3.11/3.12
  exactly (a throw resumes with ``f_lasti`` on ``YIELD_VALUE``, a send on the
  next ``RESUME``); on every version when Python code calls
  ``gen.throw``/``gen.close`` or an async generator's ``athrow``/``aclose``
  (seen as a ``c_call``; the whole ``yield from``/``await`` chain is marked); on 3.9/3.10 also when the
  caller's current instruction only drops a reference (POP_TOP, STORE_*,
  DELETE_*, jumps, RETURN_VALUE: the generator is being finalized, as after a
  ``break`` out of a ``for`` loop). A throw-resumed frame whose next return
  is ``arg is None`` on the yield it resumed from is an exception exit.
  Known limit: a generator that catches a thrown exception and yields None
  again from that very instruction (``while True: try: yield except E:
  pass``) is recorded as ending there, and its later resumes as
  ``continued`` starts; and on 3.13, a throw from C code (asyncio
  cancellation) into a bare ``yield`` is recorded as a yield.
- ``c_call``/``c_return``/``c_exception``: C spans (``capture_c_calls``).
  setprofile reports only builtin functions and methods (3.12+: method
  descriptors bound to their self); the native 3.12+ path, on sys.monitoring
  CALL events, also reports calls of types and other callables.

Execution contexts
------------------
A lane is one session in one (thread, contextvars.Context). Python gives no
handle on the current Context object (``copy_context()`` makes a new one),
so contexts are told apart with a private ContextVar ``_ctx_marker`` and the
rule that a ``Token`` can only be reset in the Context that created it:

- the first time the reference sees a context, it stores a fresh ``_Mark``
  object there (``mark.token = _ctx_marker.set(mark)``);
- afterwards, ``_ctx_marker.get()`` returns that mark, but a copy of the
  context (an asyncio task, ``loop.call_soon`` callbacks) inherits it, so the
  mark is verified: ``_ctx_marker.reset(mark.token)`` succeeds only in the
  context that set it (and is then set again, leaving the context as it
  was); in a copy it raises ValueError and the copy gets its own mark.

So marks are as unique as the Context objects (and, being held by the
engine, never reused), and lanes are keyed by (thread, mark) where the native
engine keys them by (thread id, Context address). A thread is the
reference's per-thread state object, not its ident: a joined thread's ident
is handed to the next thread started, which must get a lane of its own
(task 0), not continue the finished thread's. The check runs on every
event: context switches happen inside C calls (``Context.run``, asyncio's C
task step) that the profiler does not always see, and a stale answer would
put events in the wrong lane.

The engine's own frames
-----------------------
What the native engine does in C (starting and stopping, profile_span's
wrapper, profile_block's enter and exit) is Python code here. Its frames,
and ProfileSession's two methods that only the reference path calls, are
ignored by the hook altogether (``_INVISIBLE``), as if they were C: being
transparent would not be enough, since below the ceiling transparent frames
count, and a block opened inside ``block_enter`` moves the depth counter
between that frame's call and its return. While that code updates lanes it
sets ``busy`` on the thread's state, so the events of the C functions it
calls do not re-enter the lane state.

Where it deliberately differs from pyext/engine.cpp
---------------------------------------------------
- Contexts and threads are identified by objects the engine holds (see
  above), never by addresses or idents that can be reused.
- ``_on_c_return`` closes the innermost C span only when it is the
  innermost open level (its depth is the counter): the return of a call of
  the same callable below the ceiling, which was not recorded, must not
  close it (``sorted(key=f)`` at the ceiling with ``f`` calling ``sorted``).
- C calls of the profiler's own callables (``profile_block.__exit__``,
  which a ``with`` statement calls like any method) are plumbing, like the
  profiler's own frames: never C spans.

Other profilers
---------------
The hook chains to the profile function that was installed before it (a
``sys.setprofile`` function is called first with the same arguments) and
puts it back at the end. On 3.9-3.11, cProfile installs a C profile function
whose object (``sys.getprofile()``) is the Profiler, not a callable: pure
Python cannot call it, so cProfile does not count during a reference session
on those versions; it is re-enabled (``Profiler.enable()``) when the session
ends. On 3.12+ cProfile is a sys.monitoring tool and runs alongside.

Failures
--------
The profile function never raises into user code: an exception inside it
(other than KeyboardInterrupt/SystemExit, which are the user's) is recorded
in ``failures`` and stops recording for the sessions involved.
"""

from __future__ import annotations

import contextvars
import os
import platform
import socket
import sys
import threading
import time
import types
from typing import Any, Dict, List, Optional, Tuple

from . import _core, _reference_code, _reference_hook, _reference_lanes, _traces, _transparent
from ._reference_code import (
    _GEN_FLAGS,
    _INT32_MAX,
    _PY,
    E_BLOCK,
    EV_BLOCK,
    EV_RESOURCE,
    EV_WAIT,
    FN_BLOCK,
    FN_C,
    FN_PYTHON,
    K_CALL,
    K_LABEL,
    K_MARK,
    K_RETURN,
    _cfunction_info,
    _gen_frame,
    _is_generator_object,
    _name_before_311,
    classify_user_code,
)
from ._reference_hook import (  # _dispatch and _thread_session: looked up here (tests, span_api.cpp)
    _INVISIBLE,
    _collecting,
    _ctx_mark,
    _current_lanes,
    _dispatch,  # noqa: F401
    _entered_by_coroutine,
    _innermost_span,
    _install_binder,
    _install_hook,
    _lanes_now,
    _Mark,
    _thread_session,  # noqa: F401
    _thread_state,
    _ThreadState,
    _throw_at,
    _throw_pending,
    _uninstall_binder,
    _uninstall_hook,
)
from ._reference_lanes import (
    _MAX_IO_ARGUMENTS,
    VALUE_ALLOC,
    _append_io,
    _capture_return,
    _close_entries,
    _Lane,
    _names_resource,
    _ReadingEvents,
    _restart_calls,
    _stretch_start,
    _warn_once,
)

# --- profile_block support ------------------------------------------------------------


class _BlockToken:
    """Returned by block_enter; `exit(exception)` closes the block's spans."""

    __slots__ = ("_entries",)

    def __init__(self, entries) -> None:
        self._entries = entries  # (engine, lane index, call index, I/O wanted)

    def io_targets(self) -> list:
        """(lane, call index) of the entries within their lane's I/O depth."""
        out = []
        for eng, lane_index, call_index, wanted in self._entries:
            if wanted and eng.state == "collecting" and lane_index < len(eng._lanes):
                out.append((eng._lanes[lane_index], call_index))
        return out

    def exit(self, exception: bool = False) -> None:
        if not self._entries:
            return
        st = _thread_state()
        was, st.busy = st.busy, True
        try:
            self._close(bool(exception))
        except Exception as exc:  # pragma: no cover - never raise into user code
            for eng, *_ in self._entries:
                eng._fail(f"internal error closing a block: {exc!r}")
        finally:
            st.busy = was
        self._entries = ()

    def _close(self, exception: bool) -> None:
        for eng, lane_index, call_index, _ in self._entries:
            if eng.state != "collecting" or lane_index >= len(eng._lanes):
                continue
            L = eng._lanes[lane_index]
            for j in range(len(L.rec) - 1, -1, -1):
                e = L.rec[j]
                if e[2] == E_BLOCK and e[0] == call_index:
                    L.depth = e[1] - 1
                    _close_entries(L, j, exception, _core.now_ns())
                    break


# --- the engine ---------------------------------------------------------------------------


class ReferenceEngine:
    """Pure-Python counterpart of `_core.Engine` (same constructor, same
    attributes), used with ``profiling(engine="reference")``."""

    hook = "reference"

    def __init__(
        self,
        depth: int,
        max_events: int,
        all_threads: bool,
        capture_c_calls: bool,
        capture_io: bool = False,
        io_depth: int = -1,
        transparent_codes=(),
        fold_parents=(),
        fold_codes=None,
        values: int = 0,
    ) -> None:
        self.depth = depth
        self.values = values  # per-span values: bits 1 << VALUE_CPU, VALUE_ALLOC
        self._counting_alloc = False
        self.transparent_codes = frozenset(transparent_codes)
        self._fold_refs = (
            list(fold_parents),
            list(fold_codes or ()),
        )  # keeps the codes: their ids stay theirs
        self.fold_parents = frozenset(map(id, fold_parents))
        self.fold_codes = {
            id(code): label for code, label in self._fold_refs[1]
        }  # by identity, as native
        self.capture_io = bool(capture_io)
        self.io_depth = io_depth
        self.max_events = max_events
        self.all_threads = bool(all_threads)
        self.capture_c_calls = bool(capture_c_calls)
        self.state = "idle"
        self.failures: List[str] = []
        self.notes: List[str] = []  # what changed in how calls were named (logged once)
        self.start_ns = 0
        self.end_ns = 0
        self._session = None
        self._token: Optional[contextvars.Token] = None
        self._parent: Optional[ReferenceEngine] = None
        self._parent_session = None
        self._lanes: List[_Lane] = []
        self._start_thread: Optional[_ThreadState] = None
        self._trace: Optional[Tuple[str, str]] = (
            None  # the trace context at start (_traces.current)
        )
        # Lanes by thread, then by context. A thread is its _ThreadState, not
        # its ident: idents (pthread_t) are reused as soon as a thread is
        # joined, and a new thread must not continue a finished thread's lane.
        self._lane_index: Dict[_ThreadState, Dict[Optional[_Mark], _Lane]] = {}
        self._lane_by_mark: Dict[_Mark, _Lane] = {}  # every lane of a context (not a thread's own)
        self._suspended: Dict[
            int, Tuple[int, int, List[list], Any, int]
        ] = {}  # id(frame) -> (lane, depth, entries, code, its own open blocks)
        # all_threads: threads started in the session and not bound yet, by
        # id(): (the Thread, the lane that started it, the span it hangs under
        # or None for a root). engine.cpp Engine::note_thread_start.
        self._thread_origins: Dict[int, Tuple[Any, int, Optional[int]]] = {}
        self._gen_labels: Dict[
            int, Tuple[int, Any, Optional[int]]
        ] = {}  # frame -> (label, code, resource)
        self._functions: List[tuple] = []
        self._function_index: Dict[tuple, int] = {}
        self._code_ids: Dict[Any, int] = {}
        self._cfunc_ids: Dict[tuple, int] = {}
        self._labels: List[str] = []
        self._label_index: Dict[str, int] = {}
        self._profile: Optional[_core.Profile] = None
        self._failed = False
        self._start_unix_ns = 0
        self._loop_watched = False
        self._origin_awaits = False

    # -- interning ---------------------------------------------------------------

    def _add_function(
        self, name: str, module: str, file: str, line: int, kind: int, user_code: bool
    ) -> int:
        key = (name, module, file, line, kind)
        fid = self._function_index.get(key)
        if fid is None:
            fid = len(self._functions)
            self._functions.append((name, module, file, line, kind, bool(user_code)))
            self._function_index[key] = fid
        return fid

    def _function_id(self, code, frame) -> int:
        fid = self._code_ids.get(code)
        if fid is None:
            name = code.co_qualname if _PY >= (3, 11) else _name_before_311(code, frame)
            module = ""
            if frame is not None and frame.f_code is code:
                m = frame.f_globals.get("__name__")
                module = m if isinstance(m, str) else ""
            file = code.co_filename or ""
            fid = self._add_function(
                name, module, file, code.co_firstlineno, FN_PYTHON, classify_user_code(file, module)
            )
            self._code_ids[code] = fid
        return fid

    def _cfunction_id(self, callable_) -> int:
        name, module = _cfunction_info(callable_)
        return self._add_function(name, module, "", 0, FN_C, False)

    def _label_id(self, label: str) -> int:
        lid = self._label_index.get(label)
        if lid is None:
            lid = len(self._labels)
            self._labels.append(label)
            self._label_index[label] = lid
        return lid

    def _block_function(self, label: str) -> int:
        return self._add_function(label, "", "", 0, FN_BLOCK, True)

    # -- lanes ---------------------------------------------------------------------

    def _note(self, what: str) -> None:
        if what not in self.notes:
            self.notes.append(what)

    def _fail(self, why: str) -> None:
        if why not in self.failures:
            self.failures.append(why)
        self._failed = True
        for L in self._lanes:
            L.truncated = True

    def _new_lane(self, st: _ThreadState, thread_id: int, mark: Optional[_Mark]) -> _Lane:
        L = _Lane()
        L.engine = self
        L.index = len(self._lanes)
        L.thread_id = thread_id
        L.mark = mark
        L.soft_cap = self.max_events
        L.hard_cap = self.max_events * 2 + 64
        L.events = _ReadingEvents(self.values)
        L.readings = L.events.readings
        L.truncated = self._failed
        if threading.get_ident() == thread_id:
            try:
                L.native_tid = threading.get_native_id()
            except Exception:  # pragma: no cover
                L.native_tid = 0
        th = threading._active.get(thread_id)  # type: ignore[attr-defined]  # no _DummyThread
        name = getattr(th, "name", None) if th is not None else None
        L.thread_name = name if isinstance(name, str) and name else f"Thread-{thread_id}"
        per_thread = self._lane_index.setdefault(st, {})
        L.task = len(per_thread)
        bound_task = st.bound is self and mark is not None  # _lanes_now: _awaited(mark)
        base = 0
        if self._lanes:
            # A lane opened inside the session hangs under the innermost span
            # of the lane its context was copied from (a task created in a
            # task), else the origin lane's (engine.cpp new_lane). A creator
            # with no span open passes on where it hangs itself.
            creator = self._lanes[0]
            parent = mark.parent() if mark is not None and mark.parent is not None else None
            if parent is not None and (st is self._start_thread or bound_task):
                creator = self._lane_by_mark.get(parent, creator)
            span = _innermost_span(creator, st is not self._start_thread)
            if span is not None:
                L.parent_lane = creator.index
                L.parent_call, base = span[0], creator.depth_base + span[1] + 1
            else:
                L.parent_lane, L.parent_call, base = (
                    creator.parent_lane,
                    creator.parent_call,
                    creator.depth_base,
                )
        # A task lane continues its creator's depth (its coroutines are the
        # creator's callees). A thread lane gets the whole ceiling for its own
        # frames: its target is its root, shown under the span that started it.
        if st is not self._start_thread and not bound_task:
            base = 0
            # (the dict holds each Thread, so its id() is not reused meanwhile)
            origin = self._thread_origins.pop(id(th), None) if th is not None else None
            if origin is not None:
                # Where its Thread.start ran, not where the origin lane is now.
                L.parent_lane = -1 if origin[2] is None else origin[1]
                L.parent_call = 0 if origin[2] is None else origin[2]
        L.depth_base = base
        L.ceiling = _INT32_MAX if self.depth < 0 else self.depth - base
        if self.capture_io:
            L.io_ceiling = L.ceiling if self.io_depth < 0 else min(L.ceiling, self.io_depth - base)
        per_thread[mark] = L
        if mark is not None:
            self._lane_by_mark[mark] = L
        self._lanes.append(L)
        if _core.watch_selectors():  # loop_watch.cpp: their waits come to wait_call
            self._loop_watched = True
        return L

    def _awaited(self, mark: _Mark) -> bool:
        """In a thread bound to this session: whether the current context
        (`mark`) is a copy of one of its asyncio task contexts (engine.cpp
        Engine::awaited_context)."""
        L = self._lane_by_mark.get(mark)
        parent = mark.parent() if L is None and mark.parent is not None else None
        if parent is not None:
            L = self._lane_by_mark.get(parent)
        return L is not None and L.task > 0  # (a thread's own lane has no mark)

    def _lane_for(self, st: _ThreadState, thread_id: int, mark: Optional[_Mark]) -> Optional[_Lane]:
        per_thread = self._lane_index.get(st)
        if per_thread is not None:
            L = per_thread.get(mark)
            if L is not None:
                return L
        try:
            return self._new_lane(st, thread_id, mark)
        except Exception as exc:
            self._fail(f"could not create a lane: {exc!r}")
            return None

    # -- lifecycle -------------------------------------------------------------------

    def start(self, session, levels_above: int = 1) -> None:
        if self.state != "idle":
            raise RuntimeError(
                "this ProfileSession has already run; a session records once. Create a new one "
                "with profiling()"
            )
        st = _thread_state()
        was, st.busy = st.busy, True
        try:
            self._start(session)
        finally:
            st.busy = was

    def _start(self, session) -> None:
        _register_invisible()
        _transparent.refresh()
        current = _core.session_var.get(None)
        if current is not None:
            eng = getattr(current, "_engine", None)
            if isinstance(eng, ReferenceEngine) and eng.state == "collecting":
                self._parent = eng
                self._parent_session = current
        self._token = _core.session_var.set(session)
        self._session = session
        self.start_ns = _core.now_ns()
        self._start_unix_ns = time.time_ns()
        self._trace = _traces.current()  # (trace_id, span_id) or None
        self._start_thread = start_thread = _thread_state()
        if self.values & (1 << VALUE_ALLOC):
            why = _core.alloc_count_start()
            self._counting_alloc = why is None
            if why is not None:
                self.values &= ~(1 << VALUE_ALLOC)
                self.notes.append(why)
                _warn_once(why)
        self._origin_awaits = _entered_by_coroutine()
        self._new_lane(
            start_thread, threading.get_ident(), _ctx_mark()
        )  # the origin lane: the entering frame is depth -1
        _collecting.append(self)
        _core._reference_collecting(1)
        _reference_hook._generation += 1
        self.state = "collecting"
        try:
            # The binder first: threading.setprofile is Python code that the
            # hook would otherwise record as a root of this session.
            if self.all_threads:
                _install_binder()
            _install_hook()
        except Exception as exc:
            self._fail(f"could not install the profiling hook: {exc!r}")

    def stop(self) -> bool:
        """Ends capture; True when there are failures to log (as the native engine)."""
        if self.state != "collecting":
            return bool(self.failures or self.notes)
        st = _thread_state()
        was, st.busy = st.busy, True
        try:
            self._stop()
        except Exception as exc:  # pragma: no cover - stop() never raises
            self._fail(f"ending the session failed: {exc!r}")
        finally:
            st.busy = was
        return bool(self.failures or self.notes)

    def _stop(self) -> None:
        self.end_ns = _core.now_ns()
        self.state = "finalized"
        if self in _collecting:
            _collecting.remove(self)
        _core._reference_collecting(-1)
        _reference_hook._generation += 1
        if self._counting_alloc:
            self._counting_alloc = False
            _core.alloc_count_stop()
        try:
            _uninstall_hook()
            if self.all_threads:
                _uninstall_binder()
        except Exception as exc:
            self._fail(f"could not remove the profiling hook: {exc!r}")
        if self._token is not None:
            try:
                _core.session_var.reset(self._token)
            except (ValueError, RuntimeError):
                # Left in another context (manual __exit__ elsewhere): the
                # variable there still names this session, which records nothing.
                self._fail("the session was ended in a different context than it was entered in")
        self._token = None
        self._thread_origins.clear()
        self._suspended.clear()
        self._gen_labels.clear()
        self._session = None
        if not _collecting:
            _throw_pending.clear()
            _throw_at.clear()

    def profile(self):
        if self._profile is not None:
            return self._profile
        if self.state != "finalized":
            raise RuntimeError(f"the session is {self.state}: the profile is built after it ends")
        lanes = []
        skipped = 0
        for L in self._lanes:
            lanes.append(
                {
                    "thread_id": L.thread_id,
                    "native_tid": L.native_tid,
                    "thread_name": L.thread_name,
                    "task": L.task,
                    "parent_lane": L.parent_lane,
                    "parent_call": L.parent_call,
                    "dropped": L.dropped,
                    "truncated": L.out_truncated,
                    "events": L.events,
                    "io": L.io,
                    "readings": L.readings or [],
                    # cut from the thread's timeline, off-CPU time: in C++
                    "overhead": L.overhead,
                    "cpu_reads": L.events.cpu_reads,
                    **(
                        {"trace_id": self._trace[0], "span_id": self._trace[1]}
                        if self._trace
                        else {}
                    ),
                }
            )
            skipped += L.skipped
        meta = {
            "engine": self.hook,
            "python": platform.python_version(),
            "pid": str(os.getpid()),
            "start_unix_ns": str(self._start_unix_ns),
            "host": socket.gethostname(),
            **(
                {"loop_waits": "selector"}
                if self._loop_watched
                else {"loop_waits": "awaits"}
                if self._origin_awaits
                else {}
            ),
        }
        end_ns = self.end_ns or _core.now_ns()
        self._profile = _core.build_profile(
            lanes, self._functions, self._labels, self.depth, self.start_ns, end_ns, skipped, meta
        )
        self._lanes = []  # the events now live in the profile
        self._lane_index = {}
        self._lane_by_mark = {}
        self._code_ids = {}
        return self._profile

    # -- profile_span / profile_block ------------------------------------------------------

    def label_call(self, label, func, args, kwargs, resource=None):
        """What profile_span's wrapper does when this session is current."""
        lanes = _current_lanes()
        if not lanes:
            return func(*args, **kwargs)
        if isinstance(func, types.FunctionType):
            code = func.__code__
            if code.co_flags & _GEN_FLAGS:
                result = func(*args, **kwargs)
                if _is_generator_object(result):
                    st = _thread_state()
                    was, st.busy = st.busy, True
                    try:
                        f = _gen_frame(result)
                        if f is not None:
                            for L in _lanes_now(st):
                                L.engine._gen_labels[id(f)] = (
                                    L.engine._label_id(label),
                                    code,
                                    None if resource is None else L.engine._label_id(resource),
                                )
                    finally:
                        st.busy = was
                return result
            st = _thread_state()
            was, st.busy = st.busy, True
            try:
                for L in lanes:
                    L.pending_code = code
                    L.pending_label = L.engine._label_id(label)
                    L.pending_resource = None if resource is None else L.engine._label_id(resource)
            finally:
                st.busy = was
            try:
                return func(*args, **kwargs)
            finally:
                was, st.busy = st.busy, True
                try:
                    for L in _lanes_now(st):
                        if L.pending_code is code:
                            L.pending_code = None
                finally:
                    st.busy = was
        token = self.block_enter(label, resource)
        targets = token.io_targets()
        if targets:
            since = _stretch_start(L for L, _ in targets)
            for i, value in enumerate(args[:_MAX_IO_ARGUMENTS]):
                _append_io(targets, _core.IO_ARGUMENT, f"args[{i}]", _core.summarize(value))
            for name, value in list(kwargs.items())[: max(0, _MAX_IO_ARGUMENTS - len(args))]:
                _append_io(targets, _core.IO_ARGUMENT, name, _core.summarize(value))
            _restart_calls(targets, since)
        try:
            result = func(*args, **kwargs)
        except BaseException:
            token.exit(True)
            raise
        token.exit(False)
        if targets:
            _capture_return(result, targets)
        return result

    def wait_call(self, select, args, kwargs):
        """What loop_watch.cpp's wrapper of a selector's select does when
        this session is current (engine.cpp wait_begin/wait_end):
        the wait is a leaf span flagged EV_WAIT under each lane's innermost
        open span, or the select frame itself, flagged, when it was recorded."""
        st = _thread_state()
        was, st.busy = st.busy, True
        notes = []
        try:
            for L in _lanes_now(st):
                if L.truncated or not any(e[0] is not None for e in L.rec):
                    continue
                # Named in the lane's own session: an outer one has its own function table.
                notes.append((L, len(L.events), L.engine._wait_function(select)))
        except Exception as exc:  # never raise into user code
            self._fail(f"internal error timing the event loop: {exc!r}")
            notes = []
        finally:
            st.busy = was
        start = _core.now_ns()
        try:
            return select(*args, **kwargs)
        finally:
            end = _core.now_ns()
            was, st.busy = st.busy, True
            try:
                for L, before, fid in notes:
                    if L.truncated or L.engine.state != "collecting":
                        continue
                    if len(L.events) > before:
                        ts, kind, id_, flags = L.events[before]
                        if kind == K_CALL and id_ == fid:
                            L.events[before] = (ts, kind, id_, flags | EV_WAIT)
                        continue
                    if len(L.events) + 2 > L.soft_cap:
                        L.dropped += 1
                        continue
                    L.events.append((start, K_CALL, fid, EV_WAIT))
                    L.events.append((end, K_RETURN, 0, 0))
                    L.last_was_suspend = False
            except Exception as exc:  # never raise into user code
                self._fail(f"internal error timing the event loop: {exc!r}")
            finally:
                st.busy = was

    def _wait_function(self, select) -> int:
        """The function id of a selector's select method, named as its frame is."""
        func = getattr(select, "__func__", select)
        code = func.__code__
        return self._add_function(
            func.__qualname__,
            func.__module__,
            code.co_filename,
            code.co_firstlineno,
            FN_PYTHON,
            False,
        )

    def mark(self, name, resource=None) -> None:
        """An instant named `name` in the current lanes, about `resource`
        (engine.cpp mark)."""
        if not _collecting:
            return
        st = _thread_state()
        was, st.busy = st.busy, True
        try:
            for L in _lanes_now(st):
                if L.truncated:
                    continue
                if len(L.events) >= L.soft_cap:
                    L.dropped += 1
                    continue
                ts = _core.now_ns()
                if resource is not None:
                    L.events.append((ts, K_LABEL, L.engine._label_id(resource), EV_RESOURCE))
                L.events.append((ts, K_MARK, L.engine._label_id(name), 0))
        except Exception as exc:  # never raise into user code
            self._fail(f"internal error recording a mark: {exc!r}")
        finally:
            st.busy = was

    def block_enter(self, label, resource=None, automatic=False) -> _BlockToken:
        """Opens a profile_block span in the current lanes (using `resource`,
        a str, if given); returns its token. `automatic` (named by the
        profiler): not in a lane where an open span already names a resource."""
        entries: List[tuple] = []
        if not _collecting:
            return _BlockToken(entries)
        st = _thread_state()
        was, st.busy = st.busy, True
        try:
            for L in _lanes_now(st):
                d = L.depth + 1
                # A block that names a resource: below the ceiling too, as a leaf.
                if d < 0 or (d > L.ceiling and resource is None) or L.truncated:
                    continue
                if automatic and _names_resource(L):  # the user's name wins
                    continue
                if len(L.events) >= L.soft_cap:
                    L.dropped += 1
                    continue
                fid = L.engine._block_function(label)
                ts = _core.now_ns()
                if resource is not None:
                    L.events.append((ts, K_LABEL, L.engine._label_id(resource), EV_RESOURCE))
                idx = len(L.events)
                L.events.append((ts, K_CALL, fid, EV_BLOCK))
                L.rec.append([idx, d, E_BLOCK, 0, False, None])
                L.depth = d
                L.last_was_suspend = False
                entries.append((L.engine, L.index, idx, d <= L.io_ceiling))
        except Exception as exc:  # never raise into user code
            self._fail(f"internal error opening a block: {exc!r}")
        finally:
            st.busy = was
        return _BlockToken(entries)


_reference_hook.ReferenceEngine = ReferenceEngine  # type: ignore[misc]  # its late-bound name
_MODULES = (_reference_code, _reference_lanes, _reference_hook, sys.modules[__name__])
for _module in _MODULES:
    _transparent.add_module(_module)


_registered = False


def _register_invisible() -> None:
    # Every frame of the reference engine's modules: the native engine does this work in C, with
    # no frames to count (below the ceiling, where transparency does not
    # apply, they would add to the depth counter and to events_skipped). And
    # ProfileSession's two methods that only the reference path calls.
    # Idempotent; runs from the package's __init__ (once _session exists) and
    # again, as a fallback, when a reference session starts.
    global _registered
    if _registered:
        return
    _registered = True
    from ._session import ProfileSession

    for module in _MODULES:
        for value in list(vars(module).values()):
            if getattr(value, "__module__", None) == module.__name__:
                _transparent.collect_codes(value, _INVISIBLE)
    for fn in (
        ProfileSession._label_call,
        ProfileSession._block_enter,
        ProfileSession._wait_call,
        ProfileSession._mark,
    ):
        _transparent.collect_codes(fn, _INVISIBLE)


# _register_invisible() runs from the package's __init__, once _session exists.
