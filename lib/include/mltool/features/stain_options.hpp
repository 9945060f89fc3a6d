// --stain-norm and --stain-reference of the commands that normalise tiles (extract, and train and
// predict of pixel models), declared once as common_options.hpp declares the options several
// commands share: a command's table names the members it binds. No LibTorch here.
#pragma once

#include <string>

#include "mltool/features/stain_norm.hpp"
#include "mltool/util/options.hpp"

namespace mltool::features {

/// --stain-norm macenko|reinhard|none; needs --stain-reference (`reference`) unless none.
template <class Job>
util::Option<Job> stain_norm_option(StainNorm Job::*member, std::string Job::*reference) {
  return util::choice("--stain-norm", member, kStainNorms,
                      "Stain normalisation of each tile before the model's preprocessing (extract; "
                      "train and predict of pixel models), as torchstain computes it: macenko or "
                      "reinhard, fitted on --stain-reference; tiles with too little stain pass "
                      "through unchanged. none: extract and train normalise nothing, predict "
                      "applies the run's own (docs/stain.md)")
      .check([member, reference](
                 const Job& j) { return j.*member == StainNorm::none || !(j.*reference).empty(); },
             "given with --stain-reference");
}

/// --stain-reference IMAGE: the target stain --stain-norm fits on.
template <class Job>
util::Option<Job> stain_reference_option(std::string Job::*member) {
  return util::option("--stain-reference", member,
                      "The image (PNG, JPEG or TIFF) of the target stain that --stain-norm fits "
                      "on; its SHA-256 and the fitted target are recorded in features.json "
                      "(extract) or run.json (train)");
}

}  // namespace mltool::features
