// LMDB access for mltool: RAII handles for the environment, transactions, databases and
// cursors, a memory map that grows by itself, and a batch writer for bulk loads.
//
// The store is an LMDB directory (data.mdb + lock.mdb) that python-lmdb and the lmdb
// command-line tools read as is. Environments are opened with MDB_NOTLS, so a read
// transaction is not tied to the thread that began it and any number of threads may each
// hold their own read transaction at once. Write transactions are serialized by LMDB.
//
// Lifetimes: an Env must outlive every Txn, Cursor, Range and BatchWriter made from it
// (moving the Env is fine). Values and keys are returned as string_views into the map; they
// stay valid until the transaction ends (in a write transaction, until its next put or del).
//
// Every failure throws an mltool::Error naming the path, the named database (if any), the
// operation and the key, e.g. "tiles.lmdb: put 'slide-3/000012_000034': MDB_KEYEXIST: ...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "mltool/util/error.hpp"

// The public interface keeps <lmdb.h> out; these match its typedef'd structs.
struct MDB_txn;
struct MDB_cursor;

namespace mltool::io::lmdb {

namespace detail {
struct EnvShared;
struct Access;
}  // namespace detail

/// How an environment is opened.
struct EnvOptions {
  /// Open without write access (MDB_RDONLY). The directory and its data.mdb must exist.
  bool read_only = false;
  /// For a writable open, create the directory and an empty store if missing.
  bool create = true;
  /// How many named databases may be opened (mdb_env_set_maxdbs).
  unsigned max_dbs = 8;
  /// Initial map size in bytes for a writable open; the map doubles on demand when a write
  /// does not fit, so this only needs to be large enough to avoid frequent regrowth.
  /// Ignored when read-only (the size recorded in the store is used).
  std::uint64_t map_size = std::uint64_t{1} << 30;
  /// Reader slots shared by all processes that open the store (mdb_env_set_maxreaders).
  unsigned max_readers = 126;
  /// OS read-ahead; turn off for random reads of a store much larger than RAM.
  bool readahead = true;
};

/// What put() does when the key exists already.
enum class PutMode {
  overwrite,     ///< replace the value
  no_overwrite,  ///< throw InputError (MDB_KEYEXIST)
  append,        ///< fast bulk load; keys must arrive in increasing order (else MDB_KEYEXIST)
};

/// Thrown when a write does not fit in the map (MDB_MAP_FULL). Env::write and BatchWriter
/// catch it, grow the map and replay; it reaches callers only from a raw begin_write().
class MapFullError : public ResourceError {
 public:
  explicit MapFullError(const std::string& m) : ResourceError(m) {}
};

/// A database handle: the main (unnamed) database or a named one. Handles belong to the
/// Env and stay valid for its lifetime; copying one is free. Note that LMDB records named
/// databases as keys of the main database, so iterating the main database also yields
/// their names and its entry count includes them.
class Dbi {
 public:
  /// An invalid handle; using it throws UsageError.
  Dbi() = default;
  bool valid() const { return id_ != kInvalid; }
  /// The name given to Env::db, or "" for the main database.
  std::string_view name() const { return name_; }
  /// The raw MDB_dbi.
  unsigned id() const { return id_; }

 private:
  friend struct detail::Access;
  static constexpr unsigned kInvalid = ~0u;
  Dbi(unsigned id, std::string_view name) : id_(id), name_(name) {}
  unsigned id_ = kInvalid;
  std::string_view name_;  // points into the Env's own table of names
};

/// One key/value pair, both pointing into the map.
struct Entry {
  std::string_view key;
  std::string_view value;
};

/// Statistics of one database (mdb_stat).
struct DbStat {
  std::uint64_t entries = 0;
  unsigned depth = 0;
  std::uint64_t pages = 0;  ///< branch + leaf + overflow pages
  unsigned page_size = 0;
};

/// Statistics of the environment (mdb_env_info).
struct EnvInfo {
  std::uint64_t map_size = 0;    ///< bytes currently mapped
  std::uint64_t used_bytes = 0;  ///< bytes of data.mdb in use (last page + 1) × page size
  unsigned readers = 0;          ///< reader slots in use, all processes
  unsigned max_readers = 0;
  unsigned max_key_size = 0;  ///< 511 with a stock build
};

/// A cursor over one database of one transaction. It must not outlive the Txn's Env and
/// must not be used after its transaction ends (destroying it then is fine).
class Cursor {
 public:
  Cursor(Cursor&& other) noexcept;
  Cursor& operator=(Cursor&& other) noexcept;
  ~Cursor();

