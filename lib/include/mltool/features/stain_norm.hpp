// The stain normalisations (--stain-norm), in a header of their own so that the jobs that
// name one (extract, train, predict) need not include the extract pipeline for an enum. The
// normaliser itself is features/stain.hpp (LibTorch); the options are stain_options.hpp.
#pragma once

#include "mltool/util/options.hpp"

namespace mltool::features {

/// Stain normalisation of the decoded tiles (features/stain.hpp).
enum class StainNorm { none, macenko, reinhard };
/// Their option names: none, macenko, reinhard (defined in extract_options.cpp).
extern const util::EnumNames<StainNorm> kStainNorms;

}  // namespace mltool::features
