"""The pure-Python reference capture engine: the executable spec of
docs/capture.md, used by the tests.

It implements the same semantics as the native engine (pyext/engine.cpp),
function by function where the two can be compared (``_lane_start``,
``_lane_return``, ``_lane_yield``, ``_lane_resume``, ``_new_lane``,
``_close_entries`` ...), and writes the same events
(userspace/core/model/event.h) into the same lanes. It never builds a tree or
renders: ``profile()`` hands the lanes to ``_core.build_profile`` and the C++
core does the rest, so the two engines can be compared on tree shape.

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
import dis
import os
import platform
import socket
import sys
import sysconfig
import threading
import time
import types
import weakref
from typing import Any, Dict, List, Optional, Tuple

from . import _core, _labels, _traces, _transparent

# --- constants mirrored from userspace/core/model/event.h ----------------------------

K_CALL = 1
K_RETURN = 2
K_SUSPEND = 3
K_RESUME = 4
K_LABEL = 5
K_FOLD = 6  # coalesced resumes: id = the kCall's index (model/resume.h)
K_FOLD_COUNT = 7  # follows K_FOLD: id = the resumes, ts = the last one
K_MARK = 8  # an instant: id = its name (a label id), after an EV_RESOURCE label naming its resource
_MAX_FOLD = 0xFFFFFFFF
_CO_AWAITS = 0x80 | 0x100 | 0x200  # CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR: never folded

EV_EXCEPTION = 1
EV_CFUNCTION = 2
EV_BLOCK = 4
EV_CONTINUED = 8
EV_CHILDREN_DROPPED = 16
EV_RELABEL = 32  # K_LABEL: for the innermost open span (a fold)
EV_WAIT = 64  # K_CALL: a selector's select waiting (loop_watch.cpp)
EV_RESOURCE = 128  # K_LABEL: names the resource the next call uses (model/resources.h)

FN_PYTHON = 0
FN_C = 1
FN_BLOCK = 2

# Entry kinds of a lane's stack of recorded open spans (engine.h EntryKind).
E_FRAME = 0
E_BLOCK = 1
E_CCALL = 2

_INT32_MAX = 2**31 - 1
_GEN_FLAGS = 0x20 | 0x80 | 0x200 | 0x100  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE

_PY = sys.version_info[:2]


def _op(name: str) -> int:
    return dis.opmap.get(name, -1)


_YIELD_VALUE = _op("YIELD_VALUE")
_YIELD_FROM = _op("YIELD_FROM")
_RESUME = _op("RESUME")
_RETURNS = frozenset(x for x in (_op("RETURN_VALUE"), _op("RETURN_CONST")) if x >= 0)
# 3.9/3.10: the caller of a generator resume is only dropping a reference to
# it (the generator is being finalized, which throws GeneratorExit into it).
_FINALIZING_CALLER_OPS = frozenset(
    x
    for x in (
        _op(n)
        for n in (
            "POP_TOP", "STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF", "STORE_ATTR",
            "STORE_SUBSCR", "DELETE_FAST", "DELETE_NAME", "DELETE_GLOBAL", "DELETE_DEREF",
            "DELETE_ATTR", "DELETE_SUBSCR", "POP_BLOCK", "POP_EXCEPT", "JUMP_ABSOLUTE",
            "JUMP_FORWARD", "RETURN_VALUE", "ROT_TWO", "ROT_THREE", "ROT_FOUR",
        )
    )
    if x >= 0
)

_code_bytes: Dict[Any, bytes] = {}


def _bytecode(code) -> bytes:
    b = _code_bytes.get(code)
    if b is None:
        b = code.co_code  # 3.11+: the de-specialized, de-instrumented bytes
        if len(_code_bytes) > 50_000:
            _code_bytes.clear()
        _code_bytes[code] = b
    return b


def _op_at(code, offset: int) -> int:
    b = _bytecode(code)
    return b[offset] if 0 <= offset < len(b) else -1


def _is_first_start(frame) -> bool:
    """A 'call' event of generator code: the frame has not run yet."""
    lasti = frame.f_lasti
    if _PY < (3, 11):
        return lasti < 0
    b = _bytecode(frame.f_code)
    return 0 <= lasti < len(b) - 1 and b[lasti] == _RESUME and (b[lasti + 1] & 3) == 0


def _at_yield(frame) -> bool:
    """A 'return' event of generator code: the frame rests on a yield/await."""
    code = frame.f_code
    lasti = frame.f_lasti
    op = _op_at(code, lasti)
    if op == _YIELD_VALUE:
        return True
    if _PY < (3, 11):
        return _YIELD_FROM >= 0 and _op_at(code, lasti + 2) == _YIELD_FROM
    if _PY >= (3, 13) and op == _RESUME:
        b = _bytecode(code)
        return (b[lasti + 1] & 3) != 0 and _op_at(code, lasti - 2) == _YIELD_VALUE
    return False


def _at_return(frame) -> bool:
    return _op_at(frame.f_code, frame.f_lasti) in _RETURNS


def _resumed_by_throw(frame, arg) -> bool:
    """Version-specific signs that a generator resume is a throw()/close()."""
    if _PY >= (3, 12) and isinstance(arg, BaseException):
        return True
    if (3, 11) <= _PY < (3, 13):
        return _op_at(frame.f_code, frame.f_lasti) == _YIELD_VALUE
    if _PY < (3, 11):
        caller = frame.f_back
        if caller is not None:
            return _op_at(caller.f_code, caller.f_lasti) in _FINALIZING_CALLER_OPS
    return False


def _gen_frame(obj):
    for attr in ("gi_frame", "cr_frame", "ag_frame"):
        f = getattr(obj, attr, None)
        if f is not None:
            return f
    return None


def _is_generator_object(obj) -> bool:
    return isinstance(obj, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType))


# --- user code classification (core classify_user_code) --------------------------

def _library_prefixes() -> List[str]:
    paths = sysconfig.get_paths()
    return sorted({p for p in (paths.get("stdlib"), paths.get("platstdlib")) if p})


_LIBRARY_PREFIXES = _library_prefixes()


def _under_prefix(file: str, prefix: str) -> bool:
    if not prefix or not file.startswith(prefix):
        return False
    if len(file) == len(prefix):
        return True
    return prefix[-1] in "/\\" or file[len(prefix)] in "/\\"


def classify_user_code(file: str, module: str = "") -> bool:
    """Same rule as userspace/core/model/functions.cpp classify_user_code: code
    cloudpickle pickled by value is the user's unless its module is a
    loaded library's."""
    if file == "<dynamic-code>":
        # The namespace, not getattr: a module __getattr__ may import or warn.
        namespace = getattr(sys.modules.get(module), "__dict__", None) if module else None
        module_file = namespace.get("__file__") if isinstance(namespace, dict) else None
        return not isinstance(module_file, str) or classify_user_code(module_file)
    if not file or file[0] == "<":
        return False
    for part in ("/site-packages/", "/dist-packages/", "\\site-packages\\", "\\dist-packages\\"):
        if part in file:
            return False
    return not any(_under_prefix(file, p) for p in _LIBRARY_PREFIXES)


