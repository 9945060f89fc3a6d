// The options of `mltool export h5` and `mltool import h5`, declared once (apps/cmd_export.cpp
// and apps/cmd_import.cpp bind them; docs/export.md and docs/import.md are checked against
// them by tests/cli/options_docs_test.py), their summaries, and the helpers both share.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "h5_interop_internal.hpp"
#include "mltool/features/encoder_card.hpp"
#include "mltool/features/h5_interop.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/util/common_options.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::features {

using json = nlohmann::json;

const util::EnumNames<ExportFormat> kExportFormats = {{ExportFormat::h5, "h5"},
                                                      {ExportFormat::pt, "pt"}};
const util::EnumNames<ExportLayout> kExportLayouts = {
    {ExportLayout::flat, "flat"}, {ExportLayout::trident, "trident"}, {ExportLayout::clam, "clam"}};
const util::EnumNames<io::DType> kInteropDTypes = {{io::DType::float32, "f32"},
                                                   {io::DType::float16, "f16"}};

namespace {
// --dtype f32|f16, unset by default: the default depends on --layout and the store.
util::Option<ExportH5Job> dtype_option() {
  using J = ExportH5Job;
  auto o = util::custom<J>(
      "--dtype", "TEXT",
      "Written feature type (default: f32 for --layout clam, the store's dtype otherwise)",
      [](J& j, const std::string& text) {
        j.dtype = util::parse_enum(kInteropDTypes, text, "--dtype");
      },
      [](const J& j) {
        return j.dtype ? json(util::name_of(kInteropDTypes, *j.dtype)) : json(nullptr);
      });
  for (const auto& [value, name] : kInteropDTypes) o.choices.emplace_back(name);
  return o;
}
}  // namespace

const util::Options<ExportH5Job>& export_h5_options() {
  using J = ExportH5Job;
  using util::choice, util::option;
  static const util::Options<J> table = {
      option("features", &J::features, "The feature store (mltool extract)").required(),
      option("-o,--output", &J::output, "The directory of per-slide files (created)").required(),
      option("--tiles", &J::tiles,
             "The tile store the features came from, when it moved (default: the one "
             "features.json names)"),
      choice("--layout", &J::layout, kExportLayouts,
             "flat: DIR/<slide>.h5 (or .pt); trident: TRIDENT's job tree "
             "<mag>x_<ps>px_<ov>px_overlap/{patches,features_<encoder>}/; clam: CLAM's h5_files/ "
             "and pt_files/ (needs LibTorch)"),
      choice("--format", &J::format, kExportFormats,
             "With --layout flat: h5, <slide>.h5 with features and coords; pt, CLAM's "
             "<slide>.pt tensor (needs LibTorch)"),
      dtype_option(),
      util::overwrite_option(&J::overwrite),
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
      option("--encoder", &J::encoder,
             "Which features_<encoder>/ of a TRIDENT job directory to read, when it has several"),
      option("--chunk-rows", &J::chunk_rows, "Rows per committed chunk: what a killed run keeps")
          .at_least(1),
      util::overwrite_option(&J::overwrite),
  };
  return table;
}

json to_json(const ExportH5Report& r) {
  return {{"command", "export h5"},
          {"output", r.output},
          {"format", r.format},
          {"layout", r.layout},
          {"dtype", r.dtype},
          {"encoder", r.encoder},
          {"status", r.status},
          {"slides", r.slides},
          {"written", r.written},
          {"resumed", r.resumed},
          {"rows", r.rows},
          {"dims", r.dims},
          {"invalid_rows", r.invalid_rows},
          {"no_mpp", r.no_mpp},
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

std::pair<std::vector<std::int64_t>, json> tile_coords(const io::TileStore& tiles,
                                                       const io::FeatureStore& store,
                                                       const std::string& id,
                                                       const std::vector<std::uint64_t>& rows) {
  const auto info = tiles.record("slides", id);
  const auto grid = tiles.record("tiles", id);
  if (!info || !grid)
    throw InputError(tiles.path() + ": no slide '" + id + "' (the features of " + store.dir() +
                     " name it); is this the tile store they came from?");
  std::unordered_map<std::string, std::pair<std::int64_t, std::int64_t>> at;
  try {
    const auto &r = grid->at("row"), &c = grid->at("col"), &x = grid->at("x"), &y = grid->at("y");
    for (std::size_t i = 0; i < r.size(); ++i)
      at[io::tile_key(id, r.at(i).get<std::int64_t>(), c.at(i).get<std::int64_t>())] = {
          x.at(i).get<std::int64_t>(), y.at(i).get<std::int64_t>()};
  } catch (const json::exception& e) {
    throw FormatError(tiles.path() + ": meta 'tiles/" + id + "': " + e.what());
  }
  std::vector<std::int64_t> coords;
  coords.reserve(2 * rows.size());
  for (const auto row : rows) {
    const std::string key(store.key(row));
    const auto found = at.find(key);
    if (found == at.end())
      throw InputError(store.dir() + "/keys.txt: line " + std::to_string(row + 1) + ": tile '" +
                       key + "' is not in the tile store " + tiles.path());
    coords.push_back(found->second.first);
    coords.push_back(found->second.second);
  }
  return {std::move(coords), *info};
}

bool slide_level(const io::FeatureStore& store) {
  const json& model = store.manifest().at("model");
  return model.is_object() && model.value("kind", json()) == "slide-encoder";
}

std::string encoder_name(const io::FeatureStore& store) {
  const json& model = store.manifest().at("model");
  if (const std::string card = encoder_name_of(model); !card.empty()) return card;
  for (const char* field : {"name"})
    if (model.value(field, json()).is_string()) return model[field].get<std::string>();
  if (model.value("path", json()).is_string()) {  // a TorchScript file without a card: its stem
    const std::string path = model["path"].get<std::string>();
    const std::string file = path.substr(path.rfind('/') + 1);
    const auto dot = file.rfind('.');
    return dot == std::string::npos || dot == 0 ? file : file.substr(0, dot);
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
