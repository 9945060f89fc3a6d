#include "mltool/slide/qc.hpp"

#include <algorithm>
#include <cmath>

namespace mltool::slide {

io::RgbImage qc_picture(const io::RgbImage& thumbnail, const Mask* mask,
                        const std::vector<Box>& kept) {
  io::RgbImage out = thumbnail;
  const int w = out.width, h = out.height;
  auto px = [&](int x, int y) {
    return out.pixels.data() + (static_cast<std::size_t>(y) * w + x) * 3;
  };
  if (mask && mask->width == w && mask->height == h) {
    constexpr int kTint[3] = {0, 170, 0};
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        if (mask->data[static_cast<std::size_t>(y) * w + x]) {
          std::uint8_t* p = px(x, y);
          for (int c = 0; c < 3; ++c)
            p[c] = static_cast<std::uint8_t>((p[c] * 65 + kTint[c] * 35 + 50) / 100);
        }
  }
  auto set = [&](int x, int y) {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    std::uint8_t* p = px(x, y);
    p[0] = 30, p[1] = 60, p[2] = 255;
  };
  for (const Box& b : kept) {
    const int x0 = static_cast<int>(std::floor(b.x0)), y0 = static_cast<int>(std::floor(b.y0));
    const int x1 = std::max(x0, static_cast<int>(std::ceil(b.x1)) - 1);
    const int y1 = std::max(y0, static_cast<int>(std::ceil(b.y1)) - 1);
    for (int x = x0; x <= x1; ++x) set(x, y0), set(x, y1);
    for (int y = y0; y <= y1; ++y) set(x0, y), set(x1, y);
  }
  return out;
}

}  // namespace mltool::slide
