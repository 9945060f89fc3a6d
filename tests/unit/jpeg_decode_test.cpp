// lib/cuda/jpeg_decode.cpp where there is no GPU: nvJPEG is not to be had, and open() says
// why instead of failing later, so `extract --decode auto` falls back to the host decoder and
// `--decode device` is refused with the reason. (tests/gpu/jpeg_decode_gpu_test.cpp decodes
// on a GPU.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "mltool/cuda/jpeg_decode.hpp"

TEST(JpegDecoder, WithoutAGpuOpenGivesNoDecoderAndSaysWhy) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is here: the gpu tests decode on it";
  std::string why;
  const auto decoder = mltool::cuda::JpegDecoder::open(why);
  EXPECT_EQ(decoder, nullptr);
  // Built with nvJPEG's header, the library loads (the venv's nvidia-nvjpeg) but creates no
  // decoder without a driver; built without it, the build says so. Either way, named.
  EXPECT_NE(why.find("nvJPEG"), std::string::npos) << why;
  std::string again;  // asked twice, the same answer (the library is loaded once)
  EXPECT_EQ(mltool::cuda::JpegDecoder::open(again), nullptr);
  EXPECT_EQ(again, why);
}
