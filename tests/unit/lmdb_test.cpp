// Tests of mltool::io::lmdb: round trips, named databases, atomicity, map growth (in this
// process and by another one), concurrent readers, and the wording of errors.
#include "mltool/io/lmdb.hpp"

#include <gtest/gtest.h>
#include <lmdb.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "support/errors.hpp"
#include "support/temp_dir.hpp"

namespace lmdb = mltool::io::lmdb;
using mltool::Error;
using mltool::FormatError;
using mltool::InputError;
using mltool::UsageError;
using mltool::testing::contains;
using mltool::testing::error_of;

namespace {

class LmdbTest : public ::testing::Test {
 protected:
  mltool::testing::TempDir tmp_;
  std::string root_ = tmp_.path();
  std::string store_ = tmp_ / "tiles.lmdb";
};

std::string key_of(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "slide-%d/%06d", i % 7, i);
  return buf;
}

// A value whose bytes depend on the key index, so readers can verify what they got.
std::string value_of(int i, std::size_t size) {
  std::string v(size, '\0');
  for (std::size_t j = 0; j < size; ++j) v[j] = static_cast<char>((i * 131 + j * 7) & 0xff);
  return v;
}

TEST_F(LmdbTest, RoundTripAndPrefixIteration) {
  lmdb::Env env = lmdb::Env::open(store_);
  lmdb::Dbi db = env.main_db();
  env.write([&](lmdb::Txn& txn) {
    for (int i = 0; i < 70; ++i) txn.put(db, key_of(i), value_of(i, 100));
    txn.put(db, std::string("\xff\xff", 2), "high");
    txn.put(db, std::string("a\xff", 2), "a-ff");
    txn.put(db, "b", "b");
  });
  lmdb::Txn txn = env.begin_read();
  EXPECT_EQ(txn.get(db, key_of(5)).value(), value_of(5, 100));
  EXPECT_FALSE(txn.get(db, "slide-9/none").has_value());
  EXPECT_EQ(txn.stat(db).entries, 73u);

  std::vector<std::string> keys;
  for (const lmdb::Entry& e : txn.prefix(db, "slide-3/")) keys.emplace_back(e.key);
  ASSERT_EQ(keys.size(), 10u);
  EXPECT_EQ(keys.front(), key_of(3));
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));

  int n = 0;
  for (const auto& [k, v] : txn.prefix(db, "")) n += !k.empty() && !v.empty();
  EXPECT_EQ(n, 73);
  std::vector<std::string> ff;
  for (const auto& e : txn.prefix(db, "a\xff")) ff.emplace_back(e.value);
  EXPECT_EQ(ff, std::vector<std::string>{"a-ff"});
  ff.clear();
  for (const auto& e : txn.prefix(db, "\xff")) ff.emplace_back(e.value);
  EXPECT_EQ(ff, std::vector<std::string>{"high"});
  ff.clear();
  for (const auto& e : txn.range(db, "a", "slide-0/000000")) ff.emplace_back(e.key);
  EXPECT_EQ(ff, (std::vector<std::string>{"a\xff", "b"}));

  lmdb::Cursor c = txn.cursor(db);
  ASSERT_TRUE(c.seek("slide-6/"));
  EXPECT_EQ(c.key(), key_of(6));
  ASSERT_TRUE(c.next());
  EXPECT_EQ(c.key(), key_of(13));
  EXPECT_TRUE(c.find("b"));
  EXPECT_FALSE(c.find("bb"));
  EXPECT_FALSE(c.seek("\xff\xff\xff"));
  txn.abort();

  env.write([&](lmdb::Txn& w) {
    EXPECT_TRUE(w.del(db, "b"));
    EXPECT_FALSE(w.del(db, "b"));
  });
  EXPECT_EQ(env.entries(db), 72u);
}

