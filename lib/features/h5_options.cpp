// The options of `mltool export h5` and `mltool import h5`, declared once (apps/cmd_export.cpp
// and apps/cmd_import.cpp bind them; docs/export.md and docs/import.md are checked against
// them by tests/cli/options_docs_test.py), their summaries, and the helpers both share.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "h5_interop_internal.hpp"
#include "mltool/features/encoder_card.hpp"
#include "mltool/features/h5_interop.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::features {

using json = nlohmann::json;

const util::EnumNames<ExportFormat> kExportFormats = {{ExportFormat::h5, "h5"},
                                                      {ExportFormat::pt, "pt"}};
const util::EnumNames<io::DType> kInteropDTypes = {{io::DType::float32, "f32"},
                                                   {io::DType::float16, "f16"}};

const util::Options<ExportH5Job>& export_h5_options() {
  using J = ExportH5Job;
  using util::choice, util::option;
  static const util::Options<J> table = {
      option("features", &J::features, "The feature store (mltool extract)").required(),
      option("-o,--output", &J::output, "The directory of per-slide files (created)").required(),
      option("--tiles", &J::tiles,
             "The tile store the features came from, when it moved (default: the one "
             "features.json names)"),
      choice("--format", &J::format, kExportFormats,
             "h5: <slide>.h5 with features and coords (CLAM, TRIDENT); pt: CLAM's <slide>.pt "
             "tensor (needs LibTorch)"),
      choice("--dtype", &J::dtype, kInteropDTypes, "Written feature type: f32 or f16"),
  };
  return table;
}

const util::Options<ImportH5Job>& import_h5_options() {
  using J = ImportH5Job;
  using util::option;
  static const util::Options<J> table = {
      option("input", &J::input, "Directory of .h5 files (TRIDENT's, or CLAM's h5_files)")
          .required(),
      option("-o,--output", &J::output, "The feature store to write").required(),
      option("--chunk-rows", &J::chunk_rows, "Rows per committed chunk: what a killed run keeps")
          .at_least(1),
  };
  return table;
}

json to_json(const ExportH5Report& r) {
  return {{"command", "export h5"},
          {"output", r.output},
          {"format", r.format},
          {"dtype", r.dtype},
          {"status", r.status},
          {"slides", r.slides},
          {"written", r.written},
          {"resumed", r.resumed},
          {"rows", r.rows},
          {"dims", r.dims},
          {"invalid_rows", r.invalid_rows},
          {"coordinates", r.coordinates},
          {"seconds", r.seconds}};
}

json to_json(const ImportH5Report& r) {
  return {{"command", "import h5"},
          {"output", r.output},
          {"input", r.input},
          {"status", r.status},
          {"layout", r.layout},
          {"dtype", r.dtype},
          {"encoder", r.encoder.empty() ? json(nullptr) : json(r.encoder)},
          {"files", r.files},
          {"slides", r.slides},
          {"empty", r.empty},
          {"rows", r.rows},
          {"dims", r.dims},
          {"resumed_from", r.resumed_from},
          {"seconds", r.seconds}};
}

namespace detail {

std::string slide_of(std::string_view key) {
  const auto slash = key.rfind('/');
  return std::string(slash == std::string_view::npos ? key : key.substr(0, slash));
}

std::string xy_key(const std::string& slide, std::int64_t x, std::int64_t y) {
  return slide + "/x" + std::to_string(x) + "_y" + std::to_string(y);
}

namespace {
// A decimal integer (optional '-') filling `text`.
std::optional<std::int64_t> integer(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  std::size_t i = text[0] == '-' ? 1 : 0;
  if (i == text.size()) return std::nullopt;
  std::int64_t v = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
    v = v * 10 + (text[i] - '0');
  }
  return text[0] == '-' ? -v : v;
}
}  // namespace

std::optional<std::pair<std::int64_t, std::int64_t>> parse_xy_key(std::string_view key) {
  const auto slash = key.rfind('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const std::string_view cell = key.substr(slash + 1);
  const auto sep = cell.find("_y");
  if (cell.size() < 2 || cell[0] != 'x' || sep == std::string_view::npos) return std::nullopt;
  const auto x = integer(cell.substr(1, sep - 1));
  const auto y = integer(cell.substr(sep + 2));
  if (!x || !y) return std::nullopt;
  return std::make_pair(*x, *y);
}

json coords_attributes(const json& slide, const std::string& id, const std::string& outdir) {
  try {
    const int level = slide.at("level").get<int>();
    const json& dims = slide.at("levels").at(level);
    const double downsample = slide.at("level_downsample").get<double>();
    const std::int64_t level_dim[2] = {dims.at("width").get<std::int64_t>(),
                                       dims.at("height").get<std::int64_t>()};
    json a = {
        {"patch_size", slide.at("tile_size").get<std::int64_t>()},
        {"patch_level", level},
        {"patch_size_level0", std::llround(slide.at("size_level0").get<double>())},
        {"overlap", slide.at("overlap").get<std::int64_t>()},
        {"downsample", {downsample, downsample}},
        {"level_dim", {level_dim[0], level_dim[1]}},
        {"downsampled_level_dim", {level_dim[0], level_dim[1]}},
        {"level0_width", slide.at("width").get<std::int64_t>()},
        {"level0_height", slide.at("height").get<std::int64_t>()},
        {"name", id},
        {"savetodir", outdir},
        {"save_path", outdir},
    };
    // Magnification by the usual convention, 10 / (µm per pixel): 0.25 µm/px is 40x.
    if (slide.value("mpp", json()).is_number()) {
      const double mpp = slide["mpp"].get<double>();
      a["level0_magnification"] = 10.0 / mpp;
      a["target_magnification"] = 10.0 / (mpp * slide.at("target_downsample").get<double>());
    }
    return a;
  } catch (const json::exception& e) {
    throw FormatError("tile store meta 'slides/" + id + "': " + e.what());
  }
}

std::string encoder_name(const io::FeatureStore& store) {
  const json& model = store.manifest().at("model");
  if (const std::string card = encoder_name_of(model); !card.empty()) return card;
  for (const char* field : {"name"})
    if (model.value(field, json()).is_string()) return model[field].get<std::string>();
  if (model.value("path", json()).is_string()) {
    const std::string path = model["path"].get<std::string>();
    return path.substr(path.rfind('/') + 1);
  }
  return "unknown";
}

void publish(const std::string& temp, const std::string& path) {
  const int fd = ::open(temp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw ResourceError(temp + ": fsync failed: " + std::strerror(err));
  }
  ::close(fd);
  if (std::rename(temp.c_str(), path.c_str()) != 0)
    throw ResourceError(path + ": cannot rename " + temp + " into place: " + std::strerror(errno));
  const int dir = ::open(util::parent_directory(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace detail
}  // namespace mltool::features
