// Throughput of the LMDB tile store layer: bulk loading tile-sized values through a
// BatchWriter (map growing from a small start, as a fresh `mltool tile` run does), and
// reading them back from several threads at once, each with its own read transaction (as
// `mltool extract` does). Values are incompressible bytes of a typical JPEG tile's size.
//
//   bench_lmdb [--benchmark_filter=...]   (store under $TMPDIR, default /tmp)
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "mltool/io/lmdb.hpp"

namespace lmdb = mltool::io::lmdb;

namespace {

constexpr int kTiles = 2048;
constexpr std::size_t kTileBytes = 32 << 10;  // 64 MiB in all

std::string temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/bench_lmdb_XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

std::string key_of(int i) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "slide-%03d/%06d_%06d", i / 512, (i % 512) / 32, i % 32);
  return buf;
}

const std::string& tile_bytes() {
  static const std::string bytes = [] {
    std::string s(kTileBytes, '\0');
    std::mt19937 rng(42);
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  }();
  return bytes;
}

void BM_BulkPut(benchmark::State& state) {
  const auto mode = static_cast<lmdb::PutMode>(state.range(0));
  const auto initial_map = static_cast<std::uint64_t>(state.range(1)) << 20;
  const std::string& tile = tile_bytes();
  for (auto _ : state) {
    state.PauseTiming();
    std::string dir = temp_dir();
    state.ResumeTiming();
    {
      lmdb::EnvOptions options;
      options.map_size = initial_map;
      lmdb::Env env = lmdb::Env::open(dir + "/tiles.lmdb", options);
      lmdb::BatchOptions batch_options;
      batch_options.mode = mode;
      lmdb::BatchWriter batch(env, env.main_db(), batch_options);
      for (int i = 0; i < kTiles; ++i) batch.put(key_of(i), tile);
      batch.flush();
    }
    state.PauseTiming();
    std::filesystem::remove_all(dir);
    state.ResumeTiming();
  }
  state.SetBytesProcessed(state.iterations() * kTiles * static_cast<std::int64_t>(kTileBytes));
  state.SetItemsProcessed(state.iterations() * kTiles);
}
// Args: put mode (0 overwrite, 2 append), initial map MiB (1: grows during the load).
BENCHMARK(BM_BulkPut)
    ->Args({static_cast<int>(lmdb::PutMode::overwrite), 1})
    ->Args({static_cast<int>(lmdb::PutMode::overwrite), 1024})
    ->Args({static_cast<int>(lmdb::PutMode::append), 1})
    ->Args({static_cast<int>(lmdb::PutMode::append), 1024})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One store shared by all reader benchmarks, written once.
struct ReadStore {
  std::string dir = temp_dir();
  lmdb::Env env = [this] {
    lmdb::Env e = lmdb::Env::open(dir + "/tiles.lmdb");
    lmdb::BatchWriter batch(e, e.main_db());
    for (int i = 0; i < kTiles; ++i) batch.put(key_of(i), tile_bytes());
    batch.flush();
    return e;
  }();
  ~ReadStore() {
    env = lmdb::Env::open(dir + "/other.lmdb");  // closes the store before removing it
    std::filesystem::remove_all(dir);
  }
};

ReadStore& read_store() {
  static ReadStore store;
  return store;
}

// Random gets, each copied out (as a decoder's input would be), 64 per read transaction.
void BM_ParallelRead(benchmark::State& state) {
  ReadStore& store = read_store();
  lmdb::Dbi db = store.env.main_db();
  std::vector<std::string> keys;
  for (int i = 0; i < kTiles; ++i) keys.push_back(key_of(i));
  std::mt19937 rng(static_cast<unsigned>(state.thread_index()));
  std::vector<char> buffer(kTileBytes);
  std::int64_t bytes = 0;
  for (auto _ : state) {
    lmdb::Txn txn = store.env.begin_read();
    for (int j = 0; j < 64; ++j) {
      std::string_view v = txn.at(db, keys[rng() % kTiles]);
      std::memcpy(buffer.data(), v.data(), v.size());
      bytes += static_cast<std::int64_t>(v.size());
    }
    benchmark::DoNotOptimize(buffer.data());
  }
  state.SetBytesProcessed(bytes);
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_ParallelRead)->ThreadRange(1, 8)->UseRealTime();

// A sequential scan of one slide's tiles with a prefix range, each copied out.
void BM_PrefixScan(benchmark::State& state) {
  ReadStore& store = read_store();
  lmdb::Dbi db = store.env.main_db();
  std::vector<char> buffer(kTileBytes);
  std::int64_t bytes = 0;
  for (auto _ : state) {
    lmdb::Txn txn = store.env.begin_read();
    for (const lmdb::Entry& e : txn.prefix(db, "slide-001/")) {
      std::memcpy(buffer.data(), e.value.data(), e.value.size());
      bytes += static_cast<std::int64_t>(e.value.size());
    }
    benchmark::DoNotOptimize(buffer.data());
  }
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_PrefixScan);

}  // namespace

BENCHMARK_MAIN();
