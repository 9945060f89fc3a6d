#include "mltool/slide/heatmap.hpp"

#include <algorithm>
#include <cmath>

#include "mltool/slide/qc.hpp"

namespace mltool::slide {
namespace {

constexpr std::uint8_t kStops[5][3] = {
    {20, 20, 160}, {0, 200, 230}, {40, 200, 60}, {250, 220, 0}, {220, 20, 20}};

}  // namespace

std::array<std::uint8_t, 3> heat_colour(float v) {
  const float t = std::clamp(std::isfinite(v) ? v : 0.0f, 0.0f, 1.0f) * 4.0f;
  const int i = std::min(3, static_cast<int>(t));
  const float f = t - static_cast<float>(i);
  std::array<std::uint8_t, 3> out{};
  for (int c = 0; c < 3; ++c)
    out[c] = static_cast<std::uint8_t>(
        std::lround(kStops[i][c] + f * static_cast<float>(kStops[i + 1][c] - kStops[i][c])));
  return out;
}

io::RgbImage heatmap_picture(const io::RgbImage& picture, const std::vector<HeatTile>& tiles,
                             const std::vector<std::string>& caption) {
  const int w = picture.width, h = picture.height;
  const int bar = std::max(12, std::max(w, h) / 48), pad = std::max(4, bar / 2);
  io::RgbImage out{w, h + bar + 2 * pad, {}};
  out.pixels.assign(static_cast<std::size_t>(out.width) * out.height * 3, 255);
  std::copy(picture.pixels.begin(), picture.pixels.end(), out.pixels.begin());
  for (const HeatTile& t : tiles) {
    const auto colour = heat_colour(t.value);
    const int x0 = std::max(0, static_cast<int>(std::floor(t.x0)));
    const int y0 = std::max(0, static_cast<int>(std::floor(t.y0)));
    const int x1 = std::min(w, std::max(x0 + 1, static_cast<int>(std::ceil(t.x1))));
    const int y1 = std::min(h, std::max(y0 + 1, static_cast<int>(std::ceil(t.y1))));
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        std::uint8_t* p = out.pixels.data() + (static_cast<std::size_t>(y) * w + x) * 3;
        for (int c = 0; c < 3; ++c) p[c] = static_cast<std::uint8_t>((p[c] + colour[c] + 1) / 2);
      }
  }
  const int span = std::max(1, w - 2 * pad);
  for (int x = 0; x < span; ++x) {
    const auto colour =
        heat_colour(static_cast<float>(x) / static_cast<float>(std::max(1, span - 1)));
    for (int y = h + pad; y < h + pad + bar; ++y)
      std::copy(colour.begin(), colour.end(),
                out.pixels.begin() + (static_cast<std::size_t>(y) * w + pad + x) * 3);
  }
  return caption.empty() ? out : caption_picture(out, caption);
}

}  // namespace mltool::slide