# --- C function names (engine.cpp cfunction_id) ---------------------------------

_HEAPTYPE = 1 << 9


def _type_short(t: type) -> str:
    return t.__name__


def _type_module(t: type) -> str:
    # tp_name of a static type is "module.Name" (or a bare builtin name); a
    # Python class's tp_name has no dot, which the native engine reads as builtins.
    if t.__flags__ & _HEAPTYPE:
        return "builtins"
    mod = getattr(t, "__module__", None)
    return mod if isinstance(mod, str) and mod else "builtins"


def _function_with_code(value, code):
    """The function with `code` that a class namespace entry is or holds: a
    function, a staticmethod's or classmethod's, a property's accessor, or
    what one of these wraps (`__wrapped__` in its instance dict)."""
    for _ in range(4):
        if isinstance(value, types.FunctionType) and value.__code__ is code:
            return value
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
            continue
        if isinstance(value, property):
            return next((f for f in (value.fget, value.fset, value.fdel) if getattr(f, "__code__", None) is code),
                        None)
        try:
            namespace = object.__getattribute__(value, "__dict__")
        except Exception:
            return None
        value = namespace.get("__wrapped__") if isinstance(namespace, dict) else None
        if value is None:
            return None
    return None


def _name_before_311(code, frame) -> str:
    """3.9/3.10 have no co_qualname: a method's name is the __qualname__ of
    the function with this code in the namespace of a class in its first
    argument's MRO (`self`, or `cls` holding a class), which is what the
    compiler makes co_qualname from on 3.11+; anything else keeps co_name
    (docs/capture.md, "Versions")."""
    name = code.co_name
    if code.co_argcount < 1 or code.co_varnames[0] not in ("self", "cls"):
        return name
    if frame is None or frame.f_code is not code:
        return name
    first_name = code.co_varnames[0]
    if first_name not in frame.f_locals:
        return name
    first = frame.f_locals[first_name]
    candidates = [type(first)]
    if first_name == "cls" and isinstance(first, type):
        candidates = [first, type(first)]
    for candidate in candidates:
        for cls in type.__getattribute__(candidate, "__mro__"):
            for value in type.__getattribute__(cls, "__dict__").values():
                fn = _function_with_code(value, code)
                if fn is not None:
                    return fn.__qualname__ or name
    return name