  /// Moves to the first entry; false if the database is empty.
  bool first();
  /// Moves to the next entry; false at the end.
  bool next();
  /// Moves to the first entry whose key is >= `key`; false if there is none.
  bool seek(std::string_view key);
  /// Moves to the entry whose key equals `key`; false (and not valid()) if absent.
  bool find(std::string_view key);
  /// True while positioned on an entry.
  bool valid() const { return valid_; }
  std::string_view key() const { return entry_.key; }
  std::string_view value() const { return entry_.value; }
  const Entry& entry() const { return entry_; }

 private:
  friend struct detail::Access;
  Cursor(detail::EnvShared* env, Dbi dbi, MDB_cursor* cursor, std::shared_ptr<bool> txn_alive);
  bool move(int op, std::string_view key, const char* what);
  void close() noexcept;

  detail::EnvShared* env_ = nullptr;
  Dbi dbi_;
  MDB_cursor* cursor_ = nullptr;
  // Set for cursors of write transactions, which LMDB frees when the transaction ends;
  // false then means the handle is gone and must not be closed again.
  std::shared_ptr<bool> txn_alive_;
  bool valid_ = false;
  Entry entry_;
};

/// A single-pass range of entries with keys in [from, to), for range-for loops:
/// `for (const Entry& e : txn.prefix(dbi, "slide-3/")) ...`.
class Range {
 public:
  class Iterator {
   public:
    const Entry& operator*() const { return range_->cursor_.entry(); }
    const Entry* operator->() const { return &range_->cursor_.entry(); }
    Iterator& operator++();
    bool operator!=(const Iterator& other) const { return range_ != other.range_; }
    bool operator==(const Iterator& other) const { return range_ == other.range_; }

   private:
    friend class Range;
    explicit Iterator(Range* range) : range_(range) {}
    Range* range_;  // null at the end
  };

  /// Positions the cursor at the start of the range; call once.
  Iterator begin();
  Iterator end() { return Iterator(nullptr); }

 private:
  friend struct detail::Access;
  Range(Cursor cursor, std::string from, std::optional<std::string> to);
  bool in_range() const;

  Cursor cursor_;
  std::string from_;
  std::optional<std::string> to_;  // exclusive upper bound; none = to the end
};

/// A read-only or write transaction. Destroyed without commit(), it aborts, so a failed
/// write leaves nothing behind. Movable, not copyable. A read transaction may be used from
/// any thread but from one thread at a time; a write transaction only from the thread that
/// began it.
class Txn {
 public:
  Txn(Txn&& other) noexcept;
  Txn& operator=(Txn&& other) noexcept;
  ~Txn();

  bool read_only() const { return read_only_; }
  /// False after commit() or abort().
  bool active() const { return txn_ != nullptr; }

  /// The value of `key`, or nothing if absent.
  std::optional<std::string_view> get(const Dbi& dbi, std::string_view key) const;
  /// The value of `key`; InputError "key not found" if absent.
  std::string_view at(const Dbi& dbi, std::string_view key) const;
  /// Stores a value. Throws MapFullError when the map is full (the transaction is then
  /// unusable: abort it, or let Env::write handle it), InputError for a bad key.
  void put(const Dbi& dbi, std::string_view key, std::string_view value,
           PutMode mode = PutMode::overwrite);
  /// Deletes `key`; false if it was absent.
  bool del(const Dbi& dbi, std::string_view key);

  /// A cursor over `dbi`, not yet positioned.
  Cursor cursor(const Dbi& dbi) const;
  /// Entries with keys in [from, to); an absent `to` runs to the end of the database.
  Range range(const Dbi& dbi, std::string_view from,
              std::optional<std::string_view> to = std::nullopt) const;
  /// Entries whose keys start with `prefix` (all entries for an empty prefix).
  Range prefix(const Dbi& dbi, std::string_view prefix) const;

  /// Statistics of `dbi` as seen by this transaction.
  DbStat stat(const Dbi& dbi) const;

  /// Commits; afterwards the transaction is no longer active. Throws MapFullError or
  /// another Error on failure, in which case nothing was written.
  void commit();
  /// Abandons the transaction; a no-op if it already ended.
  void abort() noexcept;

  /// The raw handle, for calls this wrapper does not cover.
  MDB_txn* handle() const { return txn_; }

 private:
  friend struct detail::Access;
  Txn(detail::EnvShared* env, MDB_txn* txn, bool read_only);
  void end(bool commit);
  void require_active(const char* what) const;

