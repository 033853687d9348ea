// Errors as values (leveldb style): every expected failure (bad input, I/O, network) returns a Status
// or a Result<T> whose message says what was wrong and what to do. Asserts are for our own bugs only.
// Both are [[nodiscard]] (and the build makes ignoring one an error, -Werror=unused-result): a caller that
// really means to ignore a failure says so with a (void) cast and a comment saying why.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace tern {

class [[nodiscard]] Status {
 public:
  enum class Code { kOk, kInvalidArgument, kNotFound, kIoError, kCorruption, kUnavailable, kInternal };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status IoError(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Prefixes the message with context, e.g. s.WithContext("loading config.yaml").
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  // `status` must be an error: a Result made from an OK Status has neither a value nor a reason (asserted).
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  // value() (and ->, *) on an error is a bug in the caller, who must check ok() first (asserted).
  T& value() & {
    assert(ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tern

#define TERN_CONCAT_INNER(a, b) a##b
#define TERN_CONCAT(a, b) TERN_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` fails.
#define TERN_RETURN_IF_ERROR(expr) \
  do {                             \
    ::tern::Status _st = (expr);   \
    if (!_st.ok()) return _st;     \
  } while (0)

// TERN_ASSIGN_OR_RETURN(auto x, MakeX()); declares x from a Result or returns its Status.
#define TERN_ASSIGN_OR_RETURN(lhs, rexpr) TERN_ASSIGN_OR_RETURN_IMPL(TERN_CONCAT(_res_, __LINE__), lhs, rexpr)
#define TERN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                               \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
