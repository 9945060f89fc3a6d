// A matrix as a `.pt` file, the bytes of Python's torch.save(tensor): what CLAM's
// pt_files/<slide>.pt hold and what torch.load (weights_only included) reads back. The
// LibTorch half of the library (mltool_torch); `mltool export h5 --format pt` reaches it
// through the LibTorch module.
#pragma once

#include <cstdint>
#include <string>

#include "mltool/io/npy.hpp"

namespace mltool::io {

/// The .pt bytes of the rows x dims matrix at `data` (row-major, `dtype` float32 or float16).
std::string encode_pt_tensor(const void* data, std::uint64_t rows, std::uint64_t dims, DType dtype);

}  // namespace mltool::io
