// The LMDB environment: opening with clear errors, the in-process map guard, map growth
// and adoption, and the translation of LMDB result codes into mltool errors.
#include "mltool/io/lmdb.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "lmdb_internal.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::io::lmdb {
namespace {

constexpr const char* kExpected = "expected an LMDB directory (containing data.mdb)";
constexpr std::uint64_t kMapGranule = 64 << 10;  // a multiple of every OS page size
constexpr int kMaxRetries = 48;                  // doublings; mmap gives up long before

// LMDB's fcntl locks are per process: a second open of the same store and its later close
// would silently drop the first one's locks. Directories are identified by device/inode.
std::mutex registry_mutex;
std::set<std::pair<dev_t, ino_t>> open_stores;

std::uint64_t round_up(std::uint64_t n) {
  return (n + kMapGranule - 1) / kMapGranule * kMapGranule;
}

std::string mib(std::uint64_t bytes) {
  return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

std::uint64_t current_map_size(const detail::EnvShared& s) {
  MDB_envinfo info{};
  mdb_env_info(s.env, &info);
  return info.me_mapsize;
}

// Only a directory that is missing, empty or holds a stale lock.mdb may become a new store,
// so that a mistyped path never scatters data.mdb into an unrelated folder.
bool holds_only_lock_file(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return false;
  bool only = true;
  while (dirent* e = ::readdir(dir)) {
    std::string_view name = e->d_name;
    if (name != "." && name != ".." && name != "lock.mdb") only = false;
  }
  ::closedir(dir);
  return only;
}

void check_directory(const std::string& path, const EnvOptions& o) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) throw InputError(sys_message(path, "cannot stat", errno));
    if (o.read_only || !o.create)
      throw InputError(at_file(path, std::string("does not exist, ") + kExpected));
    util::make_directories(path);
    return;
  }
  if (S_ISREG(st.st_mode))
    throw InputError(at_file(path, std::string("is a plain file, ") + kExpected));
  if (!S_ISDIR(st.st_mode))
    throw InputError(at_file(path, std::string("is not a directory, ") + kExpected));
  if (util::exists(path + "/data.mdb")) {
    // A writable open would initialize an empty data.mdb; a read-only one fails obscurely.
    if (o.read_only && util::file_size(path + "/data.mdb") == 0) {
      throw FormatError(at_file(path, "is not an LMDB: data.mdb is empty"));
    }
    return;
  }
  if (o.read_only || !o.create) {
    throw InputError(at_file(path, "is not an LMDB: the directory has no data.mdb"));
  }
  if (!holds_only_lock_file(path)) {
    throw InputError(at_file(path,
                             "is not an LMDB: the directory has no data.mdb but holds "
                             "other files; refusing to create a store in it"));
  }
}

ErrorKind kind_of(int rc) {
  switch (rc) {
    case MDB_NOTFOUND:
    case MDB_KEYEXIST:
    case MDB_BAD_VALSIZE:
    case ENOENT:
    case EACCES:
    case EROFS: return ErrorKind::input;
    case MDB_INVALID:
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE: return ErrorKind::format;
    default: return ErrorKind::resource;
  }
}

// A short hint for the errors whose LMDB text does not say what to do.
std::string hint_for(int rc, const detail::EnvShared& s) {
  switch (rc) {
    case MDB_MAP_FULL: return " (map size " + mib(current_map_size(s)) + ")";
    case MDB_TXN_FULL:
      return " (too many pages changed in one transaction: commit smaller batches)";
    case MDB_DBS_FULL: return " (raise EnvOptions::max_dbs)";
    case MDB_READERS_FULL: return " (raise EnvOptions::max_readers or end idle read transactions)";
    case EIO:
    case ENOSPC: {  // LMDB reports a short write as EIO: say when the disk is the reason
      struct statvfs v {};
      if (::statvfs(s.path.c_str(), &v) == 0) {
        const auto free = static_cast<std::uint64_t>(v.f_bavail) * v.f_frsize;
        if (free < (std::uint64_t{16} << 20))
          return std::string(" (") + std::strerror(ENOSPC) + ": " + std::to_string(free) +
                 " bytes free; the last committed transaction is kept, free space and run again)";
      }
      return rc == EIO ? " (a write failed: a full disk, or a failing device)" : "";
    }
    default: return "";
  }
}

