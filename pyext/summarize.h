#pragma once
// summarize(obj) -> IOSummary in C++ (docs/design/capture.md, "I/O summaries"; issue 3). Called
// by the capture hooks for arguments and return values within the I/O depth,
// and by mlflow_profiler.summarize().
//
// Types are recognised by module and qualified name along the MRO (no
// library is imported), once per type: the classification is cached with a
// strong reference to the type, in a bounded cache that a registry change
// clears. Registered summarizers (Python callables) come first, the most
// specific class of the MRO winning; a failing one is logged once per (type,
// kind of failure) and the built-in summary is used instead.

#include "compat.h"

#include <cstddef>
#include <string>

#include "model/summary.h"

namespace mlprof {

// Fills `out` from `obj`. GIL held. Never raises and never leaves an
// exception set: a pending exception is saved and restored around it. Keeps
// no reference to `obj` or to anything reachable from it.
void summarize_object(PyObject* obj, IOSummary* out);

namespace summarize {

// Bounds on what a summary holds (characters).
constexpr size_t kReprMax = 80;
constexpr size_t kDtypeMax = 120;
// A __repr__ slower than this on two calls in a row is not called again for
// its type; the first call of a type may import or fill caches, so it is
// allowed more.
constexpr int64_t kSlowReprNs = 100'000;
constexpr int64_t kSlowFirstReprNs = 20'000'000;
// Types whose classification is cached at most (the cache is emptied when full).
constexpr size_t kTypeCacheMax = 512;

// Hooks from mlflow_profiler._summaries: the IOSummary class (what a registered
// summarizer must return) and log(kind, message) (its _log.log_once). Both
// strong references; either may be null.
void set_support(PyObject* summary_class, PyObject* log);
PyObject* summary_class();  // borrowed; null before set_support

// Registers fn (a callable) for instances of `type` and its subclasses,
// replacing a previous one; fn == nullptr removes it. Clears the type cache.
void set_summarizer(PyObject* type, PyObject* fn);
size_t summarizer_count();

// Reads a Python IOSummary (what a registered summarizer returns) into out,
// checking each field's type; false with the reason in `why` otherwise.
bool from_python(PyObject* summary, IOSummary* out, std::string* why);

// Number of types classified in the cache now (tests: it stays bounded).
size_t cache_size();

// Whether objects of types this file does not know (and subclasses of
// builtins with a __repr__ of their own) get their repr(): arbitrary code in
// the hot path (an estimator's repr takes milliseconds), so off unless asked
// for (mlflow_profiler.configure(repr_objects=True)).
void set_repr_objects(bool on);

}  // namespace summarize
}  // namespace mlprof