TEST_F(LmdbTest, NamedDatabaseIsSeparateAndPersists) {
  {
    lmdb::Env env = lmdb::Env::open(store_);
    lmdb::Dbi meta = env.db("meta");
    EXPECT_EQ(meta.name(), "meta");
    env.write([&](lmdb::Txn& txn) {
      txn.put(env.main_db(), "slide-1/000001", "tile");
      txn.put(meta, "slide-1", "done");
    });
    lmdb::Txn txn = env.begin_read();
    EXPECT_FALSE(txn.get(meta, "slide-1/000001").has_value());
    EXPECT_EQ(txn.at(meta, "slide-1"), "done");
    // LMDB keeps the named database's record in the main database.
    EXPECT_EQ(txn.stat(env.main_db()).entries, 2u);
  }
  lmdb::EnvOptions ro;
  ro.read_only = true;
  lmdb::Env env = lmdb::Env::open(store_, ro);
  lmdb::Dbi meta = env.db("meta");
  EXPECT_EQ(env.begin_read().at(meta, "slide-1"), "done");
  std::string m = error_of<InputError>([&] { env.db("nope"); });
  EXPECT_TRUE(contains(m, store_)) << m;
  EXPECT_TRUE(contains(m, "'nope' does not exist")) << m;
  EXPECT_TRUE(contains(error_of<UsageError>([&] { env.begin_write(); }), "read-only"));
}

TEST_F(LmdbTest, TooManyNamedDatabases) {
  lmdb::EnvOptions o;
  o.max_dbs = 1;
  lmdb::Env env = lmdb::Env::open(store_, o);
  env.db("meta");
  std::string m = error_of<Error>([&] { env.db("second"); });
  EXPECT_TRUE(contains(m, "MDB_DBS_FULL")) << m;
  EXPECT_TRUE(contains(m, "max_dbs")) << m;
}

TEST_F(LmdbTest, AbortedWritesLeaveNothing) {
  lmdb::Env env = lmdb::Env::open(store_);
  lmdb::Dbi db = env.main_db();
  lmdb::Dbi meta = env.db("meta");
  {
    lmdb::Txn txn = env.begin_write();
    txn.put(db, "a", "1");
  }  // destroyed without commit
  {
    lmdb::Txn txn = env.begin_write();
    txn.put(db, "b", "1");
    txn.abort();
  }
  EXPECT_THROW(env.write([&](lmdb::Txn& txn) {
    txn.put(db, "c", "1");
    throw std::runtime_error("stop");
  }),
               std::runtime_error);
  {
    lmdb::BatchWriter batch(env, db);
    batch.put("d", "1");
  }  // dropped without flush
  lmdb::BatchWriter batch(env, db);
  batch.put("e", "1");
  batch.put("f", "1");
  EXPECT_THROW(batch.flush([&](lmdb::Txn& txn) {
    txn.put(meta, "slide-1", "done");
    throw std::runtime_error("marker failed");
  }),
               std::runtime_error);
  EXPECT_EQ(batch.pending_puts(), 0u);
  EXPECT_EQ(env.entries(db), 1u);  // only the record of 'meta'
  EXPECT_EQ(env.entries(meta), 0u);

  batch.put("e", "1");
  batch.put("f", "1");
  batch.flush([&](lmdb::Txn& txn) { txn.put(meta, "slide-1", "done"); });
  EXPECT_EQ(batch.committed_puts(), 2u);
  EXPECT_EQ(env.entries(db), 3u);
  EXPECT_EQ(env.entries(meta), 1u);
}

