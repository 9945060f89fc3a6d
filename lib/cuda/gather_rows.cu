// Row gather for the pinned feed: one thread block per output row, threads copy the row
// in 16-byte words when every row is 16-byte aligned (feature rows of D×4 bytes usually
// are), 4-byte words or bytes otherwise. Bandwidth-bound, so the word width is what matters.
#include <cuda_runtime.h>

#include <cstdint>

#include "mltool/cuda/gather_rows.hpp"

namespace mltool::cuda {
namespace {

template <typename Word>
__global__ void gather_rows_kernel(const Word* __restrict__ src,
                                   const std::int64_t* __restrict__ index, Word* __restrict__ dst,
                                   std::int64_t n, std::int64_t row_words) {
  for (std::int64_t row = blockIdx.x; row < n; row += gridDim.x) {
    const Word* from = src + index[row] * row_words;
    Word* to = dst + row * row_words;
    for (std::int64_t w = threadIdx.x; w < row_words; w += blockDim.x) to[w] = from[w];
  }
}

template <typename Word>
cudaError_t launch(const void* src, const std::int64_t* index, void* dst, std::int64_t n,
                   std::int64_t row_bytes, cudaStream_t stream) {
  const std::int64_t row_words = row_bytes / static_cast<std::int64_t>(sizeof(Word));
  int threads = 32;
  while (threads < 256 && threads < row_words) threads *= 2;
  const std::int64_t blocks = n < 65535 * 8 ? n : 65535 * 8;
  gather_rows_kernel<Word><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      static_cast<const Word*>(src), index, static_cast<Word*>(dst), n, row_words);
  return cudaGetLastError();
}

bool aligned(const void* p, std::int64_t row_bytes, std::size_t word) {
  return reinterpret_cast<std::uintptr_t>(p) % word == 0 &&
         row_bytes % static_cast<std::int64_t>(word) == 0;
}

}  // namespace

int launch_gather_rows(const void* src, const std::int64_t* index, void* dst, std::int64_t n,
                       std::int64_t row_bytes, void* stream) {
  if (n == 0 || row_bytes == 0) return cudaSuccess;
  auto s = static_cast<cudaStream_t>(stream);
  if (aligned(src, row_bytes, 16) && aligned(dst, row_bytes, 16))
    return launch<uint4>(src, index, dst, n, row_bytes, s);
  if (aligned(src, row_bytes, 4) && aligned(dst, row_bytes, 4))
    return launch<std::uint32_t>(src, index, dst, n, row_bytes, s);
  return launch<unsigned char>(src, index, dst, n, row_bytes, s);
}

}  // namespace mltool::cuda
