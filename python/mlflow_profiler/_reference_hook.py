"""The reference engine (_reference.py): its process-wide state and its
hook. Contexts told apart by marks, the per-thread state and its cache of
current lanes (pyext/engine.cpp lanes_now/refresh), and the sys.setprofile
function that turns interpreter events into the lane operations of
_reference_lanes.py (pyext/engine.cpp's on_* entry points), with the thread
binder of all_threads."""

from __future__ import annotations

import contextvars
import sys
import threading
import types
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from . import _core, _transparent
from ._reference_code import (
    _GEN_FLAGS,
    E_CCALL,
    E_FRAME,
    EV_CFUNCTION,
    K_CALL,
    _at_return,
    _at_yield,
    _ckey,
    _gen_frame,
    _is_first_start,
    _is_generator_object,
    _resumed_by_throw,
)
from ._reference_lanes import (
    _capture_arguments,
    _capture_return,
    _close_entries,
    _Lane,
    _lane_resume,
    _lane_return,
    _lane_start,
    _lane_yield,
)

# --- process-wide state -----------------------------------------------------------

_ctx_marker: contextvars.ContextVar = contextvars.ContextVar("mlflow_profiler._reference.context")


class _Mark:
    """Identity of one contextvars.Context (see the module docstring).
    `parent`: a weak reference to the mark of the context it was copied
    from (an asyncio task's creator), None for a context first seen bare."""

    __slots__ = ("token", "parent", "__weakref__")
    token: contextvars.Token
    parent: Optional[weakref.ReferenceType[_Mark]]


def _ctx_mark() -> _Mark:
    m = _ctx_marker.get(None)
    if m is not None:
        try:
            _ctx_marker.reset(m.token)
        except (ValueError, RuntimeError):
            pass  # a copy of m's context: give it its own mark
        else:
            m.token = _ctx_marker.set(m)
            return m
    new = _Mark()
    new.parent = None if m is None else weakref.ref(m)
    new.token = _ctx_marker.set(new)
    return new


if TYPE_CHECKING:
    from ._reference import ReferenceEngine
else:  # the engine class (_reference.py, which imports this module, sets it)
    ReferenceEngine = type(None)
_collecting: List[ReferenceEngine] = []  # collecting engines, oldest first
_generation = 1
_tls = threading.local()
_throw_pending: set = (
    set()
)  # id(frame) of generators that a throw()/close() call is about to resume
_throw_at: Dict[int, int] = {}  # id(frame) -> f_lasti a throw resumed it at


def _thread_state() -> _ThreadState:
    st = getattr(_tls, "st", None)
    if st is None:
        st = _ThreadState()
        _tls.st = st
    return st


class _ThreadState:
    __slots__ = (
        "users",
        "prev",
        "saved",
        "installed",
        "gen",
        "mark",
        "sess",
        "lanes",
        "bound",
        "busy",
    )

    def __init__(self) -> None:
        self.users = 0
        self.prev: Optional[Callable[..., Any]] = None  # chained: the profile function before ours
        self.saved: Any = None  # what sys.getprofile() returned before ours, put back at the end
        self.installed = False
        self.gen = 0
        self.mark: Optional[_Mark] = None
        self.sess: Any = None  # the current ProfileSession when the lanes were found
        self.lanes: List[_Lane] = []
        self.bound: Optional[ReferenceEngine] = None
        # True while the engine's own code (label_call, block_enter, start,
        # stop) updates lanes outside the hook: the events its C calls raise
        # are the profiler's own and must not re-enter the lane state.
        self.busy = False


