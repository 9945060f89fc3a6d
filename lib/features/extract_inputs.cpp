#include "extract_inputs.hpp"

#include <filesystem>
#include <set>

#include "mltool/io/tile_store.hpp"
#include "mltool/slide/slide_inputs.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/input_check.hpp"
#include "mltool/util/log.hpp"

namespace mltool::features {
namespace {

// The coordinates store must hold exactly the slides given (and tiled): features of a slide
// left out of this run's list would otherwise be extracted, or counted complete, with it.
void check_same_slides(const std::string& store_path, const slide::CohortReport& tiled) {
  std::set<std::string> given;
  for (const auto& r : tiled.slides) given.insert(r.id);
  std::string extra;
  std::size_t n = 0;
  for (const auto& id : io::TileStore::open(store_path, false).completed_slides())
    if (!given.count(id) && ++n <= 3) extra += (extra.empty() ? "" : ", ") + id;
  if (n == 0) return;
  throw UsageError(at_file(store_path, "holds " + std::to_string(n) +
                                           " slide(s) this run was not given (" + extra +
                                           (n > 3 ? ", ..." : "") +
                                           "), from an earlier run into this output: give them "
                                           "too, or start over with --overwrite"));
}

// Whether an input names a tile store: an LMDB directory, a path ending in .lmdb (missing or
// not a store: TileStore::open says so), or a directory that is no DICOM series (no .dcm).
bool names_store(const std::string& path) {
  if (io::TileStore::is_store(path)) return true;
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".lmdb") == 0) return true;
  if (!util::is_directory(path)) return false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec))
    if (e.path().extension() == ".dcm") return false;
  return true;
}

// The run over the slides that tiles them into the coordinates store.
slide::CohortJob cohort_of(const ExtractJob& job) {
  slide::CohortJob cohort;
  cohort.tile = job.tile;
  cohort.tile.threads = job.threads;
  cohort.tile.device = job.device;  // a segmenter (--tissue MODEL.pt) runs where the model does
  cohort.tile.settings.pixels = false;
  cohort.store = util::join_path(job.output, kCoordinatesStore);
  cohort.keep_going = job.keep_going;
  cohort.overwrite = job.overwrite;
  return cohort;
}

// --model: a built-in's name, or a file that is there (what it holds, load_extractor checks).
void check_model(const std::string& model, const std::vector<std::string>& builtins) {
  const std::string prefix = "builtin:";
  if (model.rfind(prefix, 0) != 0) return util::require_input(model, "--model");
  std::string known;
  for (const auto& name : builtins) {
    if (model == prefix + name) return;
    known += (known.empty() ? "" : ", ") + prefix + name;
  }
  throw UsageError("--model " + model + ": no such built-in extractor; built-ins: " + known);
}

}  // namespace

void check_inputs(const ExtractJob& job, const std::vector<std::string>& builtins) {
  check_model(job.model, builtins);
  if (job.stain_norm != StainNorm::none)
    util::require_input(job.stain_reference, "--stain-reference");
  if (job.inputs.empty()) throw UsageError("no input: give a tile store, or slides");
  if (job.inputs.size() == 1 && names_store(job.inputs.front()))
    return util::require_input(job.inputs.front(), "the tile store");
  slide::check_slides(job.inputs, cohort_of(job));
}

std::optional<slide::CohortReport> resolve_inputs(ExtractJob& job) {
  if (job.inputs.size() == 1 && names_store(job.inputs.front())) {
    const std::string flag = slide::given_tile_option(job.tile);
    if (!flag.empty())
      throw UsageError(flag + " tiles slides; " + job.inputs.front() +
                       " is a tile store, whose tiles are made already");
    job.store = job.inputs.front();
    return std::nullopt;
  }
  for (const auto& input : job.inputs)
    if (names_store(input))
      throw UsageError(at_file(input, "is a tile store: give one tile store, or slides, not both"));
  const slide::CohortJob cohort = cohort_of(job);
  log::info("tiling " + std::to_string(job.inputs.size()) +
            " slide(s) into the coordinates store " + cohort.store);
  auto tiled = slide::tile_slides(job.inputs, cohort);
  check_same_slides(cohort.store, tiled);
  job.store = cohort.store;
  // The slides the user named: their pixels are read from their servers, with the token.
  for (const auto& input : job.inputs) io::allow_origin(job.tile.dicomweb, input);
  return tiled;
}

}  // namespace mltool::features