def _cfunction_info(callable_) -> Tuple[str, str]:
    if isinstance(callable_, types.BuiltinFunctionType):  # PyCFunction (function or bound method)
        self_ = getattr(callable_, "__self__", None)
        name = callable_.__name__
        if self_ is not None and not isinstance(self_, types.ModuleType):
            t = type(self_)
            return _type_short(t) + "." + name, _type_module(t)
        mod = callable_.__module__
        return name, mod if isinstance(mod, str) else "builtins"
    if isinstance(callable_, types.MethodDescriptorType):
        t = callable_.__objclass__
        return _type_short(t) + "." + callable_.__name__, _type_module(t)
    if isinstance(callable_, type):
        return _type_short(callable_), _type_module(callable_)
    name = getattr(callable_, "__name__", None)
    t = type(callable_)
    return (name if isinstance(name, str) and name else _type_short(t)), _type_module(t)


def _ckey(callable_):
    """Identity of a C call, equal for its c_call and c_return events (3.12+
    binds a method descriptor anew for each event)."""
    self_ = getattr(callable_, "__self__", None)
    if isinstance(callable_, types.BuiltinFunctionType):
        return (id(self_), callable_.__name__)
    return id(callable_)


# --- process-wide state -----------------------------------------------------------

_ctx_marker: contextvars.ContextVar = contextvars.ContextVar("mlflow_profiler._reference.context")


class _Mark:
    """Identity of one contextvars.Context (see the module docstring).
    `parent`: a weak reference to the mark of the context it was copied
    from (an asyncio task's creator), None for a context first seen bare."""

    __slots__ = ("token", "parent", "__weakref__")


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


_collecting: List["ReferenceEngine"] = []  # collecting engines, oldest first
_generation = 1
_tls = threading.local()
_throw_pending: set = set()  # id(frame) of generators that a throw()/close() call is about to resume
_throw_at: Dict[int, int] = {}  # id(frame) -> f_lasti a throw resumed it at


def _thread_state():
    st = getattr(_tls, "st", None)
    if st is None:
        st = _ThreadState()
        _tls.st = st
    return st


