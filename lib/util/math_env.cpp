#include "mltool/util/math_env.hpp"

#include <cstdlib>

namespace mltool::util {

void set_reproducible_math_env() {
  ::setenv("MKL_CBWR", "AUTO", /*overwrite=*/0);
  ::setenv("MKL_DYNAMIC", "FALSE", /*overwrite=*/0);
}

}  // namespace mltool::util
