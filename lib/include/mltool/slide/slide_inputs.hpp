// The check phase of a run over slides (tile, extract SLIDE...): what can be checked of the
// slides without reading them, before the store is locked and --overwrite empties it
// (docs/cli.md#overwrite).
#pragma once

#include <string>
#include <vector>

#include "mltool/slide/cohort.hpp"

namespace mltool::slide {

/// Each local slide of `slides` is there (util::require_input) and each URL is a series URL;
/// where a URL is given, the DICOMweb client can be made, which reads --dicomweb-token-file
/// (no request is sent). Under job.keep_going without job.overwrite a missing slide or a bad
/// URL is left to fail alone (reported and skipped), as any unreadable slide is. InputError
/// (exit 2) or UsageError (exit 1) naming the first bad one.
void check_slides(const std::vector<std::string>& slides, const CohortJob& job);

}  // namespace mltool::slide
