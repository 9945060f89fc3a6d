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

// A features.json field's value as a message shows it: a string as it is, anything else as
// JSON, either cut to 60 characters (a fitted stain target is a matrix).
std::string short_text(const json& v) {
  std::string text = v.is_null() ? "(none)" : v.is_string() ? v.get<std::string>() : v.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// The extract options that give features normalised as `model`'s were.
std::string stain_options(const json& model) {
  const std::string method = model.value("stain_norm", std::string("none"));
  if (method == "none") return "without --stain-norm";
  const json ref = model.value("stain_reference", json::object());
  const std::string fit = ref.is_object() ? ref.value("fit", std::string("tile")) : "tile";
  return "with --stain-norm " + method + " --stain-reference (the image of sha256 " +
         (ref.is_object() ? ref.value("sha256", std::string("?")) : std::string("?")) + ")" +
         (fit == "tile" ? "" : " --stain-fit " + fit);
}

}  // namespace

std::string features_stain_text(const json& model) {
  const std::string method =
      model.is_object() ? model.value("stain_norm", std::string("none")) : "none";
  if (method == "none") return "none";
  const json ref = model.value("stain_reference", json::object());
  if (!ref.is_object()) return method;
  return method + " with reference sha256 " + ref.value("sha256", std::string("?")).substr(0, 12) +
         " (--stain-fit " + ref.value("fit", std::string("tile")) + ")";
}

std::string extractor_difference(const json& got, const json& want) {
  const std::string stain_got = features_stain_text(got), stain_want = features_stain_text(want);
  if (stain_got != stain_want)
    return "features normalised with " + stain_got +
           ", but the run was trained on features normalised with " + stain_want +
           ": extract them again " + stain_options(want);
  std::string fields;
  const json none = json::object();
  const json& g = got.is_object() ? got : none;
  const json& w = want.is_object() ? want : none;
  json keys = json::object();
  for (const auto& [k, v] : g.items()) keys[k] = true;
  for (const auto& [k, v] : w.items()) keys[k] = true;
  for (const auto& [k, v] : keys.items()) {
    const json a = g.value(k, json()), b = w.value(k, json());
    if (a != b)
      fields += (fields.empty() ? "" : ", ") + k + " " + short_text(a) +
                " (the run's: " + short_text(b) + ")";
  }
  return "features of another extractor than the run's: " +
         (fields.empty() ? short_text(got) + " (the run's: " + short_text(want) + ")" : fields) +
         "; extract them with the run's extractor (mltool extract --model)";
}

std::shared_ptr<const StainNormalizer> predict_stain(const train::TrainedRun& run,
                                                     const PredictJob& job, json& record) {
  const bool pixels = run.unit() == records::PackUnit::image;
  const json recorded = run.stain_norm();
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
