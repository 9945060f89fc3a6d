#include "mltool/util/file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ftw.h>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <vector>

#include "mltool/util/error.hpp"

namespace mltool::util {
namespace {

constexpr std::size_t kBufferSize = 1 << 20;

std::string temp_name_for(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + ".partial-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

void write_all(int fd, const char* p, std::size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw ResourceError(sys_message(path, "write failed", errno));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void fsync_directory_of(const std::string& path) {
  const std::string dir = parent_directory(path);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some file systems refuse directory fds
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), temp_(temp_name_for(path_)) {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw ResourceError(sys_message(path_, "cannot create " + temp_, errno));
  buffer_.reserve(kBufferSize);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::flush_buffer() {
  write_all(fd_, buffer_.data(), buffer_.size(), path_);
  buffer_.clear();
}

void AtomicFile::write(const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + size > kBufferSize) {
    flush_buffer();
    if (size >= kBufferSize) {
      write_all(fd_, p, size, path_);
      size_ += size;
      return;
    }
  }
  buffer_.append(p, size);
  size_ += size;
}

void AtomicFile::pwrite(const void* data, std::size_t size, std::uint64_t offset) {
  flush_buffer();
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t w = ::pwrite(fd_, p, size, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw ResourceError(sys_message(path_, "write failed", errno));
    }
    p += w;
    size -= static_cast<std::size_t>(w);
    offset += static_cast<std::uint64_t>(w);
  }
  if (offset > size_) size_ = offset;
}

void AtomicFile::commit() {
  flush_buffer();
  if (::fsync(fd_) != 0) throw ResourceError(sys_message(path_, "fsync failed", errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw ResourceError(sys_message(path_, "close failed", errno));
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0)
    throw ResourceError(sys_message(path_, "cannot rename " + temp_ + " into place", errno));
  committed_ = true;
  fsync_directory_of(path_);
}

void write_file_atomic(const std::string& path, std::string_view content) {
  AtomicFile f(path);
  f.write(content);
  f.commit();
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(sys_message(path, "cannot open", errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      throw InputError(sys_message(path, "read failed", e));
    }
    if (r == 0) break;
    out.append(buf, static_cast<std::size_t>(r));
  }
  ::close(fd);
  return out;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(sys_message(path, "cannot open", errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw InputError(sys_message(path, "cannot stat", e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(at_file(path, "not a regular file"));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw ResourceError(sys_message(path, "mmap failed", e));
    }
    data_ = static_cast<const std::uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_directories(const std::string& path) {
  if (path.empty() || is_directory(path)) return;
  const std::string parent = parent_directory(path);
  if (parent != path) make_directories(parent);
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    throw ResourceError(sys_message(path, "cannot create directory", errno));
  if (!is_directory(path)) throw ResourceError(at_file(path, "exists and is not a directory"));
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string absolute_path(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) ? std::string(resolved) : path;
}

std::string parent_directory(const std::string& path) {
  auto end = path.find_last_not_of('/');
  if (end == std::string::npos) return path.empty() ? "." : "/";
  const auto slash = path.rfind('/', end);
  if (slash == std::string::npos) return ".";
  const auto last = path.find_last_not_of('/', slash);
  return last == std::string::npos ? "/" : path.substr(0, last + 1);
}

void remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); };
  if (::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
    throw ResourceError(sys_message(path, "cannot remove", errno));
}

std::uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw InputError(sys_message(path, "cannot stat", errno));
  return static_cast<std::uint64_t>(st.st_size);
}

std::size_t remove_stale_partials(const std::string& dir, const std::string& prefix) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const auto at = name.rfind(".partial-");
    if (at == std::string::npos || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string tail = name.substr(at + 9);  // PID or PID-N
    const auto dash = tail.find('-');
    const std::string pid_text = tail.substr(0, dash);
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos ||
        (dash != std::string::npos &&
         (dash + 1 == tail.size() ||
          tail.find_first_not_of("0123456789", dash + 1) != std::string::npos)))
      continue;
    const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours)
    stale.push_back(join_path(dir, name));
  }
  ::closedir(d);
  for (const auto& path : stale) remove_tree(path);
  return stale.size();
}

}  // namespace mltool::util
