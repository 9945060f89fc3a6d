// libFuzzer target: arbitrary bytes as each JSON document mltool reads from outside, through
// the reader that takes it in production:
//   - io::read_manifest(path, schema) for every compiled-in schema (features, dataset,
//     model, tile-store, train-run): JSON parse, identity check, schema validation;
//   - then what consumes a manifest that passed: io::FeatureStore::open (features.json; it
//     stops at the missing features.npy), records::inspect of a dataset directory
//     (dataset.json; its shards are missing), and io::TileSettings::from_json on the
//     in-memory parse TileStore::settings does. (train::parse_model_spec, the --model spec,
//     is no longer reached: since the model families moved to one file each
//     (lib/train/models/), it reads their table, which needs LibTorch's headers and library;
//     the model schema's read_manifest still is.)
// read_manifest and the directory readers take paths, so the input is written to
// features.json and dataset.json in a per-process temporary directory (removed at exit).
// The oracle: every reader returns or throws mltool::Error. Any other exception (e.g. a
// nlohmann::json exception leaking from a get<>() on a value the schema let through), a
// crash or a sanitizer report is a finding.
//
// Seeds: fuzz/seeds/fuzz_json (one valid document per schema, model specs of each family).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include <unistd.h>

#include "fuzz_check.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/records/inspect.hpp"
#include "mltool/records/pack.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

const char* const kFuzzTarget = "fuzz_json";

namespace {

struct Scratch {
  std::string root, features_dir, dataset_dir, features_json, dataset_json;

  Scratch() {
    char templ[] = "/tmp/mltool-fuzz-json-XXXXXX";
    if (!::mkdtemp(templ)) {
      std::perror("mkdtemp");
      std::abort();
    }
    root = templ;
    features_dir = root + "/features";
    dataset_dir = root + "/dataset";
    mltool::util::make_directories(features_dir);
    mltool::util::make_directories(dataset_dir);
    features_json = mltool::util::join_path(features_dir, mltool::io::kFeaturesManifestFile);
    dataset_json = mltool::util::join_path(dataset_dir, mltool::records::kDatasetManifestFile);
  }
};

Scratch& scratch() {
  static Scratch* s = [] {
    auto* made = new Scratch;
    std::atexit([] {
      try {
        mltool::util::remove_tree(scratch().root);
      } catch (...) {
      }
    });
    return made;
  }();
  return *s;
}

// A plain overwrite: write_file_atomic's fsync would cut the exec rate tenfold.
void write(const std::string& path, std::string_view text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

// Runs one reader; mltool::Error is an accepted outcome, anything else a finding.
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = mltool::io;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Scratch& s = scratch();
  write(s.features_json, text);
  write(s.dataset_json, text);

  for (const std::string_view schema : io::schema_names()) {
    expect_clean("read_manifest", [&] { io::read_manifest(s.features_json, schema); });
  }
  expect_clean("FeatureStore::open", [&] { io::FeatureStore::open(s.features_dir); });
  expect_clean("inspect", [&] {
    mltool::records::InspectOptions options;
    options.inputs = {s.dataset_dir};
    options.threads = 1;
    mltool::records::inspect(options);
  });
  expect_clean("TileSettings::from_json", [&] {
    // As TileStore::settings reads the store's meta record.
    const auto doc = nlohmann::json::parse(text, nullptr, false);
    if (!doc.is_discarded()) mltool::io::TileSettings::from_json(doc, "meta 'store'");
  });
  return 0;
}
