// libFuzzer target: arbitrary bytes as a DICOM file (tile --passthrough's reader of DICOM WSI
// instances). The reader must either accept them or throw mltool::Error -- never crash, hang,
// read out of bounds or allocate in proportion to a declared length; what it accepts must
// hold together: every fragment inside the file, frames grouping fragments in order.
//
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -Ilib/include \
//     fuzz/fuzz_dicom.cpp lib/io/dicom.cpp lib/util/error.cpp -o fuzz_dicom
//   ./fuzz_dicom -max_total_time=60 corpus/
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "mltool/io/dicom.hpp"
#include "mltool/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The reader reads files (with pread): one per process, rewritten for each input.
  static const std::string path = "/tmp/fuzz_dicom." + std::to_string(::getpid()) + ".dcm";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) std::abort();
  try {
    const mltool::io::DicomHeader h = mltool::io::read_dicom_header(path);
    if (h.pixel_data > size) std::abort();
    if (!h.encapsulated) return 0;
    const mltool::io::DicomFrames frames = mltool::io::read_dicom_frames(h);
    if (frames.count() != static_cast<std::size_t>(h.frames)) std::abort();
    for (std::size_t k = 0; k < frames.offset.size(); ++k)
      if (frames.offset[k] > size || frames.length[k] > size - frames.offset[k]) std::abort();
    for (std::size_t i = 0; i + 1 < frames.first.size(); ++i)
      if (frames.first[i] > frames.first[i + 1] || frames.first[i + 1] > frames.offset.size())
        std::abort();
  } catch (const mltool::Error&) {
  }
  return 0;
}
