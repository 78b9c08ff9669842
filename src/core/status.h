// Status and Result<T>: failures the environment causes (disk, network, bad
// input, preemption) travel as values. Assertions are for programmer bugs only.
//
// Codes say what a caller should do:
//   kUnavailable        retry the same call (a peer or file may come back)
//   kAborted            retry at a higher level (re-form, restart the step)
//   kInvalidArgument    bad input from a user: do not retry, fix the input
//   kNotFound           a named thing does not exist
//   kFailedPrecondition the system is not in a state to do this
//   kDataLoss           stored bytes are corrupt or truncated
//   kDeadlineExceeded   a deadline passed before the work finished
//   kInternal           a bug or an unexpected library failure
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace spot {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kFailedPrecondition,
  kUnavailable,
  kAborted,
  kDataLoss,
  kDeadlineExceeded,
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "CODE: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "context: message" (unchanged when OK).
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgumentError(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status FailedPreconditionError(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status UnavailableError(std::string m) {
  return Status(StatusCode::kUnavailable, std::move(m));
}
inline Status AbortedError(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
inline Status DataLossError(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
inline Status DeadlineExceededError(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m));
}
inline Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

// Result<T> holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from OK");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  // REQUIRES: ok()
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace spot

#define SPOT_STATUS_CONCAT_INNER(a, b) a##b
#define SPOT_STATUS_CONCAT(a, b) SPOT_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` yields a non-OK Status.
#define SPOT_RETURN_IF_ERROR(expr)              \
  do {                                          \
    ::spot::Status spot_status_ = (expr);       \
    if (!spot_status_.ok()) return spot_status_; \
  } while (0)

// `lhs = value of expr`, or returns its Status when not OK.
#define SPOT_ASSIGN_OR_RETURN(lhs, expr) \
  SPOT_ASSIGN_OR_RETURN_IMPL(SPOT_STATUS_CONCAT(spot_result_, __LINE__), lhs, expr)
#define SPOT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
