// Transactions, cursors, key ranges and the batch writer over an LMDB environment.
#include <utility>

#include "lmdb_internal.hpp"
#include "mltool/io/lmdb.hpp"
#include "mltool/util/error.hpp"

namespace mltool::io::lmdb {

using detail::Access;
using detail::throw_mdb;
using detail::to_val;
using detail::to_view;

// --- Txn ---

Txn::Txn(detail::EnvShared* env, MDB_txn* txn, bool read_only)
    : env_(env), txn_(txn), read_only_(read_only), owner_(std::this_thread::get_id()) {}

Txn::Txn(Txn&& other) noexcept
    : env_(other.env_),
      txn_(std::exchange(other.txn_, nullptr)),
      read_only_(other.read_only_),
      owner_(other.owner_),
      alive_(std::move(other.alive_)) {}

Txn& Txn::operator=(Txn&& other) noexcept {
  if (this != &other) {
    abort();
    env_ = other.env_;
    txn_ = std::exchange(other.txn_, nullptr);
    read_only_ = other.read_only_;
    owner_ = other.owner_;
    alive_ = std::move(other.alive_);
  }
  return *this;
}

Txn::~Txn() { abort(); }

void Txn::require_active(const char* what) const {
  if (txn_ == nullptr) {
    throw UsageError(at_file(env_ != nullptr ? env_->path : "lmdb",
                             std::string(what) + " on a transaction that already ended"));
  }
}

void Txn::end(bool commit) {
  MDB_txn* txn = std::exchange(txn_, nullptr);
  // LMDB frees a write transaction's cursors when it ends, committed or not.
  if (alive_) *alive_ = false;
  int rc = MDB_SUCCESS;
  if (commit) {
    rc = mdb_txn_commit(txn);  // frees the handle even when it fails
  } else {
    mdb_txn_abort(txn);
  }
  detail::release_txn_share(*env_, owner_);
  if (rc != MDB_SUCCESS) throw_mdb(rc, *env_, "commit", nullptr, nullptr);
}

void Txn::commit() {
  require_active("commit");
  end(true);
}

void Txn::abort() noexcept {
  if (txn_ != nullptr) end(false);  // aborting cannot fail, so end() cannot throw here
}

std::optional<std::string_view> Txn::get(const Dbi& dbi, std::string_view key) const {
  require_active("get");
  detail::check_key(*env_, "get", dbi, key);
  MDB_val k = to_val(key);
  MDB_val v{};
  int rc = mdb_get(txn_, dbi.id(), &k, &v);
  if (rc == MDB_NOTFOUND) return std::nullopt;
  if (rc != MDB_SUCCESS) throw_mdb(rc, *env_, "get", &dbi, &key);
  return to_view(v);
}

std::string_view Txn::at(const Dbi& dbi, std::string_view key) const {
  if (auto v = get(dbi, key)) return *v;
  std::string m = env_->path + ": get '" + printable_key(key) + "'";
  if (!dbi.name().empty()) m += " in '" + std::string(dbi.name()) + "'";
  throw InputError(m + ": key not found");
}

void Txn::put(const Dbi& dbi, std::string_view key, std::string_view value, PutMode mode) {
  require_active("put");
  if (read_only_) throw UsageError(at_file(env_->path, "put in a read-only transaction"));
  detail::check_key(*env_, "put", dbi, key);
  unsigned flags = 0;
  if (mode == PutMode::no_overwrite) flags = MDB_NOOVERWRITE;
  if (mode == PutMode::append) flags = MDB_APPEND;
  MDB_val k = to_val(key);
  MDB_val v = to_val(value);
  int rc = mdb_put(txn_, dbi.id(), &k, &v, flags);
  if (rc != MDB_SUCCESS) throw_mdb(rc, *env_, "put", &dbi, &key);
}

bool Txn::del(const Dbi& dbi, std::string_view key) {
  require_active("del");
  if (read_only_) throw UsageError(at_file(env_->path, "del in a read-only transaction"));
  detail::check_key(*env_, "del", dbi, key);
  MDB_val k = to_val(key);
  int rc = mdb_del(txn_, dbi.id(), &k, nullptr);
  if (rc == MDB_NOTFOUND) return false;
  if (rc != MDB_SUCCESS) throw_mdb(rc, *env_, "del", &dbi, &key);
  return true;
}

Cursor Txn::cursor(const Dbi& dbi) const {
  require_active("cursor");
  detail::check_dbi(*env_, dbi);
  MDB_cursor* cursor = nullptr;
  int rc = mdb_cursor_open(txn_, dbi.id(), &cursor);
  if (rc != MDB_SUCCESS) throw_mdb(rc, *env_, "open cursor", &dbi, nullptr);
  if (!read_only_ && !alive_) alive_ = std::make_shared<bool>(true);
  return Access::make_cursor(env_, dbi, cursor, read_only_ ? nullptr : alive_);
}

Range Txn::range(const Dbi& dbi, std::string_view from, std::optional<std::string_view> to) const {
  std::optional<std::string> end;
  if (to) end.emplace(*to);
  return Access::make_range(cursor(dbi), std::string(from), std::move(end));
}

Range Txn::prefix(const Dbi& dbi, std::string_view prefix) const {
  // The first key past every key that starts with `prefix`: drop trailing 0xff bytes and
  // increment the last remaining one. None left means the prefix runs to the end.
  std::string upper(prefix);
  while (!upper.empty() && static_cast<unsigned char>(upper.back()) == 0xff) upper.pop_back();
  std::optional<std::string_view> to;
  if (!upper.empty()) {
    upper.back() = static_cast<char>(static_cast<unsigned char>(upper.back()) + 1);
    to = upper;
  }
  return range(dbi, prefix, to);
}

DbStat Txn::stat(const Dbi& dbi) const {
  require_active("stat");
  detail::check_dbi(*env_, dbi);
  MDB_stat st{};
  int rc = mdb_stat(txn_, dbi.id(), &st);
  if (rc != MDB_SUCCESS) throw_mdb(rc, *env_, "stat", &dbi, nullptr);
  DbStat out;
  out.entries = st.ms_entries;
  out.depth = st.ms_depth;
  out.pages = st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
  out.page_size = st.ms_psize;
  return out;
}

// --- Cursor ---

Cursor::Cursor(detail::EnvShared* env, Dbi dbi, MDB_cursor* cursor, std::shared_ptr<bool> txn_alive)
    : env_(env), dbi_(dbi), cursor_(cursor), txn_alive_(std::move(txn_alive)) {}

Cursor::Cursor(Cursor&& other) noexcept
    : env_(other.env_),
      dbi_(other.dbi_),
      cursor_(std::exchange(other.cursor_, nullptr)),
      txn_alive_(std::move(other.txn_alive_)),
      valid_(std::exchange(other.valid_, false)),
      entry_(other.entry_) {}

Cursor& Cursor::operator=(Cursor&& other) noexcept {
  if (this != &other) {
    close();
    env_ = other.env_;
    dbi_ = other.dbi_;
    cursor_ = std::exchange(other.cursor_, nullptr);
    txn_alive_ = std::move(other.txn_alive_);
    valid_ = std::exchange(other.valid_, false);
    entry_ = other.entry_;
  }
  return *this;
}

Cursor::~Cursor() { close(); }

void Cursor::close() noexcept {
  MDB_cursor* cursor = std::exchange(cursor_, nullptr);
  if (cursor == nullptr) return;
  // Read-transaction cursors are ours to close at any time; write-transaction ones only
  // while their transaction is alive.
  if (!txn_alive_ || *txn_alive_) mdb_cursor_close(cursor);
}

bool Cursor::move(int op, std::string_view key, const char* what) {
  if (txn_alive_ && !*txn_alive_) {
    throw UsageError(
        at_file(env_->path, std::string(what) + " on a cursor whose transaction ended"));
  }
  MDB_val k = to_val(key);
  MDB_val v{};
  int rc = mdb_cursor_get(cursor_, &k, &v, static_cast<MDB_cursor_op>(op));
  if (rc == MDB_NOTFOUND) {
    valid_ = false;
    entry_ = Entry{};
    return false;
  }
  if (rc != MDB_SUCCESS) throw_mdb(rc, *env_, what, &dbi_, key.empty() ? nullptr : &key);
  valid_ = true;
  entry_ = Entry{to_view(k), to_view(v)};
  return true;
}

bool Cursor::first() { return move(MDB_FIRST, {}, "cursor first"); }
bool Cursor::next() { return move(MDB_NEXT, {}, "cursor next"); }

bool Cursor::seek(std::string_view key) {
  if (key.empty()) return first();
  detail::check_key(*env_, "seek", dbi_, key);
  return move(MDB_SET_RANGE, key, "seek");
}

bool Cursor::find(std::string_view key) {
  detail::check_key(*env_, "find", dbi_, key);
  return move(MDB_SET_KEY, key, "find");
}

// --- Range ---

Range::Range(Cursor cursor, std::string from, std::optional<std::string> to)
    : cursor_(std::move(cursor)), from_(std::move(from)), to_(std::move(to)) {}

bool Range::in_range() const { return cursor_.valid() && (!to_ || cursor_.key() < *to_); }

Range::Iterator Range::begin() {
  cursor_.seek(from_);
  return Iterator(in_range() ? this : nullptr);
}

Range::Iterator& Range::Iterator::operator++() {
  range_->cursor_.next();
  if (!range_->in_range()) range_ = nullptr;
  return *this;
}

// --- BatchWriter ---

BatchWriter::BatchWriter(Env& env, Dbi dbi, BatchOptions options)
    : env_(Access::shared(env)), dbi_(dbi), options_(options) {
  detail::check_dbi(*env_, dbi_);
  if (env_->read_only)
    throw UsageError(at_file(env_->path, "batch writer on a store opened read-only"));
}

void BatchWriter::put(std::string_view key, std::string_view value) {
  detail::check_key(*env_, "put", dbi_, key);
  items_.push_back(Item{data_.size(), key.size(), value.size()});
  data_.append(key);
  data_.append(value);
  if (data_.size() >= options_.max_bytes || items_.size() >= options_.max_puts) flush();
}

void BatchWriter::flush() { flush(nullptr); }

void BatchWriter::flush(const std::function<void(Txn&)>& extra) {
  if (items_.empty() && !extra) return;
  auto apply = [&](Txn& txn) {
    std::string_view data = data_;
    for (const Item& item : items_) {
      txn.put(dbi_, data.substr(item.offset, item.key_size),
              data.substr(item.offset + item.key_size, item.value_size), options_.mode);
    }
    if (extra) extra(txn);
  };
  try {
    detail::run_write(*env_, apply, data_.size());
  } catch (...) {
    data_.clear();
    items_.clear();
    throw;
  }
  committed_ += items_.size();
  data_.clear();
  items_.clear();
}

}  // namespace mltool::io::lmdb