TEST_F(LmdbTest, MapGrowsFromTinyStart) {
  lmdb::EnvOptions o;
  o.map_size = 64 << 10;
  constexpr int kCount = 1500;
  constexpr std::size_t kSize = 20000;  // 30 MB in all
  {
    lmdb::Env env = lmdb::Env::open(store_, o);
    EXPECT_EQ(env.map_size(), 64u << 10);
    lmdb::Dbi db = env.main_db();
    lmdb::Dbi meta = env.db("meta");
    // One transaction far larger than the map: replayed after each doubling.
    env.write([&](lmdb::Txn& txn) {
      for (int i = 0; i < 200; ++i) txn.put(db, key_of(i), value_of(i, kSize));
    });
    lmdb::BatchOptions bo;
    bo.max_bytes = 4 << 20;
    lmdb::BatchWriter batch(env, db, bo);
    for (int i = 200; i < kCount; ++i) batch.put(key_of(i), value_of(i, kSize));
    EXPECT_GT(batch.committed_puts(), 0u);  // thresholds flushed along the way
    batch.flush([&](lmdb::Txn& txn) { txn.put(meta, "all", "done"); });
    EXPECT_EQ(env.entries(db), kCount + 1u);
    EXPECT_GE(env.map_size(), std::uint64_t{kCount} * kSize);
    EXPECT_LE(env.info().used_bytes, env.map_size());
  }
  lmdb::EnvOptions ro;
  ro.read_only = true;
  lmdb::Env env = lmdb::Env::open(store_, ro);
  lmdb::Txn early = env.begin_read();
  lmdb::Dbi meta = env.db("meta");
  std::string m = error_of<mltool::Error>([&] { early.get(meta, "all"); });
  EXPECT_TRUE(contains(m, "opened after this transaction began")) << m;
  early.abort();
  lmdb::Txn txn = env.begin_read();
  for (int i = 0; i < kCount; i += 97)
    EXPECT_EQ(txn.at(env.main_db(), key_of(i)), value_of(i, kSize));
  EXPECT_EQ(txn.at(meta, "all"), "done");
}

TEST_F(LmdbTest, ConcurrentReadersEachWithTheirOwnTxn) {
  lmdb::Env env = lmdb::Env::open(store_);
  lmdb::Dbi db = env.main_db();
  constexpr int kCount = 2000;
  lmdb::BatchWriter batch(env, db);
  for (int i = 0; i < kCount; ++i) batch.put(key_of(i), value_of(i, 1000 + i % 3000));
  batch.flush();

  std::atomic<int> checked{0};
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  lmdb::Txn shared_start = env.begin_read();  // a txn begun here and ended on another thread
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      lmdb::Txn txn = env.begin_read();
      for (int round = 0; round < 3; ++round) {
        for (int j = 0; j < kCount; ++j) {
          int i = (j + t * 331) % kCount;
          auto v = txn.get(db, key_of(i));
          if (!v || *v != value_of(i, 1000 + i % 3000)) ++bad;
          ++checked;
        }
      }
    });
  }
  threads.emplace_back([&, txn = std::move(shared_start)]() mutable {
    int n = 0;
    for (const auto& e : txn.prefix(db, "slide-")) n += !e.value.empty();
    if (n != kCount) ++bad;
    txn.abort();
  });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(checked.load(), 6 * 3 * kCount);
}

TEST_F(LmdbTest, ReadersKeepWorkingWhileTheMapGrows) {
  lmdb::EnvOptions o;
  o.map_size = 64 << 10;
  lmdb::Env env = lmdb::Env::open(store_, o);
  lmdb::Dbi db = env.main_db();
  env.write([&](lmdb::Txn& txn) { txn.put(db, key_of(0), value_of(0, 5000)); });
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::atomic<long> reads{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      while (!done) {
        lmdb::Txn txn = env.begin_read();
        for (const auto& e : txn.prefix(db, "slide-")) {
          int i = std::stoi(std::string(e.key.substr(e.key.find('/') + 1)));
          if (e.value != value_of(i, 5000)) ++bad;
          ++reads;
        }
      }
    });
  }
  lmdb::BatchOptions bo;
  bo.max_puts = 300;
  lmdb::BatchWriter batch(env, db, bo);
  for (int i = 1; i < 3000; ++i) batch.put(key_of(i), value_of(i, 5000));
  batch.flush();
  done = true;
  for (auto& th : readers) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_GT(env.map_size(), 3000u * 5000u);
}