class _ThreadState:
    __slots__ = ("users", "prev", "saved", "installed", "gen", "mark", "sess", "lanes", "bound", "busy")

    def __init__(self) -> None:
        self.users = 0
        self.prev = None  # chained: the profile function installed before ours
        self.saved = None  # what sys.getprofile() returned before ours, put back at the end
        self.installed = False
        self.gen = 0
        self.mark = None
        self.sess = None
        self.lanes: List["_Lane"] = []
        self.bound: Optional["ReferenceEngine"] = None
        # True while the engine's own code (label_call, block_enter, start,
        # stop) updates lanes outside the hook: the events its C calls raise
        # are the profiler's own and must not re-enter the lane state.
        self.busy = False


def _lanes_now(st: _ThreadState) -> List["_Lane"]:
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


def _current_lanes() -> List["_Lane"]:
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


# --- lanes ------------------------------------------------------------------------


class _Lane:
    __slots__ = (
        "engine", "index", "thread_id", "mark", "ceiling", "depth", "truncated", "skipped",
        "soft_cap", "hard_cap", "rec", "pending_code", "pending_label", "pending_resource", "chain_top",
        "chain_top_depth", "last_was_suspend", "events", "dropped", "out_truncated",
        "native_tid", "thread_name", "task", "parent_lane", "parent_call", "io_ceiling", "io", "overhead", "hidden",
        "readings", "depth_base", "loop_main", "loop_main_checked",
    )

    def __init__(self) -> None:
        self.engine: ReferenceEngine
        self.index = 0
        self.thread_id = 0
        self.mark = None
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
        self.pending_code = None
        self.pending_label: Optional[int] = None
        self.pending_resource: Optional[int] = None
        self.chain_top: Optional[int] = None
        self.chain_top_depth = 0
        self.last_was_suspend = False
        self.events: List[Tuple[int, int, int, int]] = []  # (ts, kind, id, flags)
        self.dropped = 0
        self.out_truncated = False
        self.native_tid = 0
        self.thread_name = ""
        self.task = 0
        self.parent_lane = -1
        self.parent_call = 0
        self.io_ceiling = -1  # deepest level whose I/O is summarized; -1: none
        self.io: List[tuple] = []  # (call index, role, name, IOSummary)
        self.overhead: List[tuple] = []  # (from, to) ns: the profiler's work (engine.h CaptureLane::overhead)
        self.hidden = 0  # open frames of a hidden code or under one (StackEntry::hides)
        self.readings: Optional[list] = None  # (event index, kind, counter) when values are wanted
        self.depth_base = 0  # tree depth of the lane's own level 0 (engine.h CaptureLane::depth_base)
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
        if type(task) is not c_asyncio.Task or getattr(task.get_coro(), "cr_frame", None) is not frame:
            return False
        return any(entry[0] is done for entry in task._callbacks or ())
    except Exception:
        return False


def _loop_main(L: _Lane, code, frame, decide: bool = False) -> bool:
    """Whether `frame`, at the lane's root level, is its loop-run coroutine:
    decided (`decide`) at the task lane's first root start, then by identity;
    only under a recorded span (engine.cpp lane_start)."""
    if decide and not L.loop_main_checked and L.task > 0 and L.parent_lane >= 0 and code.co_flags & _GEN_FLAGS:
        L.loop_main_checked = True
        since = _core.now_ns()
        if _runs_to_completion(frame):
            L.loop_main = (id(frame), code)
        L.overhead.append((since, _core.now_ns()))
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
    since = _core.now_ns()
    names = code.co_varnames[:min(2, code.co_argcount + code.co_kwonlyargcount)]
    local_vars = frame.f_locals
    args = [local_vars.get(n) for n in names] + [None] * (2 - len(names))
    try:
        text = labeller(args[0], args[1])
    except Exception as exc:
        L.engine._note(f"a labeller raised {exc!r} naming a call of {code.co_name}; "
                       "such calls keep the function's name")
        text = None
    L.overhead.append((since, _core.now_ns()))
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
        return
    # Transparency is checked wherever the counter is within the ceiling,
    # above the root too, so that a frame's start and its return agree on it.
    if d < 0:
        if not _lane_transparent(L, code):
            L.depth = d
        return
    if _lane_transparent(L, code) or (d == 0 and _loop_main(L, code, frame, decide=True)):
        _transparent_start(L, code)
        return  # not counted
    eng = L.engine
    fid = eng._code_ids.get(code)
    if fid is None:  # first sight (naming it) is the profiler's work
        since = _core.now_ns()
        fid = eng._function_id(code, frame)
        L.overhead.append((since, _core.now_ns()))
    if eng.fold_codes:
        label = _fold_label(L, code)
        if label is not None:  # not counted; names the span it folds into
            L.events.append((_core.now_ns(), K_LABEL, eng._label_id(label), EV_RELABEL))
            return
    L.depth = d
    if L.truncated:
        return
    if len(L.events) >= L.soft_cap:
        L.dropped += 1
        if L.rec:
            L.rec[-1][4] = True
        return
    key = id(frame) if code.co_flags & _GEN_FLAGS else 0
    label = resource = None
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
    if L.depth + 1 <= L.ceiling and (_lane_transparent(L, code) or (L.depth == -1 and _loop_main(L, code, frame))):
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
            L.overhead.append((since, now))