def _lanes_now(st: _ThreadState) -> List[_Lane]:
    """Lanes of the sessions current in this thread and context, innermost
    first (engine.cpp lanes_now/refresh)."""
    sess = _core.session_var.get(None)
    mark = _ctx_mark()
    if st.gen == _generation and st.mark is mark and st.sess is sess:
        return st.lanes
    lanes: List[_Lane] = []
    e = None
    if sess is not None:
        eng = getattr(sess, "_engine", None)
        if isinstance(eng, ReferenceEngine) and eng.state == "collecting":
            e = eng
    if e is None and st.bound is not None:
        if st.bound.state == "collecting":
            e = st.bound
        else:
            st.bound = None
    tid = threading.get_ident()
    # As engine.cpp refresh: a thread that only runs a context carrying the
    # session (asyncio.to_thread, 3.14t's inherited contexts) is not recorded.
    here = False
    while e is not None and len(lanes) < 4:
        here = here or e is st.bound or e._start_thread is st
        if here and e.state == "collecting":
            # A thread bound by all_threads has one lane for all its contexts:
            # 3.14 runs a thread's target in a context of its own, entered
            # after the thread's first event (Thread(context=...)).
            # A copy of a task's context (asyncio.to_thread) has a lane of
            # its own there, hung under the task's span that awaits the work.
            lane = e._lane_for(st, tid, mark if e is not st.bound or e._awaited(mark) else None)
            if lane is not None:
                lanes.append(lane)
        e = e._parent
    st.gen = _generation
    st.mark = mark
    st.sess = sess
    st.lanes = lanes
    return lanes


# Engine code that runs outside the hook (start, stop, label_call,
# block_enter, a block's exit) sets `busy` on the thread state, inline, around
# its work: the events of what it calls are then ignored, calls and returns
# alike. It is never a helper function or a context manager: a Python frame
# that sets or clears the flag would have its call seen and its return
# ignored (or the reverse), which moves the depth counter below the ceiling.


def _current_lanes() -> List[_Lane]:
    """The current lanes, from engine code outside the hook."""
    if not _collecting:
        return []
    st = _thread_state()
    was, st.busy = st.busy, True
    try:
        return _lanes_now(st)
    finally:
        st.busy = was


def _thread_session():
    """The session whose reference engine records this thread, for a thread
    that does not have it in its context (all_threads): profile_span's and
    profile_block's C wrappers ask here (pyext/span_api.cpp), else None."""
    lanes = _current_lanes()
    return lanes[0].engine._session if lanes else None


# --- the hook -----------------------------------------------------------------------


_OWN_TYPES = (_core.profile_block, _core.SpanFunction, _core.SelectWait)
_OWN_FUNCTIONS = (  # ProfileSession's (C methods: _core.pyi stubs them as functions)
    _core.session_enter.__func__,  # type: ignore[attr-defined]
    _core.session_exit.__func__,  # type: ignore[attr-defined]
)


def _is_own_callable(callable_) -> bool:
    """The profiler's own C callables (profile_block's and ProfileSession's
    __exit__, which a `with` statement calls like any method): plumbing,
    never a span."""
    return (
        isinstance(getattr(callable_, "__self__", None), _OWN_TYPES)
        or callable_ in _OWN_TYPES
        or any(callable_ is f for f in _OWN_FUNCTIONS)
    )


def _on_c_call(lanes: List[_Lane], callable_, caller_code) -> None:
    if _is_own_callable(callable_):
        return
    for L in lanes:
        eng = L.engine
        if not eng.capture_c_calls:
            continue
        d = L.depth + 1
        if d < 0 or d > L.ceiling or L.truncated:
            continue
        if caller_code is not None and caller_code in _transparent.CODES:
            continue  # the profiler's own calls
        if L.hidden:
            continue  # inside a hidden code
        if len(L.events) >= L.soft_cap:
            L.dropped += 1
            continue
        fid = eng._cfunction_id(callable_)
        idx = len(L.events)
        L.events.append((_core.now_ns(), K_CALL, fid, EV_CFUNCTION))
        L.rec.append([idx, d, E_CCALL, _ckey(callable_), False, None])
        L.depth = d
        L.last_was_suspend = False


def _on_c_return(lanes: List[_Lane], callable_, exception: bool) -> None:
    key = None
    for L in lanes:
        rec = L.rec
        # The C span must be the innermost open level: a call of the same
        # callable below the ceiling (not recorded) returns while the counter
        # is deeper, and must not close the recorded one around it.
        if not rec or rec[-1][2] != E_CCALL or rec[-1][1] != L.depth:
            continue
        if key is None:
            key = _ckey(callable_)
        if rec[-1][3] != key:
            continue
        L.depth = rec[-1][1] - 1
        _close_entries(L, len(rec) - 1, exception, _core.now_ns())


