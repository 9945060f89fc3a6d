// lib/cuda/jpeg_decode.cpp on a GPU: nvJPEG's batched decode into device memory against
// libjpeg-turbo's decode of the same streams (mltool's host decoder): within a few levels
// (another IDCT, not another picture), each image in its own slot; an image of another size
// and bytes that are no JPEG are left undecoded, their slots untouched, for the host.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mltool/cuda/jpeg_decode.hpp"
#include "mltool/io/image_codec.hpp"

namespace {

constexpr int kSide = 64;

std::vector<std::uint8_t> picture(int side, int seed) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(side) * side * 3);
  for (int y = 0; y < side; ++y)
    for (int x = 0; x < side; ++x) {
      std::uint8_t* p = &rgb[(static_cast<std::size_t>(y) * side + x) * 3];
      p[0] = static_cast<std::uint8_t>((x * 4 + seed * 40) % 256);
      p[1] = static_cast<std::uint8_t>((y * 3 + seed * 17) % 256);
      p[2] = static_cast<std::uint8_t>(((x ^ y) * 5 + seed) % 256);
    }
  return rgb;
}

}  // namespace

TEST(JpegDecoderGpu, DecodesABatchAsLibjpegTurboDoesWithinAFewLevels) {
  ASSERT_TRUE(torch::cuda::is_available());
  std::string why;
  auto decoder = mltool::cuda::JpegDecoder::open(why);
  ASSERT_NE(decoder, nullptr) << why;
  std::vector<std::string> jpegs;
  for (int seed = 0; seed < 5; ++seed) {
    const auto rgb = picture(kSide, seed);
    jpegs.push_back(mltool::io::encode_jpeg(rgb.data(), kSide, kSide, seed % 2 ? 95 : 80));
  }
  const auto other = picture(kSide / 2, 9);
  jpegs.push_back(mltool::io::encode_jpeg(other.data(), kSide / 2, kSide / 2, 90));  // 32 px
  jpegs.push_back("no JPEG at all");
  const std::vector<std::string_view> views(jpegs.begin(), jpegs.end());
  auto out = torch::full({7, kSide, kSide, 3}, 7, torch::dtype(torch::kUInt8).device(torch::kCUDA));
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const auto decoded = decoder->decode(views, kSide, out.data_ptr<std::uint8_t>(), stream.stream());
  stream.synchronize();
  ASSERT_EQ(decoded.size(), 7u);
  EXPECT_EQ(decoded[5], 0) << "another size is left for the host";
  EXPECT_EQ(decoded[6], 0) << "no JPEG is left for the host";
  const auto host = out.cpu();
  EXPECT_TRUE(host[5].eq(7).all().item<bool>() && host[6].eq(7).all().item<bool>())
      << "slots of undecoded images are untouched";
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(decoded[i], 1) << "image " << i << " (" << decoder->backend() << ")";
    mltool::io::RgbImage ref;
    mltool::io::decode_image(jpegs[i].data(), jpegs[i].size(), ref, "test");
    const auto want = torch::from_blob(ref.pixels.data(), {kSide, kSide, 3}, torch::kUInt8);
    const auto diff = (host[i].to(torch::kInt) - want.to(torch::kInt)).abs();
    const double mean = diff.to(torch::kDouble).mean().item<double>();
    const int max = diff.max().item<int>();
    std::printf("image %d: %s vs libjpeg-turbo: mean %.3f, max %d levels\n", i,
                decoder->backend().c_str(), mean, max);
    EXPECT_LT(mean, 1.5) << "image " << i;
    EXPECT_LE(max, 48) << "image " << i;
  }
}
