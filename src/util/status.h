// Status and Result: how errors travel inside Weft. A Status pairs a weftResult_t with a
// readable sentence; the API layer turns it into a return code plus last-error text.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "weft/weft.h"

namespace weft {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(weftResult_t code, std::string message)
      : code_(code), message_(std::make_shared<const std::string>(std::move(message))) {}

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == weftSuccess; }
  weftResult_t code() const { return code_; }
  const std::string& message() const { return message_ ? *message_ : noMessage(); }

  // Prefixes the message with where it happened ("all-reduce: ...").
  Status withContext(const std::string& context) const {
    return isOk() ? *this : Status(code_, context + ": " + message());
  }

 private:
  static const std::string& noMessage();

  weftResult_t code_ = weftSuccess;
  // Shared and immutable: a success, which every call passes up through several layers, is
  // then a code and a null pointer, with nothing to construct, copy or destroy.
  std::shared_ptr<const std::string> message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design

  bool isOk() const { return status_.isOk(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T&& take() { return std::move(*value_); }

 private:
  std::optional<T> value_;
  Status status_;
};

std::string formatString(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// "strerror(errno)" as a std::string, thread-safe.
std::string errnoString(int err);

}  // namespace weft

#define WEFT_CONCAT_INNER(a, b) a##b
#define WEFT_CONCAT(a, b) WEFT_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when it is an error.
#define WEFT_TRY(expr)                                        \
  do {                                                        \
    ::weft::Status weft_try_status_ = (expr);                 \
    if (!weft_try_status_.isOk()) return weft_try_status_;    \
  } while (0)

// Binds the value of a Result<T> expression, or returns its Status.
#define WEFT_ASSIGN_OR_RETURN(lhs, expr)                                  \
  auto WEFT_CONCAT(weft_result_, __LINE__) = (expr);                      \
  if (!WEFT_CONCAT(weft_result_, __LINE__).isOk())                        \
    return WEFT_CONCAT(weft_result_, __LINE__).status();                  \
  lhs = WEFT_CONCAT(weft_result_, __LINE__).take()
