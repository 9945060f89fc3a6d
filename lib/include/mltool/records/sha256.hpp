// SHA-256 lives in io/ (mltool/io/sha256.hpp) since features/ needs it too (extract's
// --stain-reference); records' callers keep their names.
#pragma once

#include "mltool/io/sha256.hpp"

namespace mltool::records {
using io::Sha256;
using io::sha256_hex;
}  // namespace mltool::records