// LMDB maps lock.mdb after growing it with ftruncate, which allocates nothing: on a full disk
// the first touch of the map is a SIGBUS. Its blocks are allocated here first, so a full
// disk is an error (ResourceError naming the file) instead.
void reserve_lock_file(const std::string& dir, unsigned max_readers) {
  const std::string lock = util::join_path(dir, "lock.mdb");
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0664);
  if (fd < 0) return;  // mdb_env_open says why
  // The reader table (64 bytes a slot) and its header, rounded up to pages.
  const off_t want =
      static_cast<off_t>(((std::uint64_t{max_readers} + 8) * 64 + 4095) / 4096 * 4096);
  struct stat st {};
  // Only a new (empty) one: an existing lock file's size is the reader table every process
  // that has the store open agrees on.
  int rc = ::fstat(fd, &st) == 0 && st.st_size > 0 ? 0 : ::posix_fallocate(fd, 0, want);
  ::close(fd);
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL)
    throw ResourceError(
        at_file(lock, std::string("cannot reserve the lock file: ") + std::strerror(rc)));
}

}  // namespace

std::string printable_key(std::string_view key) {
  constexpr std::size_t kShown = 96;
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < key.size() && i < kShown; ++i) {
    auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (key.size() > kShown) out += "... (" + std::to_string(key.size()) + " bytes)";
  return out;
}

