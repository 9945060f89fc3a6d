// io::H5File against its own writes (the h5py side is tests/cli/export_h5_test.py): rows in
// every element type, attributes of every kind, and the errors that name the file.
#include "mltool/io/h5.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <vector>

#include "mltool/io/half.hpp"
#include "mltool/util/error.hpp"
#include "support/temp_dir.hpp"

namespace {

using mltool::io::H5Element;
using mltool::io::H5File;

TEST(H5File, RowsRoundTripInBlocksAndTypes) {
  mltool::testing::TempDir dir;
  const std::string path = dir.path() + "/s.h5";
  std::vector<float> f(10 * 3);
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = 0.1f * static_cast<float>(i) - 1.0f;
  std::vector<std::uint16_t> h(f.size());
  mltool::io::floats_to_halves(f.data(), h.data(), f.size());
  std::vector<std::int64_t> c = {0,    0,   512, 0,    1024, 0,    0,    512,  512,  512,
                                 1024, 512, 0,   1024, 512,  1024, 1024, 1024, 1536, 0};
  {
    auto w = H5File::create(path);
    w.create_dataset("features", H5Element::float32, 10, 3);
    w.write_rows("features", 0, 4, H5Element::float32, f.data());
    w.write_rows("features", 4, 6, H5Element::float32, f.data() + 12);
    w.create_dataset("half", H5Element::float16, 10, 3);
    w.write_rows("half", 0, 10, H5Element::float16, h.data());
    w.create_dataset("coords", H5Element::int64, 10, 2);
    w.write_rows("coords", 0, 10, H5Element::int64, c.data());
    w.close();
  }
  const auto r = H5File::open(path);
  const auto info = r.dataset_info("half");
  EXPECT_EQ(info.shape, (std::vector<std::uint64_t>{10, 3}));
  EXPECT_EQ(info.element, H5Element::float16);
  EXPECT_EQ(r.dataset_info("coords").element, H5Element::int64);
  std::vector<float> f2(f.size());
  r.read_rows("features", 0, 10, H5Element::float32, f2.data());
  EXPECT_EQ(f2, f);
  std::vector<std::uint16_t> h2(h.size());
  r.read_rows("half", 0, 10, H5Element::float16, h2.data());
  EXPECT_EQ(h2, h);
  std::vector<std::int64_t> c2(6);
  r.read_rows("coords", 7, 3, H5Element::int64, c2.data());
  EXPECT_EQ(c2, std::vector<std::int64_t>(c.begin() + 14, c.end()));
}

TEST(H5File, AttributesOfEveryKind) {
  mltool::testing::TempDir dir;
  const std::string path = dir.path() + "/a.h5";
  const nlohmann::json attrs = {{"patch_size", 256},
                                {"level0_magnification", 40.5},
                                {"name", "slide \xc3\xa9"},
                                {"level_dim", {1000, 800}},
                                {"downsample", {2.0, 2.0}}};
  {
    auto w = H5File::create(path);
    w.create_dataset("coords", H5Element::int64, 0, 2);
    w.set_attributes("coords", attrs);
    w.close();
  }
  EXPECT_EQ(H5File::open(path).attributes("coords"), attrs);
  EXPECT_EQ(H5File::open(path).dataset_info("coords").shape, (std::vector<std::uint64_t>{0, 2}));
}

TEST(H5File, ErrorsNameTheFile) {
  mltool::testing::TempDir dir;
  const std::string missing = dir.path() + "/none.h5";
  try {
    H5File::open(missing);
    FAIL();
  } catch (const mltool::InputError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos);
  }
  const std::string text = dir.path() + "/text.h5";
  std::ofstream(text) << "not hdf5";
  EXPECT_THROW(H5File::open(text), mltool::FormatError);
  const std::string path = dir.path() + "/e.h5";
  H5File::create(path).close();
  try {
    H5File::open(path).dataset_info("coords");
    FAIL();
  } catch (const mltool::InputError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": no dataset 'coords'");
  }
}

}  // namespace