def _restart_calls(targets, since: int) -> None:
    """The spans start again after their arguments were summarized (engine.cpp
    restart_calls): a slow first repr is the profiler's time, not the call's."""
    ts = _core.now_ns()
    for L, call in targets:
        if L.engine.state == "collecting" and call < len(L.events):
            L.events[call] = (ts,) + L.events[call][1:]
            L.overhead.append((since, ts))
            if L.readings is not None:  # so do its readings (engine.cpp restart_readings)
                now = dict(_take_readings(L.engine.values, call))
                L.readings[:] = [(e, k, now.get(k, v) if e == call else v) for e, k, v in L.readings]


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
        self.read_at = None

    def append(self, ev) -> None:
        list.append(self, ev)
        if ev[1] != K_LABEL:
            if self.values:
                self.readings.extend(_take_readings(self.values, len(self) - 1))
            self.maybe_read_cpu(ev[0])

    def maybe_read_cpu(self, ts: int) -> None:
        """Reads the CPU clock when a quantum has passed since the last reading."""
        if self.read_at is None or ts - self.read_at >= _core.OFF_CPU_QUANTUM_NS:
            self.read_at = ts
            self.cpu_reads.append((ts, time.thread_time_ns()))


def _off_cpu(reads: list, cut: list) -> list:
    """(end_ns, off_ns) between consecutive CPU clock readings (engine.cpp's
    build): off the CPU against the raw wall time, placed at the reading's
    time with the profiler's stretches taken out, as the events are."""
    on_cut = _cut_timeline(cut)
    out = []
    for (t0, c0), (t, c) in zip(reads, reads[1:]):
        off = (t - t0) - (c - c0)
        at = on_cut(t)
        if off >= _core.OFF_CPU_MIN_NS:
            out.append((at, off))
    return out


def _without_overhead(events: list, cut: list) -> list:
    """The lane's events with the profiler's stretches taken out: a time after
    some moves back by their length, one inside a stretch to its start."""
    if not cut:
        return events
    on_cut = _cut_timeline(cut)
    return [(on_cut(ev[0]),) + ev[1:] for ev in events]


def _cut_timeline(cut: list):
    """A function of increasing times: each on the timeline without the
    profiler's stretches `cut` (sorted, disjoint), as engine.cpp's build."""
    k, shift = 0, 0

    def on_cut(ts: int) -> int:
        nonlocal k, shift
        while k < len(cut) and cut[k][1] <= ts:
            shift += cut[k][1] - cut[k][0]
            k += 1
        if k < len(cut) and cut[k][0] < ts:
            ts = cut[k][0]
        return ts - shift

    return on_cut