namespace detail {

EnvShared::~EnvShared() {
  if (env != nullptr) mdb_env_close(env);
  if (registered) {
    std::lock_guard<std::mutex> lock(registry_mutex);
    open_stores.erase({dev, ino});
  }
}

void throw_mdb(int rc, const EnvShared& s, std::string_view op, const Dbi* dbi,
               const std::string_view* key) {
  std::string m = s.path + ": " + std::string(op);
  if (key != nullptr) m += " '" + printable_key(*key) + "'";
  if (dbi != nullptr && !dbi->name().empty()) m += " in '" + std::string(dbi->name()) + "'";
  m += ": ";
  m += mdb_strerror(rc);
  m += hint_for(rc, s);
  if (rc == EINVAL && dbi != nullptr) {
    m += " (a database opened after this transaction began cannot be used in it)";
  }
  if (rc == MDB_MAP_FULL) throw MapFullError(m);
  switch (kind_of(rc)) {
    case ErrorKind::input: throw InputError(m);
    case ErrorKind::format: throw FormatError(m);
    default: throw ResourceError(m);
  }
}

void check_dbi(const EnvShared& s, const Dbi& dbi) {
  if (!dbi.valid())
    throw UsageError(at_file(s.path, "use of an invalid (default-constructed) Dbi"));
}

void check_key(const EnvShared& s, std::string_view op, const Dbi& dbi, std::string_view key) {
  check_dbi(s, dbi);
  if (!key.empty() && key.size() <= s.max_key_size) return;
  std::string m = s.path + ": " + std::string(op) + " '" + printable_key(key) + "'";
  if (!dbi.name().empty()) m += " in '" + std::string(dbi.name()) + "'";
  m += key.empty() ? ": empty key" : ": key is " + std::to_string(key.size()) + " bytes";
  m += "; LMDB keys must be 1 to " + std::to_string(s.max_key_size) + " bytes";
  throw InputError(m);
}

void acquire_txn_share(EnvShared& s) {
  std::unique_lock<std::mutex> lock(s.guard_mutex);
  auto self = std::this_thread::get_id();
  auto it = s.txns_by_thread.find(self);
  bool nested = it != s.txns_by_thread.end() && it->second > 0;
  if (!nested) s.guard_cv.wait(lock, [&] { return s.pending_resizes == 0; });
  ++s.active_txns;
  ++s.txns_by_thread[self];
}

void release_txn_share(EnvShared& s, std::thread::id owner) noexcept {
  std::lock_guard<std::mutex> lock(s.guard_mutex);
  --s.active_txns;
  auto it = s.txns_by_thread.find(owner);
  if (it != s.txns_by_thread.end() && --it->second <= 0) s.txns_by_thread.erase(it);
  if (s.active_txns == 0 && s.pending_resizes > 0) s.guard_cv.notify_all();
}

void with_map_exclusive(EnvShared& s, const char* why, const std::function<void()>& fn) {
  std::unique_lock<std::mutex> lock(s.guard_mutex);
  if (s.txns_by_thread.count(std::this_thread::get_id()) != 0) {
    throw UsageError(at_file(s.path, std::string("cannot ") + why +
                                         " while this thread holds a transaction of the store; "
                                         "end it first (it would wait for itself)"));
  }
  ++s.pending_resizes;
  s.guard_cv.wait(lock, [&] { return s.active_txns == 0; });
  // Still under the lock: the count of pending resizes keeps new transactions out, and
  // running fn under the mutex makes concurrent resizes take turns.
  try {
    fn();
  } catch (...) {
    --s.pending_resizes;
    s.guard_cv.notify_all();
    throw;
  }
  --s.pending_resizes;
  s.guard_cv.notify_all();
}

Txn begin_txn(EnvShared& s, bool read_only) {
  for (int attempt = 0;; ++attempt) {
    acquire_txn_share(s);
    MDB_txn* txn = nullptr;
    int rc = mdb_txn_begin(s.env, nullptr, read_only ? MDB_RDONLY : 0, &txn);
    if (rc == MDB_SUCCESS) return Access::make_txn(&s, txn, read_only);
    release_txn_share(s, std::this_thread::get_id());
    const char* what = read_only ? "begin read transaction" : "begin write transaction";
    if (rc != MDB_MAP_RESIZED || attempt >= kMaxRetries) throw_mdb(rc, s, what, nullptr, nullptr);
    // Another process grew the map beyond ours: adopt the size recorded in the store.
    with_map_exclusive(s, "adopt the map grown by another process", [&] {
      int r = mdb_env_set_mapsize(s.env, 0);
      if (r != MDB_SUCCESS) throw_mdb(r, s, "adopt grown map", nullptr, nullptr);
    });
  }
}

void grow_map_from(EnvShared& s, std::uint64_t seen, std::uint64_t target) {
  target = round_up(target);
  with_map_exclusive(s, "grow the map", [&] {
    std::uint64_t now = current_map_size(s);
    if (now >= target || now > seen) return;  // another thread grew it meanwhile
    int rc = mdb_env_set_mapsize(s.env, target);
    if (rc != MDB_SUCCESS) {
      throw ResourceError(at_file(s.path, "cannot grow the map from " + mib(now) + " to " +
                                              mib(target) + ": " + mdb_strerror(rc)));
    }
  });
}

void run_write(EnvShared& s, const std::function<void(Txn&)>& fn, std::uint64_t size_hint) {
  for (int attempt = 0;; ++attempt) {
    Txn txn = begin_txn(s, false);
    // Read while our share keeps the size from changing.
    std::uint64_t seen = current_map_size(s);
    try {
      fn(txn);
      txn.commit();
      return;
    } catch (const MapFullError&) {
      txn.abort();  // also drops our share, which the resize waits for
      if (attempt >= kMaxRetries) throw;
    }
    grow_map_from(s, seen, std::max(seen * 2, seen + 2 * size_hint));
  }
}

}  // namespace detail

Env::Env(std::unique_ptr<detail::EnvShared> shared) : shared_(std::move(shared)) {}
Env::Env(Env&& other) noexcept = default;
Env& Env::operator=(Env&& other) noexcept = default;
Env::~Env() = default;

