// Status: errors as values inside the engine. A Status carries a code that maps
// one-to-one onto dst_status_t and a message that names what failed, where, and
// what to do. Nothing inside the library throws across a room boundary or calls
// exit/abort.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace dst {

enum class Code {
  kOk = 0,
  kInvalidArgument = 1,
  kConfig = 2,
  kNotSupported = 3,
  kIo = 4,
  kCheckpoint = 5,
  kState = 6,
  kOutOfMemory = 7,
  kComm = 8,
  kNumeric = 9,
  kInternal = 10,
  kAborted = 11,  // the engine was aborted (AbortSignal) while this call ran
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string &message() const { return message_; }

  // Prefixes the message with where it happened: "loading checkpoint: ...".
  Status &context(const std::string &where) {
    if (!ok()) message_ = where + ": " + message_;
    return *this;
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {Code::kInvalidArgument, std::move(m)};
}
inline Status ConfigError(std::string m) {
  return {Code::kConfig, std::move(m)};
}
inline Status NotSupported(std::string m) {
  return {Code::kNotSupported, std::move(m)};
}
inline Status IoError(std::string m) {
  return {Code::kIo, std::move(m)};
}
inline Status CheckpointError(std::string m) {
  return {Code::kCheckpoint, std::move(m)};
}
inline Status StateError(std::string m) {
  return {Code::kState, std::move(m)};
}
inline Status InternalError(std::string m) {
  return {Code::kInternal, std::move(m)};
}

// Result<T>: a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status &status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T &value() & { return std::get<T>(v_); }
  const T &value() const & { return std::get<T>(v_); }
  T &&value() && { return std::get<T>(std::move(v_)); }
  T *operator->() { return &value(); }
  const T *operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace dst

// Returns early from the enclosing function when `expr` yields a non-ok Status.
#define DST_RETURN_IF_ERROR(expr)                      \
  do {                                                 \
    ::dst::Status dst_status_tmp_ = (expr);            \
    if (!dst_status_tmp_.ok()) return dst_status_tmp_; \
  } while (0)
