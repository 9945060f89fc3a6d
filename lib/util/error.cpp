#include "mltool/util/error.hpp"

#include <cstring>

namespace mltool {

std::string at_file(const std::string& path, const std::string& message) {
  return path + ": " + message;
}

std::string at_offset(const std::string& path, std::uint64_t offset, const std::string& message) {
  return path + ": byte " + std::to_string(offset) + ": " + message;
}

std::string sys_message(const std::string& path, const std::string& what, int err) {
  return path + ": " + what + ": " + std::strerror(err);
}

int exit_code_for(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::usage: return exit_code::usage;
    case ErrorKind::input:
    case ErrorKind::format: return exit_code::input;
    case ErrorKind::resource: return exit_code::runtime;
    case ErrorKind::stopped: return exit_code::stopped;
  }
  return exit_code::runtime;
}

}  // namespace mltool