def _capture_arguments(frame, code, targets) -> None:
    since = _core.now_ns()
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & _CO_VARARGS) + bool(code.co_flags & _CO_VARKEYWORDS)
    names = code.co_varnames[:min(n, _MAX_IO_ARGUMENTS)]
    local_vars = frame.f_locals
    for i, name in enumerate(names):
        if i == 0 and name in ("self", "cls"):
            continue  # the receiver is the model object, not data flowing through
        if name in local_vars:
            _append_io(targets, _core.IO_ARGUMENT, name, _core.summarize(local_vars[name]))
    _restart_calls(targets, since)


def _capture_return(value, targets) -> None:
    since = _core.now_ns()
    _append_io(targets, _core.IO_RETURN, "", _core.summarize(value))
    _note_overhead(targets, since)


def _lane_yield(L: _Lane, code, frame) -> None:
    if L.depth + 1 <= L.ceiling and (_lane_transparent(L, code) or (L.depth == -1 and _loop_main(L, code, frame))):
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
    elif (start < len(L.rec) and code.co_flags & (0x80 | 0x100) and start > 0
          and L.rec[start - 1][2] == E_FRAME and L.rec[start - 1][3]):
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
                fold = not (code.co_flags & _CO_AWAITS)  # engine.cpp may_fold (this engine fires no probes)
                now = _core.now_ns()
                _append_resume(L.events, L.readings, L.engine.values, entries[0][0], now, fold)
                L.events.maybe_read_cpu(now)
                for call_index, depth, kind, ekey, dropped, ecode in entries:
                    L.rec.append([call_index, depth + shift, kind, ekey, dropped, ecode])
                L.depth = d + own  # the frame and its own blocks; the chain's are deeper
                L.last_was_suspend = False
                return True
    return False


def _append_resume(ev: list, readings: Optional[list], values: int, call: int, ts: int, fold: bool) -> None:
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
        if n >= 3 and ev[-3][1] == K_FOLD and ev[-3][2] == call and ev[-2][1] == K_FOLD_COUNT \
                and ev[-2][2] < _MAX_FOLD:
            total = (ev[-2][0] - ev[-3][0]) + paused
            stamp = max(ts, ev[-2][0])
            list.__setitem__(ev, n - 3, (stamp - total, K_FOLD, call, 0))
            list.__setitem__(ev, n - 2, (stamp, K_FOLD_COUNT, ev[-2][2] + 1, 0))
            del ev[-1]
            if readings is not None:  # the last ones are the kSuspend's, then the fold's
                suspend, fold = n - 1, n - 3
                grew = {}
                while readings and readings[-1][0] >= suspend:
                    e, k, v = readings.pop()
                    if e == suspend and k in now:
                        grew[k] = max(0, now[k] - v)
                i = len(readings) - 1
                while i >= 0 and readings[i][0] >= fold:
                    e, k, v = readings[i]
                    if e == fold and k in grew:
                        readings[i] = (e, k, v + grew.pop(k))
                    i -= 1
                readings.extend((fold, k, g) for k, g in sorted(grew.items()))
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


# --- the hook -----------------------------------------------------------------------


_OWN_TYPES = (_core.profile_block, _core.SpanFunction, _core.SelectWait)
_OWN_FUNCTIONS = (_core.session_enter.__func__, _core.session_exit.__func__)  # ProfileSession's


def _is_own_callable(callable_) -> bool:
    """The profiler's own C callables (profile_block's and ProfileSession's
    __exit__, which a `with` statement calls like any method): plumbing,
    never a span."""
    return (isinstance(getattr(callable_, "__self__", None), _OWN_TYPES) or callable_ in _OWN_TYPES
            or any(callable_ is f for f in _OWN_FUNCTIONS))


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
        obj = getattr(obj, "gi_yieldfrom", None) or getattr(obj, "cr_await", None) or getattr(obj, "ag_await", None)


