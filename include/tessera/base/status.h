// Status and StatusOr: how every Tessera call reports failure.
//
// Errors are values. A Status is either OK (a null pointer, free to check) or
// carries a canonical code and a message that says what was expected and what
// was found. The library never aborts and never throws for bad input; callers
// propagate with TS_RETURN_IF_ERROR / TS_ASSIGN_OR_RETURN.
//
// Choosing a code:
//   kInvalidArgument    the caller passed something malformed regardless of
//                       state (a bad shape, a dtype the op does not take).
//   kFailedPrecondition the call is well formed but the object is in the wrong
//                       state (reading during trace capture, a deallocated
//                       tensor, a program that was not compiled before capture).
//   kOutOfRange         an index or id past the end (cq_id 2, unknown trace id).
//   kResourceExhausted  a memory region is full (L1, DRAM, TRACE, L1_SMALL).
//   kUnimplemented      a valid request Tessera does not support yet.
//   kAborted            work skipped because an earlier error poisoned a queue.
//   kInternal           a broken invariant inside Tessera: a bug, report it.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace tessera {

enum class StatusCode : int {
  kOk = 0,
  kCancelled,
  kUnknown,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kResourceExhausted,
  kFailedPrecondition,
  kAborted,
  kOutOfRange,
  kUnimplemented,
  kInternal,
  kUnavailable,
  kDataLoss,
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // The message without the code; empty for OK.
  const std::string& message() const;
  // "INVALID_ARGUMENT: message", or "OK".
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context: `; OK stays OK.
  Status annotate(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;  // immutable; copies share it
};

inline Status ok_status() { return Status(); }

#define TS_DEFINE_ERROR_FACTORY(name, code)                                       \
  template <class... Args>                                                        \
  Status name(fmt::format_string<Args...> f, Args&&... args) {                    \
    return Status(StatusCode::code, fmt::format(f, std::forward<Args>(args)...)); \
  }
TS_DEFINE_ERROR_FACTORY(invalid_argument_error, kInvalidArgument)
TS_DEFINE_ERROR_FACTORY(failed_precondition_error, kFailedPrecondition)
TS_DEFINE_ERROR_FACTORY(out_of_range_error, kOutOfRange)
TS_DEFINE_ERROR_FACTORY(resource_exhausted_error, kResourceExhausted)
TS_DEFINE_ERROR_FACTORY(unimplemented_error, kUnimplemented)
TS_DEFINE_ERROR_FACTORY(aborted_error, kAborted)
TS_DEFINE_ERROR_FACTORY(internal_error, kInternal)
TS_DEFINE_ERROR_FACTORY(not_found_error, kNotFound)
#undef TS_DEFINE_ERROR_FACTORY

// Thrown only by StatusOr::value() on an error: reading the value of a failed
// result is a bug in the caller, not bad input.
class BadStatusOrAccess : public std::exception {
 public:
  explicit BadStatusOrAccess(Status s) : status_(std::move(s)), what_(status_.to_string()) {}
  const char* what() const noexcept override { return what_.c_str(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
  std::string what_;
};

template <class T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status s) : status_(std::move(s)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status(StatusCode::kInternal, "StatusOr built from an OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & { check(); return *value_; }
  const T& value() const& { check(); return *value_; }
  T&& value() && { check(); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void check() const {
    if (!status_.ok()) throw BadStatusOrAccess(status_);
  }
  Status status_;
  std::optional<T> value_;
};

#define TS_CONCAT_INNER(a, b) a##b
#define TS_CONCAT(a, b) TS_CONCAT_INNER(a, b)

#define TS_RETURN_IF_ERROR(expr)                        \
  do {                                                  \
    ::tessera::Status ts_status_ = (expr);              \
    if (!ts_status_.ok()) return ts_status_;            \
  } while (0)

#define TS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#define TS_ASSIGN_OR_RETURN(lhs, expr) \
  TS_ASSIGN_OR_RETURN_IMPL(TS_CONCAT(ts_statusor_, __LINE__), lhs, expr)

}  // namespace tessera