TEST_F(LmdbTest, AdoptsMapGrownByAnotherProcess) {
  lmdb::EnvOptions o;
  o.map_size = 64 << 10;
  lmdb::Env env = lmdb::Env::open(store_, o);
  lmdb::Dbi db = env.main_db();
  env.write([&](lmdb::Txn& txn) { txn.put(db, "first", "1"); });

  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child writes through the plain C API with a larger map, as another tool would.
    MDB_env* e = nullptr;
    MDB_txn* t = nullptr;
    MDB_dbi d = 0;
    bool ok = mdb_env_create(&e) == 0 && mdb_env_set_mapsize(e, 64 << 20) == 0 &&
              mdb_env_open(e, store_.c_str(), 0, 0664) == 0 &&
              mdb_txn_begin(e, nullptr, 0, &t) == 0 && mdb_dbi_open(t, nullptr, 0, &d) == 0;
    std::string value = value_of(1, 1 << 20);
    for (int i = 0; ok && i < 8; ++i) {
      std::string k = key_of(i);
      MDB_val mk{k.size(), k.data()};
      MDB_val mv{value.size(), value.data()};
      ok = mdb_put(t, d, &mk, &mv, 0) == 0;
    }
    ok = ok && mdb_txn_commit(t) == 0;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  EXPECT_EQ(env.begin_read().at(db, key_of(7)), value_of(1, 1 << 20));
  EXPECT_GE(env.map_size(), 64u << 20);
  env.write([&](lmdb::Txn& txn) { txn.put(db, "after", "2"); });
  EXPECT_EQ(env.entries(db), 10u);
}

// --- errors ---

TEST_F(LmdbTest, PlainFileIsRejected) {
  std::ofstream(store_) << "not a directory";
  std::string m = error_of<InputError>([&] { lmdb::Env::open(store_); });
  EXPECT_EQ(m, store_ + ": is a plain file, expected an LMDB directory (containing data.mdb)");
}

TEST_F(LmdbTest, MissingPathReadOnlyOrWithoutCreate) {
  lmdb::EnvOptions ro;
  ro.read_only = true;
  std::string m = error_of<InputError>([&] { lmdb::Env::open(store_, ro); });
  EXPECT_EQ(m, store_ + ": does not exist, expected an LMDB directory (containing data.mdb)");
  lmdb::EnvOptions no_create;
  no_create.create = false;
  EXPECT_THROW(lmdb::Env::open(store_, no_create), InputError);
  EXPECT_FALSE(std::filesystem::exists(store_));
}

TEST_F(LmdbTest, DirectoryThatIsNotAnLmdb) {
  std::filesystem::create_directory(store_);
  std::ofstream(store_ + "/notes.txt") << "hello";
  lmdb::EnvOptions ro;
  ro.read_only = true;
  std::string m = error_of<InputError>([&] { lmdb::Env::open(store_, ro); });
  EXPECT_EQ(m, store_ + ": is not an LMDB: the directory has no data.mdb");
  m = error_of<InputError>([&] { lmdb::Env::open(store_); });
  EXPECT_TRUE(contains(m, store_ + ": is not an LMDB")) << m;
  EXPECT_FALSE(std::filesystem::exists(store_ + "/data.mdb"));

  std::ofstream(store_ + "/data.mdb");  // empty
  m = error_of<FormatError>([&] { lmdb::Env::open(store_, ro); });
  EXPECT_EQ(m, store_ + ": is not an LMDB: data.mdb is empty");

  std::ofstream(store_ + "/data.mdb") << std::string(16384, 'x');
  m = error_of<FormatError>([&] { lmdb::Env::open(store_, ro); });
  EXPECT_TRUE(contains(m, store_ + ": is not an LMDB (data.mdb: MDB_INVALID")) << m;
  EXPECT_THROW(lmdb::Env::open(store_), FormatError);
}