def _note_throw(callable_) -> None:
    """gen.throw()/gen.close() called from Python: mark the frames it resumes."""
    if not isinstance(callable_, types.BuiltinFunctionType):
        return
    if callable_.__name__ not in ("throw", "close", "athrow", "aclose"):
        return  # (an async generator's athrow()/aclose() throw when their awaitable first runs)
    obj = getattr(callable_, "__self__", None)
    for _ in range(64):  # the yield from / await chain
        if not _is_generator_object(obj):
            return
        f = _gen_frame(obj)
        if f is None:
            return
        _throw_pending.add(id(f))
        obj = (
            getattr(obj, "gi_yieldfrom", None)
            or getattr(obj, "cr_await", None)
            or getattr(obj, "ag_await", None)
        )


def _entered_by_coroutine() -> bool:
    """Whether the frame that enters the session (past the profiler's own and
    contextlib's) is a coroutine's: its awaits are then the event loop's idle
    time (engine.cpp origin_awaits_)."""
    f: Optional[types.FrameType] = sys._getframe(1)
    while f is not None:
        name = f.f_globals.get("__name__", "")
        if not (
            f.f_code in _INVISIBLE
            or (
                isinstance(name, str)
                and (
                    name == "contextlib"
                    or name == "mlflow_profiler"
                    or name.startswith("mlflow_profiler.")
                )
            )
        ):
            break
        f = f.f_back
    return f is not None and bool(f.f_code.co_flags & (0x80 | 0x200 | 0x100))


def _innermost_span(L: _Lane, awaiting: bool = False) -> Optional[Tuple[int, int]]:
    """(call, depth) of the lane's innermost open span, or of its last
    suspended chain's innermost span when none is open (engine.cpp
    innermost_span). `awaiting`: for work another thread runs for the lane's
    task, which may still be running: its innermost open coroutine."""
    if awaiting:
        for e in reversed(L.rec):
            if e[2] == E_FRAME and e[3]:
                return e[0], e[1]
    if L.rec:
        return L.rec[-1][0], L.rec[-1][1]
    if L.last_was_suspend and L.chain_top is not None:
        return L.chain_top, L.chain_top_depth
    return None


_THREAD_START = "start_joinable_thread" if sys.version_info >= (3, 13) else "start_new_thread"


def _note_thread_start(lanes: List[_Lane], callable_, frame) -> None:
    """all_threads: Thread.start calls _thread's start function (the native
    engine's wrapper of it has the same name): the new thread's lane will
    hang under this lane's innermost open span (Engine::note_thread_start)."""
    if (
        getattr(callable_, "__name__", None) != _THREAD_START
        or getattr(callable_, "__module__", None) != "_thread"
    ):
        return
    e = _newest_all_threads_engine()
    if e is None or frame is None:
        return
    for L in lanes:
        if L.engine is e:
            th = frame.f_locals.get("self")
            if isinstance(th, threading.Thread):
                span = _innermost_span(L)
                e._thread_origins[id(th)] = (th, L.index, None if span is None else span[0])
            return


# The frames of this module (and of ProfileSession's reference-only
# methods) stand for C code in the native engine: their events are ignored
# entirely, as if they were C. Being transparent is not enough: below the
# ceiling transparent frames count, and a block opened inside block_enter
# moves the depth counter between the frame's call and its return, so the
# two would disagree on whether the frame is within the ceiling. Filled at
# the end of the module.
_INVISIBLE: set = set()