Env Env::open(const std::string& path, const EnvOptions& options) {
  check_directory(path, options);
  auto s = std::make_unique<detail::EnvShared>();
  s->path = path;
  s->read_only = options.read_only;

  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw InputError(sys_message(path, "cannot stat", errno));
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    if (!open_stores.insert({st.st_dev, st.st_ino}).second) {
      throw UsageError(at_file(path, "is already open in this process; share the one Env"));
    }
  }
  s->dev = st.st_dev;
  s->ino = st.st_ino;
  s->registered = true;

  int rc = mdb_env_create(&s->env);
  if (rc != MDB_SUCCESS) detail::throw_mdb(rc, *s, "create environment", nullptr, nullptr);
  rc = mdb_env_set_maxreaders(s->env, options.max_readers);
  if (rc == MDB_SUCCESS) rc = mdb_env_set_maxdbs(s->env, options.max_dbs);
  if (rc == MDB_SUCCESS && !options.read_only) {
    rc = mdb_env_set_mapsize(s->env, round_up(std::max<std::uint64_t>(options.map_size, 1)));
  }
  if (rc != MDB_SUCCESS) detail::throw_mdb(rc, *s, "configure environment", nullptr, nullptr);

  if (!options.read_only) reserve_lock_file(path, options.max_readers);
  unsigned flags = MDB_NOTLS;
  if (options.read_only) flags |= MDB_RDONLY;
  if (!options.readahead) flags |= MDB_NORDAHEAD;
  rc = mdb_env_open(s->env, path.c_str(), flags, 0664);
  if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH) {
    throw FormatError(
        at_file(path, std::string("is not an LMDB (data.mdb: ") + mdb_strerror(rc) + ")"));
  }
  if (rc != MDB_SUCCESS) detail::throw_mdb(rc, *s, "cannot open the store", nullptr, nullptr);
  s->max_key_size = static_cast<unsigned>(mdb_env_get_maxkeysize(s->env));

  // The main database's handle never needs a commit to become shared.
  Txn txn = detail::begin_txn(*s, true);
  rc = mdb_dbi_open(txn.handle(), nullptr, 0, &s->main_dbi);
  if (rc != MDB_SUCCESS) detail::throw_mdb(rc, *s, "open main database", nullptr, nullptr);
  txn.abort();
  return Env(std::move(s));
}

const std::string& Env::path() const { return shared_->path; }
bool Env::read_only() const { return shared_->read_only; }

Dbi Env::main_db() const { return detail::Access::make_dbi(shared_->main_dbi, ""); }

Dbi Env::db(std::string_view name, bool create) {
  detail::EnvShared& s = *shared_;
  if (name.empty()) return main_db();
  std::lock_guard<std::mutex> lock(s.dbi_mutex);
  if (auto it = s.named_dbis.find(name); it != s.named_dbis.end()) {
    return detail::Access::make_dbi(it->second, it->first);
  }
  bool creating = create && !s.read_only;
  Txn txn = detail::begin_txn(s, !creating);
  std::string key(name);
  MDB_dbi id = 0;
  int rc = mdb_dbi_open(txn.handle(), key.c_str(), creating ? MDB_CREATE : 0, &id);
  if (rc == MDB_NOTFOUND) {
    throw InputError(
        at_file(s.path, "named database '" + printable_key(name) + "' does not exist"));
  }
  std::string_view key_view = key;
  if (rc != MDB_SUCCESS) detail::throw_mdb(rc, s, "open named database", nullptr, &key_view);
  // Committing (even a read transaction) is what makes the handle usable by other ones.
  txn.commit();
  auto it = s.named_dbis.emplace(std::move(key), id).first;
  return detail::Access::make_dbi(id, it->first);
}

Txn Env::begin_read() const { return detail::begin_txn(*shared_, true); }

Txn Env::begin_write() {
  if (shared_->read_only)
    throw UsageError(at_file(shared_->path, "write to a store opened read-only"));
  return detail::begin_txn(*shared_, false);
}

void Env::write(const std::function<void(Txn&)>& fn) {
  if (shared_->read_only)
    throw UsageError(at_file(shared_->path, "write to a store opened read-only"));
  detail::run_write(*shared_, fn, 0);
}

std::uint64_t Env::entries(const Dbi& dbi) const { return begin_read().stat(dbi).entries; }

std::uint64_t Env::map_size() const { return current_map_size(*shared_); }

EnvInfo Env::info() const {
  MDB_envinfo i{};
  MDB_stat st{};
  mdb_env_info(shared_->env, &i);
  mdb_env_stat(shared_->env, &st);
  EnvInfo out;
  out.map_size = i.me_mapsize;
  out.used_bytes = (static_cast<std::uint64_t>(i.me_last_pgno) + 1) * st.ms_psize;
  out.readers = i.me_numreaders;
  out.max_readers = i.me_maxreaders;
  out.max_key_size = shared_->max_key_size;
  return out;
}

void Env::grow_map(std::uint64_t min_size) {
  detail::grow_map_from(*shared_, UINT64_MAX, min_size);
}

}  // namespace mltool::io::lmdb
