// TFRecord write and read throughput on a real file system (a fresh directory under
// /tmp). Writes include commit(): fsync of the records and the index and the renames,
// as a job pays them. Reads map the (page-cached) file and verify both CRCs of every
// frame, or only the length CRC. Times are wall-clock, since fsync blocks without CPU.
// Run: bench_tfrecord --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "mltool/io/tfrecord.hpp"

namespace {

// Bytes of record data per written or read file: enough to amortise the fsync and map.
constexpr std::size_t kFileBytes = 64u << 20;

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = "/tmp/mltool_bench_tfrecord.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

ScratchDir& scratch() {
  static ScratchDir dir;
  return dir;
}

std::string random_record(std::size_t n) {
  std::mt19937_64 rng(n);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::size_t records_per_file(std::size_t record_size) { return kFileBytes / record_size; }

void write_file(const std::string& path, std::size_t record_size) {
  const std::string record = random_record(record_size);
  mltool::io::TFRecordWriter writer(path);
  for (std::size_t i = records_per_file(record_size); i-- > 0;) writer.write(record);
  writer.commit();
}

void BM_TFRecordWrite(benchmark::State& state) {
  const auto record_size = static_cast<std::size_t>(state.range(0));
  const std::string path = scratch().path() + "/write.tfrecord";
  for (auto _ : state) write_file(path, record_size);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(records_per_file(record_size) * record_size));
  state.counters["records/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * records_per_file(record_size)),
                         benchmark::Counter::kIsRate);
}

// The ceiling for writes: the same bytes (records plus their 16-byte framing) through plain
// write(2) in 1 MiB chunks, fsync and rename, no CRC and no index. TFRecordWrite / RawWrite
// is how close record writing comes to being bound by the disk rather than by the code.
void BM_RawWrite(benchmark::State& state) {
  const auto record_size = static_cast<std::size_t>(state.range(0));
  const std::size_t total = records_per_file(record_size) * (record_size + 16);
  const std::string chunk = random_record(1 << 20);
  const std::string path = scratch().path() + "/raw.bin";
  for (auto _ : state) {
    const std::string temp = path + ".tmp";
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (std::size_t left = total; left > 0;) {
      const std::size_t n = std::min(left, chunk.size());
      if (::write(fd, chunk.data(), n) != static_cast<ssize_t>(n))
        state.SkipWithError("write failed");
      left -= n;
    }
    ::fsync(fd);
    ::close(fd);
    ::rename(temp.c_str(), path.c_str());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(records_per_file(record_size) * record_size));
}

void BM_TFRecordRead(benchmark::State& state) {
  const auto record_size = static_cast<std::size_t>(state.range(0));
  const bool verify_data = state.range(1) != 0;
  const std::string path = scratch().path() + "/read-" + std::to_string(record_size) + ".tfrecord";
  static std::map<std::string, bool> written;
  if (!written[path]) {
    write_file(path, record_size);
    written[path] = true;
  }
  std::size_t bytes = 0;
  for (auto _ : state) {
    mltool::io::TFRecordReader reader(path, mltool::io::TFRecordReadOptions{verify_data});
    std::string_view record;
    while (reader.next(record)) {
      bytes += record.size();
      benchmark::DoNotOptimize(record.data());
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["records/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * records_per_file(record_size)),
                         benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_TFRecordWrite)
    ->Arg(1 << 10)
    ->Arg(100 << 10)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_RawWrite)->Arg(1 << 10)->Arg(100 << 10)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TFRecordRead)
    ->ArgNames({"record", "verify_data"})
    ->Args({1 << 10, 1})
    ->Args({100 << 10, 1})
    ->Args({1 << 10, 0})
    ->Args({100 << 10, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
