// Files: atomic publication (write aside, then rename), read-only memory maps,
// and small whole-file helpers. Every failure names the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

namespace mltool::util {

/// A file written under a temporary name beside its destination and renamed into
/// place by commit(). Destroyed without commit(), it removes the temporary file, so
/// a failed job never leaves a half-written output under the published name.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends bytes; throws ResourceError (disk full, I/O error) naming the final path.
  void write(const void* data, std::size_t size);
  void write(std::string_view s) { write(s.data(), s.size()); }
  /// Writes at an absolute position of the temporary file (used to patch headers).
  void pwrite(const void* data, std::size_t size, std::uint64_t offset);
  /// Bytes written so far (the current end of the file).
  std::uint64_t size() const { return size_; }
  /// Flushes, fsyncs, renames over the destination and fsyncs the directory.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }

 private:
  void flush_buffer();
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::string buffer_;
  bool committed_ = false;
};

/// Writes a whole file atomically.
void write_file_atomic(const std::string& path, std::string_view content);

/// Reads a whole file; InputError if it cannot be opened.
std::string read_file(const std::string& path);

/// A read-only memory map of a whole file. Empty files map to a null pointer and size 0.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// Path helpers. mltool avoids std::filesystem in everything that links LibTorch: the
// torch wheel's libtorch.so exports its own std::filesystem symbols, which interpose on
// libstdc++'s and crash (e.g. remove_all) — so these are plain POSIX.

/// `dir + "/" + name` (no doubled slash).
std::string join_path(const std::string& dir, const std::string& name);
/// `path` resolved to an absolute path without symbolic links (realpath), or `path`
/// unchanged if it cannot be resolved (e.g. it does not exist).
std::string absolute_path(const std::string& path);
/// The directory part of `path` ("." for a bare name).
std::string parent_directory(const std::string& path);
/// Removes `path` and, for a directory, everything below it; no error if it is absent.
void remove_tree(const std::string& path);

/// Removes, in `dir`, the leftovers of writers that were killed: entries named
/// `NAME.partial-PID` or `NAME.partial-PID-N` (write_file_atomic's temporaries, pack's partial
/// directories) whose NAME starts with `prefix` and whose PID is no running process on this
/// machine (nor this one). Returns how many it removed; a missing `dir` is none.
std::size_t remove_stale_partials(const std::string& dir, const std::string& prefix = "");

/// True if `path` exists (any type).
bool exists(const std::string& path);
/// True if `path` is a directory.
bool is_directory(const std::string& path);
/// Creates a directory and its parents; ResourceError on failure.
void make_directories(const std::string& path);
/// Size of a regular file in bytes; InputError if it cannot be stat'ed.
std::uint64_t file_size(const std::string& path);

}  // namespace mltool::util
