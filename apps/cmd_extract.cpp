// mltool extract TILES.lmdb -o FEATURES/ [options]      tile store → feature store
//
// Option parsing and the summary; the pipeline is mltool::features::extract_features.
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "mltool/features/extract.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::cli {
namespace {

struct ExtractOptions {
  features::ExtractJob job;
  std::string mean = "0.485,0.456,0.406";
  std::string std = "0.229,0.224,0.225";
  std::string dtype = "f32";
};

std::array<float, 3> parse_triple(const std::string& text, const char* option) {
  std::array<float, 3> out{};
  std::istringstream in(text);
  char comma = 0;
  if (!(in >> out[0] >> comma) || comma != ',' || !(in >> out[1] >> comma) || comma != ',' ||
      !(in >> out[2]) || !in.eof())
    throw UsageError(std::string(option) + " takes three numbers R,G,B, not '" + text + "'");
  return out;
}

int run_extract(ExtractOptions& o, const CommonOptions& common) {
  o.job.threads = common.threads;
  o.job.mean = parse_triple(o.mean, "--mean");
  o.job.std = parse_triple(o.std, "--std");
  o.job.dtype = o.dtype == "f16" ? io::DType::float16 : io::DType::float32;
  const auto r = features::extract_features(o.job);
  std::string devices;
  for (const auto& d : r.devices) devices += (devices.empty() ? "" : ",") + d;
  if (r.skipped) {
    log::info(r.output + ": complete already with these settings (" + std::to_string(r.rows) +
              " rows), skipped");
  } else {
    log::info(
        r.output + ": " + std::to_string(r.rows) + " x " + std::to_string(r.dims) + " features" +
        (r.resumed_from ? " (resumed after " + std::to_string(r.resumed_from) + ")" : "") + " on " +
        devices + ", " + format_fixed(r.seconds) + " s, " + format_fixed(r.tiles_per_second) +
        " tiles/s" + (r.invalid ? ", " + std::to_string(r.invalid) + " invalid rows" : ""));
  }
  if (common.json)
    std::cout << nlohmann::json{{"command", "extract"},
                                {"output", r.output},
                                {"status", r.skipped ? "skipped" : "extracted"},
                                {"rows", r.rows},
                                {"dims", r.dims},
                                {"resumed_from", r.resumed_from},
                                {"invalid", r.invalid},
                                {"devices", r.devices},
                                {"math_threads", r.math_threads},
                                {"model", r.model},
                                {"seconds", r.seconds},
                                {"tiles_per_second", r.tiles_per_second}}
                     .dump(2)
              << "\n";
  return r.invalid ? exit_code::partial : exit_code::ok;
}

}  // namespace

Command extract_command() {
  return {"extract", "Turn a tile store into a feature matrix with a TorchScript or built-in model",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto o = std::make_shared<ExtractOptions>();
            auto& j = o->job;
            app.add_option("store", j.store, "The tile store (mltool tile)")->required();
            app.add_option("-o,--output", j.output,
                           "The feature store directory (created; resumed if partial)")
                ->required();
            app.add_option("--model", j.model,
                           "A TorchScript file, or builtin:color-texture (no weights)")
                ->capture_default_str();
            app.add_option("--input-size", j.input_size,
                           "Model input side in pixels (tiles are resized on the device)")
                ->capture_default_str();
            app.add_option("--mean", o->mean, "Per-channel mean subtracted after scaling to [0, 1]")
                ->capture_default_str();
            app.add_option("--std", o->std, "Per-channel standard deviation divided by")
                ->capture_default_str();
            app.add_option("--batch", j.batch, "Tiles per forward pass")->capture_default_str();
            app.add_option("--device", j.device,
                           "auto (every GPU, else CPU), cpu, cuda (every GPU) or cuda:N")
                ->capture_default_str();
            app.add_option("--amp", j.amp, "Mixed precision for the forward: none, f16 or bf16")
                ->check(CLI::IsMember({"none", "f16", "bf16"}))
                ->capture_default_str();
            app.add_option("--dtype", o->dtype, "Stored feature type: f32 or f16")
                ->check(CLI::IsMember({"f32", "f16"}))
                ->capture_default_str();
            app.add_option("--chunk-rows", j.chunk_rows,
                           "Rows per committed chunk: what a killed run keeps")
                ->capture_default_str();
            add_math_threads_option(app, j.math_threads);
            app.add_flag(
                "--keep-going", j.keep_going,
                "Undecodable tiles become invalid rows (NaN, listed in features.json); exit 4");
            return [o, &common] { return run_extract(*o, common); };
          }};
}

}  // namespace mltool::cli
