// The error hierarchy of mltool. The library throws these and never exits; the
// command-line front end catches once and maps the kind to an exit code.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace mltool {

/// What went wrong, which decides the exit code (docs/cli.md#exit-codes).
enum class ErrorKind {
  usage,     ///< the caller asked for something malformed (exit 1)
  input,     ///< an input file or value is missing, unreadable or invalid (exit 2)
  format,    ///< an input file is readable but does not follow its format (exit 2)
  resource,  ///< the machine ran out of something, or a system call failed (exit 3)
  stopped,   ///< SIGTERM: the piece in hand was committed, the rest is left (exit 75)
};

/// Base of every exception mltool throws on purpose. `what()` is a complete,
/// user-facing sentence that names the file and the key or byte offset.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

class UsageError : public Error {
 public:
  explicit UsageError(const std::string& m) : Error(ErrorKind::usage, m) {}
};

class InputError : public Error {
 public:
  explicit InputError(const std::string& m) : Error(ErrorKind::input, m) {}
};

class FormatError : public Error {
 public:
  explicit FormatError(const std::string& m) : Error(ErrorKind::format, m) {}
};

class ResourceError : public Error {
 public:
  explicit ResourceError(const std::string& m) : Error(ErrorKind::resource, m) {}
};

/// A run that stopped early on request (SIGTERM, util/stop.hpp) after committing what it had:
/// running the same command again resumes it.
class StoppedError : public Error {
 public:
  explicit StoppedError(const std::string& m) : Error(ErrorKind::stopped, m) {}
};

/// "path: message" — the prefix every file-related error uses.
std::string at_file(const std::string& path, const std::string& message);

/// "path: byte 1234: message".
std::string at_offset(const std::string& path, std::uint64_t offset, const std::string& message);

/// Message for a failed system call: "path: what: strerror(errno)".
std::string sys_message(const std::string& path, const std::string& what, int err);

/// Exit codes (docs/cli.md#exit-codes). `partial` is a result, not an error.
namespace exit_code {
inline constexpr int ok = 0;
inline constexpr int usage = 1;
inline constexpr int input = 2;
inline constexpr int runtime = 3;
inline constexpr int partial = 4;
inline constexpr int stopped = 75;  ///< EX_TEMPFAIL: "try again" (a requeued task resumes)
}  // namespace exit_code

/// The exit code for an error kind.
int exit_code_for(ErrorKind kind) noexcept;

}  // namespace mltool
