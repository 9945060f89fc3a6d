// mltool_testgen: writes artifacts with mltool's library for the reference checks that
// run outside C++ (numpy reading feature stores, TensorFlow reading records).
//
//   mltool_testgen features DIR ROWS DIMS float32|float16
//   mltool_testgen tfrecord PATH        (the interop formula, kInteropRecords records + .idx)
//   mltool_testgen decode-tiles STORE OUT  (every complete tile decoded as extract decodes
//                                           it: OUT holds their RGB bytes in key order)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "mltool/io/example.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "support/interop_formula.hpp"
#include "unit/feature_store_fixture.hpp"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: mltool_testgen features DIR ROWS DIMS float32|float16\n"
               "       mltool_testgen tfrecord PATH\n"
               "       mltool_testgen decode-tiles STORE OUT\n");
  return 1;
}

void write_interop_records(const std::string& path) {
  mltool::io::TFRecordWriter writer(path);
  for (std::int64_t i = 0; i < mltool::testing::kInteropRecords; ++i) {
    const auto r = mltool::testing::interop_record(i);
    mltool::io::ExampleBuilder b;
    b.add_int64("index", r.index)
        .add_int64s("indices", r.indices)
        .add_int64("label", r.label)
        .add_floats("weights", r.weights)
        .add_bytes("slide", r.slide)
        .add_bytes("blob", r.blob);
    writer.write(b.serialize());
  }
  writer.commit();
}

// Every complete tile of `store`, decoded by the tile store (libjpeg-turbo / libpng, what
// extract runs), its RGB bytes appended to `out` in key order.
void decode_tiles(const std::string& store_path, const std::string& out) {
  const auto store = mltool::io::TileStore::open(store_path, false);
  const auto snapshot = store.snapshot();
  const int tile_size = store.settings()->tile_size;
  std::string pixels;
  mltool::io::RgbImage image;
  for (const auto& key : store.complete_tile_keys()) {
    store.decode_tile(key, snapshot.find(key), tile_size, image);
    pixels.append(reinterpret_cast<const char*>(image.pixels.data()), image.pixels.size());
  }
  mltool::util::write_file_atomic(out, pixels);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string what = argc > 1 ? argv[1] : "";
    if (what == "features" && argc == 6) {
      const auto dtype = mltool::io::dtype_from_name(argv[5]);
      if (!dtype) return usage();
      mltool::testing::write_formula_store(argv[2], std::strtoull(argv[3], nullptr, 10),
                                           std::strtoull(argv[4], nullptr, 10), *dtype);
      return 0;
    }
    if (what == "decode-tiles" && argc == 4) {
      decode_tiles(argv[2], argv[3]);
      return 0;
    }
    if (what == "tfrecord" && argc == 3) {
      write_interop_records(argv[2]);
      return 0;
    }
    return usage();
  } catch (const mltool::Error& e) {
    std::fprintf(stderr, "mltool_testgen: %s\n", e.what());
    return 2;
  }
}
