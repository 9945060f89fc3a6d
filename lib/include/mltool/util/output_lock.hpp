// One writer per output. A command that writes an output (extract's feature store, pack's
// dataset, train's run directory, tile's store) holds an exclusive lock on it for as long as
// it runs; a second run on the same output fails at once, naming the process that holds it.
//
// The lock is flock(2) on a small file beside the output, `.NAME.lock` in the output's
// parent directory (beside, not inside: pack replaces its output directory by a rename, and
// train --overwrite empties it). The kernel drops the lock when the holder exits or is
// killed, so a stale lock file is harmless and is never removed (removing it would let two
// runs lock two different files). The holder writes "pid host command" into the file so the
// refusal can say who holds it. On NFS, Linux (since 2.6.12) turns flock into whole-file
// fcntl locks, which the NFS lock manager (NLMv4, or NFSv4's own locking) enforces across
// clients; file systems mounted with `nolock` or `local_lock=flock` lock per machine only.
#pragma once

#include <string>

namespace mltool::util {

class OutputLock {
 public:
  /// Locks `output` (which need not exist yet) for `command` (e.g. "mltool extract"). Throws
  /// ResourceError (exit 3) naming the output and the holder's pid and host when another
  /// process holds it, or when the lock file cannot be created.
  OutputLock(const std::string& output, const std::string& command);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

  /// The lock file's path.
  const std::string& path() const { return path_; }

  /// The lock file that guards `output`: PARENT/.NAME.lock.
  static std::string lock_path(const std::string& output);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace mltool::util