TEST_F(LmdbTest, SecondOpenInOneProcessIsRefused) {
  lmdb::Env env = lmdb::Env::open(store_);
  std::string m = error_of<UsageError>([&] { lmdb::Env::open(store_ + "/."); });
  EXPECT_TRUE(contains(m, "already open in this process")) << m;
  lmdb::Env moved = std::move(env);  // moving keeps the registration
  EXPECT_THROW(lmdb::Env::open(store_), UsageError);
}

TEST_F(LmdbTest, KeyErrorsNameThePathAndKey) {
  lmdb::Env env = lmdb::Env::open(store_);
  lmdb::Dbi db = env.main_db();
  lmdb::Dbi meta = env.db("meta");
  std::string long_key(600, 'k');
  std::string m =
      error_of<InputError>([&] { env.write([&](lmdb::Txn& t) { t.put(db, long_key, "v"); }); });
  EXPECT_TRUE(contains(m, store_ + ": put 'kkkk")) << m;
  EXPECT_TRUE(contains(m, "(600 bytes)")) << m;
  EXPECT_TRUE(contains(m, "1 to 511 bytes")) << m;
  lmdb::BatchWriter batch(env, db);
  EXPECT_THROW(batch.put(long_key, "v"), InputError);
  EXPECT_THROW(batch.put("", "v"), InputError);
  EXPECT_THROW(env.begin_read().get(db, long_key), InputError);

  env.write([&](lmdb::Txn& t) { t.put(db, "slide-3/000012_000034", "v"); });
  m = error_of<InputError>([&] {
    env.write([&](lmdb::Txn& t) {
      t.put(db, "slide-3/000012_000034", "w", lmdb::PutMode::no_overwrite);
    });
  });
  EXPECT_TRUE(contains(m, store_ + ": put 'slide-3/000012_000034': MDB_KEYEXIST")) << m;
  m = error_of<InputError>([&] { env.begin_read().at(meta, std::string("bin\0\x01\xfe", 6)); });
  EXPECT_EQ(m, store_ + ": get 'bin\\x00\\x01\\xfe' in 'meta': key not found");
  m = error_of<UsageError>([&] { env.begin_read().put(db, "k", "v"); });
  EXPECT_TRUE(contains(m, "read-only transaction")) << m;
  EXPECT_THROW(env.begin_read().get(lmdb::Dbi(), "k"), UsageError);
}

TEST_F(LmdbTest, AppendModeRejectsKeysOutOfOrder) {
  lmdb::Env env = lmdb::Env::open(store_);
  lmdb::BatchOptions bo;
  bo.mode = lmdb::PutMode::append;
  lmdb::BatchWriter batch(env, env.main_db(), bo);
  batch.put("a", "1");
  batch.put("c", "1");
  batch.flush();
  batch.put("b", "1");
  std::string m = error_of<InputError>([&] { batch.flush(); });
  EXPECT_TRUE(contains(m, "put 'b': MDB_KEYEXIST")) << m;
}

TEST_F(LmdbTest, GrowingWhileThisThreadHoldsATxnIsAnErrorNotAHang) {
  lmdb::Env env = lmdb::Env::open(store_);
  lmdb::Txn reader = env.begin_read();
  std::string m = error_of<UsageError>([&] { env.grow_map(env.map_size() * 2); });
  EXPECT_TRUE(contains(m, "holds a transaction")) << m;
  reader.abort();
  env.grow_map(env.map_size() * 2);
}

TEST_F(LmdbTest, CursorMayOutliveItsCommittedWriteTxn) {
  lmdb::Env env = lmdb::Env::open(store_);
  lmdb::Dbi db = env.main_db();
  lmdb::Txn txn = env.begin_write();
  txn.put(db, "a", "1");
  lmdb::Cursor c = txn.cursor(db);
  EXPECT_TRUE(c.first());
  txn.commit();
  EXPECT_THROW(c.next(), UsageError);
  lmdb::Txn r = env.begin_read();
  lmdb::Cursor rc = r.cursor(db);
  r.abort();
}  // both cursors destroyed after their transactions: no double free

}  // namespace
