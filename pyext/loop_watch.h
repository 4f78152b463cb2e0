#pragma once
// Waits in the standard library's selectors (an asyncio event loop's idle
// time, subprocess.communicate ...), recorded at any depth (loop_watch.cpp;
// docs/capture.md, "Waiting").
#include "compat.h"

namespace mlprof::loop_watch {

// Wraps the select method of each class of the selectors module, if the
// program imported it; the wrappers stay (forwarding only) after sessions
// end. Never raises. Returns true when they are watched.
bool watch_selectors();
// Gives the classes their own select back, unless a session (of either
// engine) collects: `_core.unwatch_loops()`, for a program that wants them.
void unwatch();
// Adds the wrapper's type to the module (_core.SelectWait) and the function
// `watch_selectors`. Returns false with a Python error set on failure.
bool add_loop_watch(PyObject* module);
// Whether `callable` is a wrapper, or a method bound to one (never recorded
// as a C call).
bool is_wrapper(PyObject* callable);

}  // namespace mlprof::loop_watch