def _entered_by_coroutine() -> bool:
    """Whether the frame that enters the session (past the profiler's own and
    contextlib's) is a coroutine's: its awaits are then the event loop's idle
    time (engine.cpp origin_awaits_)."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_globals.get("__name__", "")
        if not (f.f_code in _INVISIBLE or (isinstance(name, str) and (
                name == "contextlib" or name == "mlflow_profiler" or name.startswith("mlflow_profiler.")))):
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
    if getattr(callable_, "__name__", None) != _THREAD_START or getattr(callable_, "__module__", None) != "_thread":
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


def _newest_all_threads_engine() -> Optional["ReferenceEngine"]:
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

    def __init__(self, depth: int, max_events: int, all_threads: bool, capture_c_calls: bool,
                 capture_io: bool = False, io_depth: int = -1, transparent_codes=(), fold_parents=(),
                 fold_codes=None, values: int = 0) -> None:
        self.depth = depth
        self.values = values  # per-span values: bits 1 << VALUE_CPU, VALUE_ALLOC
        self._counting_alloc = False
        self.transparent_codes = frozenset(transparent_codes)
        self._fold_refs = (list(fold_parents), list(fold_codes or ()))  # keeps the codes: their ids stay theirs
        self.fold_parents = frozenset(map(id, fold_parents))
        self.fold_codes = {id(code): label for code, label in self._fold_refs[1]}  # by identity, as native
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
        self._token = None
        self._parent: Optional[ReferenceEngine] = None
        self._parent_session = None
        self._lanes: List[_Lane] = []
        self._start_thread: Optional[_ThreadState] = None
        self._trace: Optional[Tuple[str, str]] = None  # the trace context at start (_traces.current)
        # Lanes by thread, then by context. A thread is its _ThreadState, not
        # its ident: idents (pthread_t) are reused as soon as a thread is
        # joined, and a new thread must not continue a finished thread's lane.
        self._lane_index: Dict[_ThreadState, Dict[_Mark, _Lane]] = {}
        self._lane_by_mark: Dict[_Mark, _Lane] = {}  # every lane of a context (not a thread's own)
        self._suspended: Dict[int, Tuple[int, int, list, Any]] = {}  # id(frame) -> (lane, depth, entries, code)
        # all_threads: threads started in the session and not bound yet, by
        # id(): (the Thread, the lane that started it, the span it hangs under
        # or None for a root). engine.cpp Engine::note_thread_start.
        self._thread_origins: Dict[int, Tuple[Any, int, Optional[int]]] = {}
        self._gen_labels: Dict[int, Tuple[int, Any, Optional[int]]] = {}  # frame -> (label, code, resource)
        self._functions: List[tuple] = []
        self._function_index: Dict[tuple, int] = {}
        self._code_ids: Dict[Any, int] = {}
        self._cfunc_ids: Dict[tuple, int] = {}
        self._labels: List[str] = []
        self._label_index: Dict[str, int] = {}
        self._profile = None
        self._failed = False
        self._start_unix_ns = 0
        self._loop_watched = False
        self._origin_awaits = False

    # -- interning ---------------------------------------------------------------

    def _add_function(self, name: str, module: str, file: str, line: int, kind: int, user_code: bool) -> int:
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
            fid = self._add_function(name, module, file, code.co_firstlineno, FN_PYTHON,
                                     classify_user_code(file, module))
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

    def _new_lane(self, st: _ThreadState, thread_id: int, mark: _Mark) -> _Lane:
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
                L.parent_lane, L.parent_call, base = creator.parent_lane, creator.parent_call, creator.depth_base
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
        if L is None and mark.parent is not None:
            L = self._lane_by_mark.get(mark.parent())
        return L is not None and L.task > 0  # (a thread's own lane has no mark)

    def _lane_for(self, st: _ThreadState, thread_id: int, mark: _Mark) -> Optional[_Lane]:
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
        global _generation
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
        self._start_thread = _thread_state()
        if self.values & (1 << VALUE_ALLOC):
            why = _core.alloc_count_start()
            self._counting_alloc = why is None
            if why is not None:
                self.values &= ~(1 << VALUE_ALLOC)
                self.notes.append(why)
                _warn_once(why)
        self._origin_awaits = _entered_by_coroutine()
        self._new_lane(self._start_thread, threading.get_ident(), _ctx_mark())  # the origin lane: the entering frame is depth -1
        _collecting.append(self)
        _core._reference_collecting(1)
        _generation += 1
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
        global _generation
        self.end_ns = _core.now_ns()
        self.state = "finalized"
        if self in _collecting:
            _collecting.remove(self)
        _core._reference_collecting(-1)
        _generation += 1
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
        _core.unwatch_loops()

    def profile(self):
        if self._profile is not None:
            return self._profile
        if self.state != "finalized":
            raise RuntimeError(f"the session is {self.state}: the profile is built after it ends")
        lanes = []
        skipped = 0
        # The profiler's stretches leave its thread's timeline, every lane of
        # that thread alike (engine.cpp): merged per thread.
        cuts: Dict[int, list] = {}
        for L in self._lanes:
            cuts.setdefault(L.thread_id, []).extend(L.overhead)
        for thread, stretches in cuts.items():
            merged: list = []
            for a, b in sorted(stretches):
                if merged and a <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], b))
                else:
                    merged.append((a, b))
            cuts[thread] = merged
        overhead = sum(b - a for stretches in cuts.values() for a, b in stretches)
        for L in self._lanes:
            lanes.append({
                "thread_id": L.thread_id, "native_tid": L.native_tid, "thread_name": L.thread_name,
                "task": L.task, "parent_lane": L.parent_lane, "parent_call": L.parent_call,
                "dropped": L.dropped, "truncated": L.out_truncated,
                "events": _without_overhead(L.events, cuts[L.thread_id]), "io": L.io,
                "readings": L.readings or [],
                "off_cpu": _off_cpu(L.events.cpu_reads, cuts[L.thread_id]),
                **({"trace_id": self._trace[0], "span_id": self._trace[1]} if self._trace else {}),
            })
            skipped += L.skipped
        meta = {
            "engine": self.hook,
            "python": platform.python_version(),
            "pid": str(os.getpid()),
            "start_unix_ns": str(self._start_unix_ns),
            "host": socket.gethostname(),
            "profiler_overhead_ns": str(overhead),
            **({"loop_waits": "selector"} if self._loop_watched else
               {"loop_waits": "awaits"} if self._origin_awaits else {}),
        }
        end_ns = self.end_ns or _core.now_ns()
        self._profile = _core.build_profile(lanes, self._functions, self._labels, self.depth,
                                            self.start_ns, end_ns, skipped, meta)
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
                                L.engine._gen_labels[id(f)] = (L.engine._label_id(label), code,
                                                               None if resource is None else L.engine._label_id(resource))
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
            since = _core.now_ns()
            for i, value in enumerate(args[:_MAX_IO_ARGUMENTS]):
                _append_io(targets, _core.IO_ARGUMENT, f"args[{i}]", _core.summarize(value))
            for name, value in list(kwargs.items())[:max(0, _MAX_IO_ARGUMENTS - len(args))]:
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
        return self._add_function(func.__qualname__, func.__module__, code.co_filename, code.co_firstlineno,
                                  FN_PYTHON, False)

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
        entries = []
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


_transparent.add_module(sys.modules[__name__])


_registered = False


def _register_invisible() -> None:
    # Every frame of this module: the native engine does this work in C, with
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

    module = sys.modules[__name__]
    for value in list(vars(module).values()):
        if getattr(value, "__module__", None) == __name__:
            _transparent.collect_codes(value, _INVISIBLE)
    for fn in (ProfileSession._label_call, ProfileSession._block_enter, ProfileSession._wait_call,
               ProfileSession._mark):
        _transparent.collect_codes(fn, _INVISIBLE)


# _register_invisible() runs from the package's __init__, once _session exists.
