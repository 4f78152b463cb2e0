#pragma once
// CPython references and errors, shared by the summaries (summarize*.cpp)
// and the capture mechanisms (capture/).

#include "compat.h"

#include <cstddef>
#include <string>
#include <utility>

namespace mlprof::pyutil {

// An owned reference.
class Ref {
 public:
  Ref() = default;
  explicit Ref(PyObject* p) : p_(p) {}  // steals p
  ~Ref() { Py_XDECREF(p_); }
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Ref& operator=(Ref&& o) noexcept {
    if (this != &o) {
      Py_XDECREF(p_);
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  PyObject* get() const { return p_; }
  PyObject* release() { return std::exchange(p_, nullptr); }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  PyObject* p_ = nullptr;
};

inline Ref borrow(PyObject* p) {
  Py_XINCREF(p);
  return Ref(p);
}

// Clears a pending error. One that is the program's (not an Exception:
// SystemExit, KeyboardInterrupt, raised by a signal handler on the main
// thread while a summary's Python code ran) is not lost: it is raised again
// at the next chance, in the user's code rather than inside the summary.
void clear_error();

// str(o) as UTF-8; "" if o is null or str() raises (cleared).
std::string str_of(PyObject* o);

// s cut to at most max bytes, "..." included, on a UTF-8 boundary.
std::string bounded_text(std::string s, size_t max);

// Describes and clears the pending exception: "ValueError: boom".
// Summaries: the program's own exception is raised again (clear_error), as they run inside the
// user's calls.
std::string take_error();

// str() of the pending exception, or "unknown error"; clears it.
// capture/: drops any exception, a KeyboardInterrupt too, as the caller reports its own failure.
std::string take_error_message();

}  // namespace mlprof::pyutil
