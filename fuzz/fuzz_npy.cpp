// libFuzzer target: arbitrary bytes as a whole .npy file. The parser must either
// accept them or throw mltool::Error -- never crash, hang, read out of bounds or
// allocate in proportion to a declared shape. Accepted headers must survive a
// format -> parse round trip.
//
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -Ilib/include \
//     fuzz/fuzz_npy.cpp lib/io/npy.cpp lib/util/error.cpp lib/util/file.cpp -o fuzz_npy
//   ./fuzz_npy -max_total_time=60 corpus/
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mltool/io/npy.hpp"
#include "mltool/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mltool::io::NpyHeader header;
  try {
    header = mltool::io::parse_npy_header(data, size, "fuzz.npy");
  } catch (const mltool::Error&) {
    return 0;
  }
  // The file held data_bytes bytes, so rebuilding it costs no more than the input.
  if (header.data_offset + header.data_bytes != size) std::abort();
  std::string again = mltool::io::format_npy_header(header.dtype, header.shape);
  again.append(header.data_bytes, '\0');
  const mltool::io::NpyHeader reparsed = mltool::io::parse_npy_header(
      reinterpret_cast<const std::uint8_t*>(again.data()), again.size(), "again.npy");
  if (reparsed.dtype != header.dtype || reparsed.shape != header.shape ||
      reparsed.data_bytes != header.data_bytes)
    std::abort();
  return 0;
}
