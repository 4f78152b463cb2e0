#pragma once
// Recoverable errors as values (docs/design/style.md, "C++"): a Result holds a T or an Error
// that names the cause and, where there is one, the fix.

#include <string>
#include <utility>
#include <variant>

namespace mlprof {

struct Error {
  enum class Kind {
    kIo,           // open/read/write/rename failed; errnum is set
    kTruncated,    // the data ends early (a cut-off file)
    kCorrupt,      // not the format it claims to be
    kVersion,      // a document version this build cannot read
    kUnsupported,  // a request this build does not serve (unknown extension ...)
  };
  Kind kind = Kind::kCorrupt;
  int errnum = 0;       // errno for kIo
  std::string message;  // complete sentence for the user
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

struct Ok {};  // Result<Ok>: success carries nothing

}  // namespace mlprof
