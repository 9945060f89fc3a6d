// The math library's settings that decide whether a CPU result is reproducible, applied to
// the process environment before LibTorch (and the MKL inside it) is loaded.
#pragma once

#include "mltool/util/options.hpp"

namespace mltool::util {

/// --math-threads, declared once for the jobs whose CPU results depend on it (extract, train).
template <class Job>
Option<Job> math_threads_option(int Job::*member) {
  return option("--math-threads", member,
                "LibTorch's math threads on the CPU, on which the result's bits depend; 0: a "
                "resumed run's, else OMP_NUM_THREADS or the cores")
      .at_least(0);
}

/// Sets, unless the user set them already:
/// - MKL_CBWR=AUTO: MKL's conditional numerical reproducibility on the CPU's own code path.
///   Without it a threaded MKL routine may schedule its work dynamically, so under load the
///   same product can be summed in another order (a train run that differed in the 7th digit
///   once in 25); with it, results are the same run to run for the same math thread count.
/// - MKL_DYNAMIC=FALSE: MKL uses the math threads it is given, never fewer.
/// Must run before the first MKL call of the process (the program calls it before it loads
/// its LibTorch module). Other math code paths (another CPU, MKL_CBWR=COMPATIBLE,
/// ONEDNN_MAX_CPU_ISA) give other bits; docs/extract.md and docs/train.md say what holds.
void set_reproducible_math_env();

}  // namespace mltool::util
