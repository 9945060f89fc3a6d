// CRC-32C throughput: the SSE4.2 path (three interleaved streams) against the portable
// slicing-by-8 tables, at the sizes TFRecord uses (8-byte lengths, small records, large
// records). Run: bench_crc32c --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "mltool/io/crc32c.hpp"

namespace {

std::vector<std::uint8_t> random_buffer(std::size_t n) {
  std::mt19937 rng(42);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

template <std::uint32_t (*Crc)(std::uint32_t, const void*, std::size_t)>
void run(benchmark::State& state) {
  const auto data = random_buffer(static_cast<std::size_t>(state.range(0)));
  std::uint32_t crc = 0;
  for (auto _ : state) {
    crc = Crc(crc, data.data(), data.size());
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_Crc32cHardware(benchmark::State& state) {
  if (!mltool::io::crc32c_hardware_available()) {
    state.SkipWithError("this CPU has no SSE4.2 crc32 instruction");
    return;
  }
  run<&mltool::io::crc32c_hardware>(state);
}

void BM_Crc32cPortable(benchmark::State& state) { run<&mltool::io::crc32c_portable>(state); }

void BM_Crc32cDispatch(benchmark::State& state) { run<&mltool::io::crc32c_extend>(state); }

}  // namespace

BENCHMARK(BM_Crc32cHardware)->Arg(8)->Arg(64)->Arg(4 << 10)->Arg(1 << 20);
BENCHMARK(BM_Crc32cPortable)->Arg(8)->Arg(64)->Arg(4 << 10)->Arg(1 << 20);
BENCHMARK(BM_Crc32cDispatch)->Arg(4 << 10);

BENCHMARK_MAIN();