def _dispatch(frame, event, arg):
    st = _thread_state()
    prev = st.prev
    if prev is not None:
        prev(frame, event, arg)
    if not _collecting or st.busy or frame.f_code in _INVISIBLE:
        return
    lanes = None
    try:
        if event == "call":
            code = frame.f_code
            lanes = _lanes_now(st)
            targets = []
            if code.co_flags & _GEN_FLAGS:
                fid = id(frame)
                if _is_first_start(frame):
                    _throw_pending.discard(fid)
                    for L in lanes:
                        call = _lane_start(L, code, frame, False)
                        if call is not None:
                            targets.append((L, call))
                else:
                    if fid in _throw_pending or _resumed_by_throw(frame, arg):
                        _throw_pending.discard(fid)
                        _throw_at[fid] = frame.f_lasti
                    for L in lanes:
                        if not _lane_resume(L, code, frame):
                            _lane_start(L, code, frame, True)
            else:
                for L in lanes:
                    call = _lane_start(L, code, frame, False)
                    if call is not None:
                        targets.append((L, call))
            if targets:
                _capture_arguments(frame, code, targets)
        elif event == "return":
            code = frame.f_code
            lanes = _lanes_now(st)
            if code.co_flags & _GEN_FLAGS:
                thrown_at = _throw_at.pop(id(frame), None) if _throw_at else None
                if _at_yield(frame) and not (arg is None and thrown_at == frame.f_lasti):
                    for L in lanes:
                        _lane_yield(L, code, frame)
                    return
            exception = arg is None and not _at_return(frame)
            targets = []
            for L in lanes:
                call = _lane_return(L, code, exception, frame)
                if call is not None:
                    targets.append((L, call))
            if targets:
                _capture_return(arg, targets)
        elif event == "c_call":
            _note_throw(arg)
            lanes = _lanes_now(st)
            _on_c_call(lanes, arg, frame.f_code if frame is not None else None)
            if _binder_users:
                _note_thread_start(lanes, arg, frame)
        elif event == "c_return" or event == "c_exception":
            lanes = _lanes_now(st)
            _on_c_return(lanes, arg, event == "c_exception")
    except Exception as exc:  # never raise into user code
        why = f"internal error in the reference hook: {type(exc).__name__}: {exc}"
        engines = {L.engine for L in lanes} if lanes else set(_collecting)
        for e in engines:
            e._fail(why)


def _install_hook() -> None:
    """Installs _dispatch in this thread (first reference session here)."""
    st = _thread_state()
    if st.installed and sys.getprofile() is _dispatch:
        st.users += 1
        return
    current = sys.getprofile()
    st.prev = None
    st.saved = None
    if current is not None and current is not _dispatch:
        # A callable is chained and put back; a C profiler's object (cProfile
        # on 3.9-3.11) cannot be called from Python: it is re-enabled at the end.
        st.prev = current if callable(current) else None
        st.saved = current
    sys.setprofile(_dispatch)
    st.installed = True
    st.users += 1


def _uninstall_hook() -> None:
    st = _thread_state()
    if st.users > 0:
        st.users -= 1
    if st.users > 0 or not st.installed:
        return
    saved = st.saved
    st.saved = None
    if sys.getprofile() is _dispatch:
        if saved is None or callable(saved):
            sys.setprofile(saved)
        else:
            sys.setprofile(None)
            enable = getattr(saved, "enable", None)
            if enable is not None:
                enable()  # cProfile on 3.9-3.11 (keeps its subcalls/builtins options)
    st.prev = None
    st.installed = False


# all_threads: threading.setprofile(_binder); the first profile event of a
# thread started by `threading` binds it to the newest all_threads session.
_binder_users = 0
_saved_threading_hook = None


def _newest_all_threads_engine() -> Optional[ReferenceEngine]:
    for e in reversed(_collecting):
        if e.all_threads:
            return e
    return None


def _binder(frame, event, arg):
    try:
        e = _newest_all_threads_engine()
        st = _thread_state()
        if e is not None and (st.bound is e or e._start_thread is st):
            return  # put here by the program (capture/thread_binder.cpp binder)
        sys.setprofile(None)
        if e is not None:
            _install_hook()
            st.bound = e
            st.gen = 0  # force a refresh
    except Exception:  # never raise into the new thread
        pass


def _install_binder() -> None:
    global _binder_users, _saved_threading_hook
    _binder_users += 1
    if _binder_users > 1:
        return
    _saved_threading_hook = getattr(threading, "_profile_hook", None)
    threading.setprofile(_binder)


def _uninstall_binder() -> None:
    global _binder_users, _saved_threading_hook
    if _binder_users == 0:
        return
    _binder_users -= 1
    if _binder_users > 0:
        return
    threading.setprofile(_saved_threading_hook)
    _saved_threading_hook = None
