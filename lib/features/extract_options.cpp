// The options of `mltool extract`, declared once: apps/cmd_extract.cpp binds this table to
// the command line, extract_features checks a job against it, and a resume refusal names the
// option of a fingerprint field from it. docs/extract.md's synopsis is checked against it
// (tests/cli/options_docs_test.py).
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "mltool/features/extract.hpp"
#include "mltool/features/stain_options.hpp"
#include "mltool/util/common_options.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/math_env.hpp"
#include "mltool/util/shard.hpp"

namespace mltool::features {

namespace {

using Triple = std::array<float, 3>;

Triple parse_triple(const std::string& text, const std::string& option) {
  Triple out{};
  std::istringstream in(text);
  char comma = 0;
  if (!(in >> out[0] >> comma) || comma != ',' || !(in >> out[1] >> comma) || comma != ',' ||
      !(in >> out[2]) || !in.eof())
    throw UsageError(option + " takes three numbers R,G,B, not '" + text + "'");
  return out;
}

// --mean and --std: three numbers R,G,B.
util::Option<ExtractJob> triple(const char* name, Triple ExtractJob::*member, const char* help) {
  return util::custom<ExtractJob>(
      name, "R,G,B", help,
      [member, name](ExtractJob& j, const std::string& text) {
        j.*member = parse_triple(text, name);
      },
      [member](const ExtractJob& j) { return nlohmann::json(rgb_text(j.*member)); });
}

// An option an encoder card also sets: its parser notes that it was given (ExtractJob::given).
util::Option<ExtractJob> noted(util::Option<ExtractJob> o) {
  o.parse = [parse = o.parse, key = o.key()](ExtractJob& j, const std::string& text) {
    parse(j, text);
    j.given.insert(key);
  };
  return o;
}

}  // namespace

const util::EnumNames<StainNorm> kStainNorms = {
    {StainNorm::none, "none"}, {StainNorm::macenko, "macenko"}, {StainNorm::reinhard, "reinhard"}};
const util::EnumNames<StainFit> kStainFits = {{StainFit::tile, "tile"}, {StainFit::slide, "slide"}};
const util::EnumNames<Decode> kDecodes = {
    {Decode::host, "host"}, {Decode::device, "device"}, {Decode::automatic, "auto"}};

// The shortest text of each float that reads back as it: "0.485,0.456,0.406".
std::string rgb_text(const std::array<float, 3>& t) {
  std::string out;
  for (const float v : t) {
    char text[32];
    for (int digits = 1; digits <= 9; ++digits) {
      std::snprintf(text, sizeof text, "%.*g", digits, static_cast<double>(v));
      if (std::strtof(text, nullptr) == v) break;
    }
    out += (out.empty() ? "" : ",") + std::string(text);
  }
  return out;
}

const util::Options<ExtractJob>& extract_options() {
  using J = ExtractJob;
  using util::choice, util::flag, util::option;
  static const util::Options<ExtractJob> table = {
      option("inputs", &J::inputs,
             "The tile store (mltool tile), or slides (files, DICOM directories; '-' reads paths "
             "from stdin) to tile on the fly with tile's options into OUTPUT/coordinates.lmdb")
          .required(),
      option("-o,--output", &J::output, "The feature store directory (created; resumed if partial)")
          .required(),
      option("--model", &J::model, "A TorchScript file, or builtin:color-texture (no weights)"),
      noted(option("--input-size", &J::input_size,
                   "Model input side in pixels (tiles are resized on the device); default: "
                   "the encoder card's crop")
                .at_least(1)
                .at_most(8192)),
      noted(triple("--mean", &J::mean,
                   "Per-channel mean subtracted after scaling to [0, 1]; default: the card's")),
      noted(
          triple("--std", &J::std, "Per-channel standard deviation divided by; default: the card's")
              .check([](const J& j) { return j.std[0] > 0 && j.std[1] > 0 && j.std[2] > 0; },
                     "three positive numbers")),
      option("--batch", &J::batch, "Tiles per forward pass").at_least(1),
      util::device_option(&J::device),
      noted(choice("--amp", &J::amp, kAmps,
                   "Mixed precision for the forward (CUDA autocast on a GPU, CPU autocast on the "
                   "CPU): none, f16 or bf16; default on a GPU: the card's")),
      choice("--decode", &J::decode, kDecodes,
             "Where JPEG tiles are decoded: host (libjpeg-turbo on --threads workers), device "
             "(nvJPEG on each GPU: its hardware decoder where the GPU has one; recorded in "
             "features.json, a resume must repeat it) or auto (device on CUDA when the tiles are "
             "JPEG and nvJPEG loads, else host)"),
      noted(choice("--dtype", &J::dtype, kFeatureDTypes,
                   "Stored feature type: f32 or f16; default: the card's")),
      option("--chunk-rows", &J::chunk_rows, "Rows per committed chunk: what a killed run keeps")
          .at_least(1)
          .at_most(4294967296.0),
      util::math_threads_option(&J::math_threads),
      util::profile_option(&J::profile),
      util::profile_skip_option(&J::profile),
      util::profile_steps_option(&J::profile),
      util::overwrite_option(&J::overwrite),
      util::keep_going_option(&J::keep_going),
      option("--shard", &J::shard,
             "Only the complete slides I, I+N, I+2N, ... in slide-id order (I/N, 0-based), or "
             "auto: I and N from the job array (Slurm, Kubernetes); join the stores with --merge")
          .check([](const J& j) { return util::shard_syntax_ok(j.shard); },
                 "I/N with 0 <= I < N (e.g. 0/4), or auto"),
      util::shards_option(&J::shards),
      flag("--allow-wide-features", &J::allow_wide_features,
           "Keep a model output of more than two dimensions or over 16384 values a tile "
           "(flattened); refused otherwise as unpooled tokens"),
      util::no_oom_retry_option(&J::no_oom_retry),
      stain_norm_option(&J::stain_norm, &J::stain_reference),
      stain_reference_option(&J::stain_reference)
          .check(
              [](const J& j) {
                return j.stain_reference.empty() || j.stain_norm != StainNorm::none;
              },
              "given with --stain-norm macenko or reinhard"),
      choice("--stain-fit", &J::stain_fit, kStainFits,
             "Where --stain-norm estimates each tile's own stain: tile (from the tile alone, as "
             "torchstain) or slide (once per slide, from up to 64 of its tiles with stain, "
             "recorded per slide in features.json)")
          .check(
              [](const J& j) {
                return j.stain_fit == StainFit::tile || j.stain_norm != StainNorm::none;
              },
              "given with --stain-norm macenko or reinhard"),
  };
  return table;
}

nlohmann::json to_json(const ExtractReport& r) {
  return {{"command", "extract"},
          {"output", r.output},
          {"status", r.skipped ? "skipped" : "extracted"},
          {"rows", r.rows},
          {"dims", r.dims},
          {"resumed_from", r.resumed_from},
          {"invalid", r.invalid},
          {"stain_unchanged", r.stain_unchanged},
          {"stain_seconds", r.stain_seconds},
          {"decoder", r.decoder},
          {"device_decoded", r.device_decoded},
          {"devices", r.devices},
          {"math_threads", r.math_threads},
          {"shard", r.shard.empty() ? nlohmann::json() : nlohmann::json(r.shard)},
          {"model", r.model},
          {"seconds", r.seconds},
          {"tiles_per_second", r.tiles_per_second},
          {"first_batch_seconds", r.first_batch_seconds},
          {"steady_tiles_per_second", r.steady_tiles_per_second},
          {"input_wait_seconds", r.input_wait_seconds},
          {"max_input_wait_seconds", r.max_input_wait_seconds},
          {"tiling", r.tiled ? slide::to_json(*r.tiled, r.store) : nlohmann::json()}};
}

}  // namespace mltool::features
