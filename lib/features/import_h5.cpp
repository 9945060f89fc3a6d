// mltool import h5: a directory of CLAM/TRIDENT per-slide files → one feature store
// (h5_interop.hpp).
//
// Phases: list the files (slide id = stem; a collision is refused); check every file's layout
// before any row is written; check that dims, dtype and encoder agree; then stream the rows,
// file by file, through the resumable chunked writer (a killed import resumes after its last
// committed chunk), keys "<slide>/x<X>_y<Y>".
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "h5_interop_internal.hpp"
#include "mltool/features/chunked_writer.hpp"
#include "mltool/features/h5_interop.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/h5.hpp"
#include "mltool/io/half.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/output_lock.hpp"

namespace mltool::features {
namespace {

using json = nlohmann::json;
constexpr std::uint64_t kBlockRows = 4096;

struct SlideFile {
  std::string slide;
  std::string path;
  std::string name;  // file name in the directory
  std::uint64_t rows = 0;
  std::uint64_t dims = 0;
  io::H5Element element = io::H5Element::other;
  std::string encoder;
  bool trident = false;  // TRIDENT's attributes are there (else CLAM's layout)
  json coords_attrs;
};

bool is_h5_name(const std::string& name) {
  auto ends = [&name](const std::string& ext) {
    return name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0;
  };
  return name[0] != '.' && (ends(".h5") || ends(".hdf5"));
}

// The names of `dir`'s entries that `keep` accepts, sorted.
std::vector<std::string> names_in(const std::string& dir,
                                  const std::function<bool(const std::string&)>& keep) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw InputError(dir + ": cannot open the directory: " + std::strerror(errno));
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (keep(e->d_name)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> h5_names(const std::string& dir) { return names_in(dir, is_h5_name); }

// The features_<encoder>/ directories TRIDENT's Processor writes under each patching
// directory (<mag>x_<ps>px_<ov>px_overlap/) of a job directory: those of `input` and of its
// subdirectories.
std::vector<std::string> trident_feature_dirs(const std::string& input) {
  std::vector<std::string> found;
  const auto scan = [&found](const std::string& dir) {
    for (const auto& n : names_in(dir, [&dir](const std::string& name) {
           return name.rfind("features_", 0) == 0 && util::is_directory(util::join_path(dir, name));
         }))
      found.push_back(util::join_path(dir, n));
  };
  scan(input);
  for (const auto& sub : names_in(input, [&input](const std::string& name) {
         return name[0] != '.' && name.rfind("features_", 0) != 0 &&
                util::is_directory(util::join_path(input, name));
       }))
    scan(util::join_path(input, sub));
  return found;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

// The features_<encoder>/ of a TRIDENT job directory to read: the only one, or --encoder's.
std::string pick_trident_dir(const std::string& input, const std::string& encoder) {
  std::vector<std::string> found = trident_feature_dirs(input);
  if (found.empty())
    throw InputError(input +
                     ": no .h5 or .hdf5 files (nor CLAM's h5_files/, nor TRIDENT's "
                     "features_<encoder>/ directories)");
  if (!encoder.empty()) {
    std::vector<std::string> chosen;
    for (const auto& d : found)
      if (d.substr(d.rfind('/') + 1) == "features_" + encoder) chosen.push_back(d);
    if (chosen.empty())
      throw InputError(input + ": no features_" + encoder + "/ (--encoder " + encoder +
                       "); there are " + joined(found));
    found = std::move(chosen);
  }
  if (found.size() > 1)
    throw UsageError(
        input + ": a TRIDENT job directory with several feature directories: " + joined(found) +
        (encoder.empty() ? "; choose one with --encoder NAME, or give its directory"
                         : "; give the directory of the one to import"));
  log::info(input + ": a TRIDENT job directory; reading " + found[0]);
  return found[0];
}

// The files to import, by slide id; CLAM's feat_dir is read through its h5_files/, a
// TRIDENT job directory through its features_<encoder>/.
std::pair<std::string, std::vector<SlideFile>> list_files(const std::string& input,
                                                          const std::string& encoder) {
  if (!util::is_directory(input)) throw InputError(input + ": not a directory");
  std::string dir = input;
  auto names = h5_names(dir);
  if (names.empty() && util::is_directory(util::join_path(input, "h5_files"))) {
    dir = util::join_path(input, "h5_files");
    names = h5_names(dir);
  }
  if (names.empty()) {
    dir = pick_trident_dir(input, encoder);
    names = h5_names(dir);
    if (names.empty()) throw InputError(dir + ": no .h5 or .hdf5 files");
  }
  std::vector<SlideFile> files;
  std::map<std::string, std::string> by_slide;
  for (const auto& name : names) {
    SlideFile f;
    f.name = name;
    f.path = util::join_path(dir, name);
    f.slide = name.substr(0, name.rfind('.'));
    const auto [it, added] = by_slide.emplace(f.slide, name);
    if (!added)
      throw InputError(f.path + ": slide id '" + f.slide + "' is also that of " +
                       util::join_path(dir, it->second) +
                       " (slide ids are file stems); import one of them from another directory");
    files.push_back(std::move(f));
  }
  return {dir, std::move(files)};
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

// Checks one file's layout and reads its metadata; nothing of its rows.
void inspect(SlideFile& f) {
  const auto file = io::H5File::open(f.path);
  const std::string expected_features =
      "expected 'features': rows x dims floats (float16, float32 or float64), as CLAM and "
      "TRIDENT write";
  if (!file.has_dataset("features"))
    throw FormatError(f.path + ": no dataset 'features' (" + expected_features + ")");
  if (!file.has_dataset("coords"))
    throw FormatError(f.path +
                      ": no dataset 'coords' (expected 'coords': rows x 2 integers, "
                      "the level-0 x, y of each row's patch)");
  const auto features = file.dataset_info("features");
  const auto coords = file.dataset_info("coords");
  const bool empty_trident = features.shape.size() == 1 && features.shape[0] == 0;
  if (!empty_trident && (features.shape.size() != 2 || features.shape[1] == 0))
    throw FormatError(f.path + ": dataset 'features' has shape " + shape_text(features.shape) +
                      ", " + expected_features);
  if (features.element != io::H5Element::float16 && features.element != io::H5Element::float32 &&
      features.element != io::H5Element::float64)
    throw FormatError(f.path + ": dataset 'features' holds " + features.type_text + ", " +
                      expected_features);
  f.rows = features.shape[0];
  f.dims = empty_trident ? 0 : features.shape[1];
  f.element = features.element;
  if (coords.shape.size() != 2 || coords.shape[1] != 2 || coords.shape[0] != f.rows)
    throw FormatError(f.path + ": dataset 'coords' has shape " + shape_text(coords.shape) +
                      ", expected (" + std::to_string(f.rows) +
                      ", 2): one level-0 x, y per row of 'features'");
  if (coords.element != io::H5Element::int32 && coords.element != io::H5Element::int64)
    throw FormatError(f.path + ": dataset 'coords' holds " + coords.type_text +
                      ", expected integers (level-0 pixel x, y)");
  const json fattrs = file.attributes("features");
  if (fattrs.value("encoder", json()).is_string()) f.encoder = fattrs["encoder"];
  f.coords_attrs = file.attributes("coords");
  f.trident = f.coords_attrs.contains("patch_size_level0") || fattrs.contains("encoder");
}

struct Plan {
  std::string dir;
  std::vector<SlideFile> files;
  std::uint64_t dims = 0;
  std::uint64_t rows = 0;
  io::DType dtype = io::DType::float16;
  std::string encoder;
  std::string layout;
};

Plan plan_import(const std::string& input, const std::string& encoder) {
  Plan p;
  std::tie(p.dir, p.files) = list_files(input, encoder);
  std::set<std::string> layouts;
  const SlideFile* first = nullptr;
  for (auto& f : p.files) {
    inspect(f);
    if (f.rows == 0) continue;
    layouts.insert(f.trident ? "trident" : "clam");
    if (!first) {
      first = &f;
      p.dims = f.dims;
      p.encoder = f.encoder;
    }
    if (f.dims != p.dims)
      throw FormatError(f.path + ": 'features' has " + std::to_string(f.dims) + " dims, but " +
                        first->path + " has " + std::to_string(p.dims) +
                        ": a feature store holds one encoder's features");
    if (f.encoder != p.encoder)
      throw FormatError(f.path + ": 'features' attribute encoder is '" + f.encoder + "', but " +
                        first->path + " says '" + p.encoder + "'");
    // float16 only if every file is: float32 and float64 files make a float32 store.
    if (f.element != io::H5Element::float16) p.dtype = io::DType::float32;
    p.rows += f.rows;
  }
  if (!first) throw InputError(input + ": every file has zero rows; nothing to import");
  if (!encoder.empty() && !p.encoder.empty() && p.encoder != encoder)
    throw UsageError(first->path + ": 'features' attribute encoder is '" + p.encoder +
                     "', not --encoder " + encoder);
  p.layout = layouts.size() == 1 ? *layouts.begin() : "mixed";
  return p;
}

// Identifies the input: each file's name, size and modification time, so a resume never
// mixes rows of files that changed in between.
json fingerprint(const Plan& p) {
  json files = json::array();
  for (const auto& f : p.files) {
    struct stat st {};
    ::stat(f.path.c_str(), &st);
    files.push_back({f.name, static_cast<std::uint64_t>(st.st_size),
                     static_cast<std::int64_t>(st.st_mtim.tv_sec),
                     static_cast<std::int64_t>(st.st_mtim.tv_nsec)});
  }
  return {{"directory", util::absolute_path(p.dir)}, {"files", files}};
}

json source_json(const Plan& p, const json& fp) {
  json slides = json::object();
  for (const auto& f : p.files)
    if (f.rows > 0)
      slides[f.slide] = {{"file", f.name}, {"rows", f.rows}, {"coords_attrs", f.coords_attrs}};
  return {{"format", "h5"},
          {"directory", util::absolute_path(p.dir)},
          {"layout", p.layout},
          {"fingerprint", fp},
          {"slides", slides}};
}

json model_json(const Plan& p) {
  json m = {{"kind", "imported"}, {"format", "h5"}};
  m["name"] = p.encoder.empty() ? "unknown" : p.encoder;
  if (!p.encoder.empty()) m["encoder"] = p.encoder;
  return m;
}

// Appends one file's rows from `skip` on (rows below it were committed by an earlier run).
void import_file(const SlideFile& f, std::uint64_t skip, ChunkedFeatureWriter& out) {
  const auto file = io::H5File::open(f.path);
  std::vector<std::int64_t> coords(2 * f.rows);
  // In blocks: HDF5 keeps two selections per chunk a read touches, and TRIDENT's chunks are
  // single rows.
  for (std::uint64_t at = 0; at < f.rows; at += kBlockRows)
    file.read_rows("coords", at, std::min(kBlockRows, f.rows - at), io::H5Element::int64,
                   &coords[2 * at]);
  std::unordered_map<std::string, std::uint64_t> seen;
  std::vector<std::string> keys(f.rows);
  for (std::uint64_t i = 0; i < f.rows; ++i) {
    keys[i] = detail::xy_key(f.slide, coords[2 * i], coords[2 * i + 1]);
    const auto [it, added] = seen.emplace(keys[i], i);
    if (!added)
      throw FormatError(f.path + ": 'coords' row " + std::to_string(i) + " repeats (x, y) = (" +
                        std::to_string(coords[2 * i]) + ", " + std::to_string(coords[2 * i + 1]) +
                        ") of row " + std::to_string(it->second) + ": expected one row per patch");
  }
  const bool half = f.element == io::H5Element::float16;
  std::vector<float> rows;
  std::vector<std::uint16_t> halves;
  for (std::uint64_t at = skip; at < f.rows; at += kBlockRows) {
    const std::uint64_t n = std::min(kBlockRows, f.rows - at);
    rows.resize(n * f.dims);
    if (half) {  // read as stored, widened here: exact, and float16 again in the store
      halves.resize(n * f.dims);
      file.read_rows("features", at, n, io::H5Element::float16, halves.data());
      io::halves_to_floats(halves.data(), rows.data(), halves.size());
    } else {
      file.read_rows("features", at, n, io::H5Element::float32, rows.data());
    }
    for (std::uint64_t i = 0; i < n; ++i) out.append(keys[at + i], &rows[i * f.dims], false);
  }
}

bool already_imported(const std::string& output, const json& fp) {
  const std::string manifest = util::join_path(output, io::kFeaturesManifestFile);
  if (!util::exists(manifest) || util::exists(util::join_path(output, ".extract-partial")))
    return false;
  const auto store = io::FeatureStore::open(output);
  const json source = store.manifest().value("source", json::object());
  if (source.value("fingerprint", json()) == fp) return true;
  throw UsageError(output +
                   ": already holds a feature store, not one imported from these files; "
                   "import into another directory, or replace it with --overwrite");
}

}  // namespace

ImportH5Report import_h5(const ImportH5Job& job) {
  const auto start = std::chrono::steady_clock::now();
  util::check_options(import_h5_options(), job);
  const Plan plan = plan_import(job.input, job.encoder);
  util::make_directories(job.output);
  util::OutputLock lock(job.output, "mltool import");
  const json fp = fingerprint(plan);
  ImportH5Report r;
  r.output = util::absolute_path(job.output);
  r.input = util::absolute_path(plan.dir);
  r.layout = plan.layout;
  r.dtype = std::string(io::name(plan.dtype));
  r.encoder = plan.encoder;
  r.files = plan.files.size();
  r.rows = plan.rows;
  r.dims = plan.dims;
  for (const auto& f : plan.files) (f.rows ? r.slides : r.empty) += 1;
  for (const auto& f : plan.files)
    if (f.rows == 0) log::warn(f.path + ": no rows; slide '" + f.slide + "' is left out");
  if (job.overwrite) ChunkedFeatureWriter::remove_all(job.output);
  if (already_imported(job.output, fp)) {
    r.status = "skipped";
  } else {
    ChunkedFeatureWriter out(job.output, plan.dims, fp, job.chunk_rows);
    r.resumed_from = out.committed_rows();
    std::uint64_t before = 0;
    for (const auto& f : plan.files) {
      if (before + f.rows > r.resumed_from)
        import_file(f, r.resumed_from > before ? r.resumed_from - before : 0, out);
      before += f.rows;
    }
    out.finish(plan.dtype, model_json(plan), source_json(plan, fp));
    r.status = "imported";
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace mltool::features
