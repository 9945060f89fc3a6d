// Internals shared by lmdb.cpp (environment, map growth, errors) and lmdb_txn.cpp
// (transactions, cursors, batch writer). Not part of the public interface.
#pragma once

#include <lmdb.h>
#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "mltool/io/lmdb.hpp"

namespace mltool::io::lmdb::detail {

/// The state every Txn, Cursor and BatchWriter points to; owned by Env so that moving the
/// Env does not move it.
struct EnvShared {
  EnvShared() = default;
  EnvShared(const EnvShared&) = delete;
  EnvShared& operator=(const EnvShared&) = delete;
  ~EnvShared();

  MDB_env* env = nullptr;
  std::string path;
  bool read_only = false;
  unsigned max_key_size = 511;
  MDB_dbi main_dbi = 0;
  dev_t dev = 0;  // identity of the directory, for the one-open-per-process registry
  ino_t ino = 0;
  bool registered = false;

  // mdb_env_set_mapsize unmaps and remaps the file, which would pull the map out from under
  // any open transaction of this process (and the string_views it handed out). So every
  // Txn holds a share of this guard and a resize waits until there are none; a pending
  // resize stops new transactions from starting so that readers cannot starve it.
  std::mutex guard_mutex;
  std::condition_variable guard_cv;
  int active_txns = 0;
  int pending_resizes = 0;
  std::unordered_map<std::thread::id, int> txns_by_thread;

  // mdb_dbi_open must not run in two transactions at once; names live here so that Dbi
  // can point at them.
  std::mutex dbi_mutex;
  std::map<std::string, MDB_dbi, std::less<>> named_dbis;
};

/// Friend of the public classes: constructs them and reaches their handles.
struct Access {
  static Dbi make_dbi(unsigned id, std::string_view name) { return Dbi(id, name); }
  static Txn make_txn(EnvShared* env, MDB_txn* txn, bool read_only) {
    return Txn(env, txn, read_only);
  }
  static Cursor make_cursor(EnvShared* env, Dbi dbi, MDB_cursor* cursor,
                            std::shared_ptr<bool> alive) {
    return Cursor(env, dbi, cursor, std::move(alive));
  }
  static Range make_range(Cursor cursor, std::string from, std::optional<std::string> to) {
    return Range(std::move(cursor), std::move(from), std::move(to));
  }
  static EnvShared* shared(Env& env) { return env.shared_.get(); }
};

// --- the map guard (lmdb.cpp) ---

/// Takes a share for a new transaction; waits while a resize is pending unless this thread
/// already holds a share (it would otherwise deadlock against the resize).
void acquire_txn_share(EnvShared& s);
/// Returns the share taken by `owner` (the thread that began the transaction).
void release_txn_share(EnvShared& s, std::thread::id owner) noexcept;
/// Runs `fn` once no transaction of this process is open; new ones wait meanwhile.
void with_map_exclusive(EnvShared& s, const char* why, const std::function<void()>& fn);

/// Begins a transaction, adopting a map grown by another process.
Txn begin_txn(EnvShared& s, bool read_only);
/// Grows the map to `target` (rounded up) unless it grew past `seen` since the caller
/// looked, which means another thread already did it.
void grow_map_from(EnvShared& s, std::uint64_t seen, std::uint64_t target);
/// The retry loop behind Env::write and BatchWriter: on MapFullError, abort, grow the map
/// (at least doubling it, and by `size_hint` bytes more if that is larger) and run again.
void run_write(EnvShared& s, const std::function<void(Txn&)>& fn, std::uint64_t size_hint);

// --- errors and values (lmdb.cpp) ---

/// Throws the mltool error for LMDB result `rc`:
/// "path: op 'key' in 'db': mdb_strerror(rc)" (key and db parts only when given).
[[noreturn]] void throw_mdb(int rc, const EnvShared& s, std::string_view op, const Dbi* dbi,
                            const std::string_view* key);
/// InputError for an empty key or one longer than the store allows.
void check_key(const EnvShared& s, std::string_view op, const Dbi& dbi, std::string_view key);
/// UsageError for a default-constructed Dbi.
void check_dbi(const EnvShared& s, const Dbi& dbi);

inline MDB_val to_val(std::string_view v) {
  return MDB_val{v.size(), const_cast<char*>(v.data())};  // LMDB never writes through it
}
inline std::string_view to_view(const MDB_val& v) {
  return std::string_view(static_cast<const char*>(v.mv_data), v.mv_size);
}

}  // namespace mltool::io::lmdb::detail
