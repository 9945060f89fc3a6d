// Tests of slide::TilePixels::read_jpeg (lib/slide/tile_pixels.cpp), what `mltool extract
// --decode device` hands nvJPEG: a store's JPEG tiles as they are stored, and nothing for a
// tile another decoder might read otherwise than libjpeg-turbo (an RGB-coded JPEG), for one
// that is no JPEG, or for a store of PNG tiles — those are read() on the host.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mltool/io/image_codec.hpp"
#include "mltool/io/jpeg_tiff.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/slide/tile_pixels.hpp"
#include "support/temp_dir.hpp"

using mltool::io::TileEncoding;
using mltool::io::TileSettings;
using mltool::io::TileStore;

namespace {

constexpr int kSide = 16;

// A 16 × 16 picture with some structure, so that a decoder's choices show.
std::vector<std::uint8_t> picture() {
  std::vector<std::uint8_t> rgb(kSide * kSide * 3);
  for (int i = 0; i < kSide * kSide; ++i) {
    rgb[3 * i] = static_cast<std::uint8_t>(16 * (i % kSide));
    rgb[3 * i + 1] = static_cast<std::uint8_t>(200 - 8 * (i / kSide));
    rgb[3 * i + 2] = static_cast<std::uint8_t>((i * 37) % 256);
  }
  return rgb;
}

// A store of one slide "S" with `tiles` as its tiles 0..n-1 of row 0, in `encoding`.
void make_store(const std::string& path, TileEncoding encoding,
                const std::vector<std::string>& tiles) {
  TileStore store = TileStore::open(path, true);
  TileSettings settings;
  settings.tile_size = kSide;
  settings.mpp = 0.5;
  settings.encoding = encoding;
  store.adopt_settings(settings);
  auto writer = store.write_slide("S", "{}", 16);
  for (std::size_t c = 0; c < tiles.size(); ++c)
    writer.put_tile(mltool::io::tile_key("S", 0, static_cast<std::int64_t>(c)), tiles[c]);
  writer.commit(R"({"id": "S"})", R"({"row": [0]})", R"({"tiles": 1})");
}

std::vector<std::string> keys_of(std::size_t n) {
  std::vector<std::string> keys;
  for (std::size_t c = 0; c < n; ++c)
    keys.push_back(mltool::io::tile_key("S", 0, static_cast<std::int64_t>(c)));
  return keys;
}

}  // namespace

TEST(TilePixelsJpeg, AStoresYcbcrJpegTilesAreGivenAsStoredAndTheRestLeftToRead) {
  mltool::testing::TempDir tmp;
  const auto rgb = picture();
  const std::string ycbcr = mltool::io::encode_jpeg(rgb.data(), kSide, kSide, 85);
  const std::string rgb_coded =
      mltool::io::colour_marked_jpeg(ycbcr, mltool::io::JpegColour::rgb, "test");
  ASSERT_EQ(mltool::io::implied_colour(rgb_coded, "test"), mltool::io::JpegColour::rgb);
  const std::string png = mltool::io::encode_png(rgb.data(), kSide, kSide);
  const std::vector<std::string> tiles = {ycbcr, rgb_coded, "not an image at all", png};
  const std::string path = tmp / "tiles.lmdb";
  make_store(path, TileEncoding::jpeg, tiles);
  const TileStore store = TileStore::open(path, false);
  const mltool::slide::TilePixels pixels(store);
  EXPECT_TRUE(pixels.may_be_jpeg());
  const auto keys = keys_of(tiles.size());
  std::vector<std::string> jpegs;
  pixels.read_jpeg(
      keys.size(), [&](std::size_t i) -> const std::string& { return keys[i]; }, 2, jpegs);
  ASSERT_EQ(jpegs.size(), tiles.size());
  EXPECT_EQ(jpegs[0], ycbcr);  // the stored bytes, decoded elsewhere as read() decodes them
  EXPECT_TRUE(jpegs[1].empty()) << "an RGB-coded JPEG is read on the host";
  EXPECT_TRUE(jpegs[2].empty()) << "no JPEG: read() says what is wrong with it";
  EXPECT_TRUE(jpegs[3].empty()) << "a PNG tile";

  // What read() gives for the tile handed out is its stream decoded by libjpeg-turbo.
  std::vector<std::uint8_t> read(kSide * kSide * 3);
  pixels.read(
      1, [&](std::size_t i) -> const std::string& { return keys[i]; }, 1, read.data(),
      [](std::size_t, const mltool::Error&) { FAIL() << "tile 0 reads"; });
  mltool::io::RgbImage decoded;
  mltool::io::decode_image(jpegs[0].data(), jpegs[0].size(), decoded, "test");
  EXPECT_EQ(decoded.pixels, read);
}

TEST(TilePixelsJpeg, AStoreOfPngTilesHasNoJpegToGive) {
  mltool::testing::TempDir tmp;
  const auto rgb = picture();
  const std::string path = tmp / "tiles.lmdb";
  // Even a JPEG that found its way into a PNG store is read on the host, as the store says.
  make_store(path, TileEncoding::png, {mltool::io::encode_jpeg(rgb.data(), kSide, kSide, 90)});
  const TileStore store = TileStore::open(path, false);
  const mltool::slide::TilePixels pixels(store);
  EXPECT_FALSE(pixels.may_be_jpeg());
  const auto keys = keys_of(1);
  std::vector<std::string> jpegs = {"stale"};
  pixels.read_jpeg(
      1, [&](std::size_t i) -> const std::string& { return keys[i]; }, 1, jpegs);
  ASSERT_EQ(jpegs.size(), 1u);
  EXPECT_TRUE(jpegs[0].empty());
}