  detail::EnvShared* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  bool read_only_ = true;
  std::thread::id owner_;  // the thread that began it, for the map guard's bookkeeping
  mutable std::shared_ptr<bool> alive_;  // shared with this write transaction's cursors
};

/// An open LMDB environment (one store directory). Opening the same store twice in one
/// process is refused, because LMDB's locks would break; share one Env between threads.
class Env {
 public:
  /// Opens the store directory `path`. Errors name the path and say what was expected:
  /// a plain file, a missing path (read-only or create=false), a directory without
  /// data.mdb, or a data.mdb that is not an LMDB.
  static Env open(const std::string& path, const EnvOptions& options = {});

  Env(Env&& other) noexcept;
  Env& operator=(Env&& other) noexcept;
  ~Env();

  const std::string& path() const;
  bool read_only() const;

  /// The main (unnamed) database.
  Dbi main_db() const;
  /// A named database, created if missing when the Env is writable and `create` is set;
  /// otherwise a missing database is an InputError. Open databases up front: this starts
  /// its own transaction, so it must not be called while this thread holds a write txn.
  Dbi db(std::string_view name, bool create = true);

  /// Begins a read transaction. A map grown by another process (MDB_MAP_RESIZED) is adopted.
  Txn begin_read() const;
  /// Begins a write transaction that does not grow the map: prefer write() or BatchWriter.
  Txn begin_write();
  /// Runs `fn` in a write transaction and commits it. If the map fills up, the transaction
  /// is aborted, the map grown and `fn` run again from the start, so `fn` must be replayable
  /// and must not commit or abort the transaction itself.
  void write(const std::function<void(Txn&)>& fn);

  /// Number of entries of `dbi` (for the main database, including named database records).
  std::uint64_t entries(const Dbi& dbi) const;
  /// Current map size in bytes.
  std::uint64_t map_size() const;
  EnvInfo info() const;
  /// Grows the map to at least `min_size` bytes (rounded up), waiting until no transaction
  /// of this process is open. Throws UsageError if this thread holds one (it would wait
  /// forever).
  void grow_map(std::uint64_t min_size);

 private:
  friend struct detail::Access;
  explicit Env(std::unique_ptr<detail::EnvShared> shared);
  std::unique_ptr<detail::EnvShared> shared_;  // stable address that Txn/Cursor point to
};

/// Thresholds of a BatchWriter; a batch is committed when either is reached.
struct BatchOptions {
  std::size_t max_bytes = std::size_t{64} << 20;  ///< buffered key + value bytes
  std::size_t max_puts = 100000;
  PutMode mode = PutMode::overwrite;
};

/// Buffers puts into one database and commits them in large write transactions, growing
/// the map as needed. Destroyed without flush(), the buffered puts are dropped, like an
/// uncommitted transaction; an automatic flush happens only when a threshold is reached.
///
/// For "a slide's tiles and its completion marker commit together": put the tiles, then
/// flush(marker). Earlier batches of the slide may already be committed by thresholds, but
/// the marker lands only with the last of them, so a marker always means all tiles are there
/// (a resumed job rewrites a slide without one). To keep a slide in one transaction outright,
/// raise both thresholds; LMDB then limits a transaction to about 128k dirty pages
/// (MDB_TXN_FULL).
class BatchWriter {
 public:
  BatchWriter(Env& env, Dbi dbi, BatchOptions options = {});
  BatchWriter(BatchWriter&&) noexcept = default;
  BatchWriter& operator=(BatchWriter&&) noexcept = default;

  /// Buffers a put (copying key and value); commits the batch if a threshold is reached.
  /// A bad key throws InputError here, not at the later commit.
  void put(std::string_view key, std::string_view value);
  /// Commits the buffered puts.
  void flush();
  /// Commits the buffered puts and whatever `extra` writes (e.g. a completion marker into
  /// another database) in ONE transaction, so either all of it lands or none does. `extra`
  /// may run more than once (map growth replays it). After an error the buffer is empty.
  void flush(const std::function<void(Txn&)>& extra);

  std::size_t pending_puts() const { return items_.size(); }
  std::size_t pending_bytes() const { return data_.size(); }
  /// Puts committed by this writer so far.
  std::uint64_t committed_puts() const { return committed_; }

 private:
  struct Item {
    std::size_t offset;  // key then value in data_
    std::size_t key_size;
    std::size_t value_size;
  };
  detail::EnvShared* env_;
  Dbi dbi_;
  BatchOptions options_;
  std::string data_;
  std::vector<Item> items_;
  std::uint64_t committed_ = 0;
};

/// A key as it appears in messages: printable ASCII as is, other bytes as \xNN, long keys
/// shortened with the full length appended.
std::string printable_key(std::string_view key);

}  // namespace mltool::io::lmdb
