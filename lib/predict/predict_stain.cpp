// --stain-norm of a pixel model's prediction: by default the run's own (run.json's
// stain_norm: its method, fitted on its reference file, which must still have the recorded
// SHA-256); --stain-reference points at a copy of that file elsewhere; --stain-norm METHOD
// with --stain-reference FILE normalises to another reference on purpose (a warning).
// docs/predict.md#stain-normalisation.
#include "mltool/features/stain.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "predict_parts.hpp"

namespace mltool::predict {
namespace {

using json = nlohmann::json;
using features::StainNorm;
using features::StainNormalizer;

std::string described(const json& s) {
  return s.at("method").get<std::string>() + " on " + s.at("reference").get<std::string>() +
         " (sha256 " + s.at("sha256").get<std::string>() + ")";
}

// The run's normalisation again: its method, on its reference or the copy --stain-reference
// names, which must have the recorded SHA-256.
std::shared_ptr<const StainNormalizer> runs_own(const json& recorded, const PredictJob& job) {
  const std::string file = job.stain_reference.empty() ? recorded.at("reference").get<std::string>()
                                                       : job.stain_reference;
  if (!util::exists(file))
    throw InputError(at_file(file, "the stain reference the run was trained with (" +
                                       described(recorded) +
                                       ") does not exist; name a copy of it with "
                                       "--stain-reference"));
  auto stain = std::make_shared<const StainNormalizer>(StainNormalizer::from_file(
      util::parse_enum(features::kStainNorms, recorded.at("method").get<std::string>(),
                       "run.json's stain_norm.method"),
      file));
  if (stain->sha256() != recorded.at("sha256").get<std::string>())
    throw UsageError(at_file(
        file, "sha256 " + stain->sha256() + " is not the stain reference the run was trained " +
                  "with (" + described(recorded) +
                  "); pass that file with --stain-reference, or normalise to this one on "
                  "purpose with --stain-norm METHOD --stain-reference " +
                  file));
  return stain;
}

}  // namespace

std::shared_ptr<const StainNormalizer> predict_stain(const json& run, const PredictJob& job,
                                                     json& record) {
  const bool pixels = run.at("dataset").value("unit", "tile") == "image";
  const json recorded = run.value("stain_norm", json());
  const std::string run_json = job.run + "/run.json";
  if (!pixels && (job.stain_norm != StainNorm::none || !job.stain_reference.empty()))
    throw UsageError(at_file(run_json,
                             "--stain-norm and --stain-reference apply to pixel "
                             "models (runs trained on image datasets); this run's "
                             "model reads features"));
  std::shared_ptr<const StainNormalizer> stain;
  if (job.stain_norm != StainNorm::none) {
    stain = std::make_shared<const StainNormalizer>(
        StainNormalizer::from_file(job.stain_norm, job.stain_reference));
    if (recorded.is_null())
      log::warn("--stain-norm: " + run_json + " was trained on tiles as they are, not normalised");
    else if (stain->sha256() != recorded.at("sha256") ||
             util::name_of(features::kStainNorms, job.stain_norm) != recorded.at("method"))
      log::warn("--stain-norm: normalising to " + job.stain_reference + ", not to the run's " +
                described(recorded));
  } else if (!recorded.is_null()) {
    stain = runs_own(recorded, job);
  } else if (!job.stain_reference.empty()) {
    throw UsageError(at_file(run_json,
                             "was trained without stain normalisation; "
                             "--stain-reference needs --stain-norm macenko or "
                             "reinhard to normalise anyway"));
  }
  record = stain ? stain->record() : json();
  if (stain)
    log::info("stain normalisation: " + record.at("method").get<std::string>() + " (sha256 " +
              stain->sha256() + ")");
  return stain;
}

}  // namespace mltool::predict
