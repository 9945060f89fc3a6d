#include "mltool/util/output_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <string>

#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::util {
namespace {

std::string strip_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string host_name() {
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "unknown host";
  return host;
}

// What the holder wrote: "pid PID on HOST (COMMAND)", or a fallback while it has not yet.
std::string holder_of(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string s = n > 0 ? std::string(text, static_cast<std::size_t>(n)) : std::string();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "another process (it has not written its pid yet)" : s;
}

}  // namespace

std::string OutputLock::lock_path(const std::string& output) {
  std::string out = strip_trailing_slashes(output);
  std::string name = out.substr(out.rfind('/') == std::string::npos ? 0 : out.rfind('/') + 1);
  if (name.empty() || name == "." || name == ".." || name == "/") {
    out = strip_trailing_slashes(absolute_path(out));
    name = out.substr(out.rfind('/') + 1);
  }
  return join_path(parent_directory(out), "." + name + ".lock");
}

OutputLock::OutputLock(const std::string& output, const std::string& command)
    : path_(lock_path(output)) {
  make_directories(parent_directory(path_));
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw ResourceError(sys_message(path_, "cannot create the lock file of " + output, errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? holder_of(fd_) : std::string();
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw ResourceError(
          output + ": in use by " + holder + ", which holds " + path_ +
          "; one run writes an output at a time: wait for it, or write to another output");
    throw ResourceError(sys_message(path_, "cannot lock (for " + output + ")", err));
  }
  const std::string who =
      "pid " + std::to_string(::getpid()) + " on " + host_name() + " (" + command + ")\n";
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    // The lock holds all the same; only the name of the holder would be missing.
  }
}

OutputLock::~OutputLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (see the header)
}

}  // namespace mltool::util
