// A small raster canvas for the pictures mltool writes (inspect --plot, train's
// cross-validation pictures): filled rectangles and text in a built-in 5x7 bitmap font
// (digits, upper case — lower case is drawn as upper case — and . , : - _ ( ) % / = + ; ?),
// written as a PNG. No fonts or plotting libraries needed.
#pragma once

#include <cstdint>
#include <string>

#include "mltool/io/image_codec.hpp"

namespace mltool::io {

struct Rgb {
  std::uint8_t r, g, b;
};

class Canvas {
 public:
  Canvas(int width, int height);
  /// Fills [x0, x1) x [y0, y1), clipped.
  void fill(int x0, int y0, int x1, int y1, Rgb c);
  /// Text with its top left at (x, y), `scale` pixels per font dot; returns the x after it.
  int text(int x, int y, const std::string& s, Rgb c, int scale = 2);
  static int text_width(const std::string& s, int scale = 2) {
    return static_cast<int>(s.size()) * 6 * scale;
  }
  const RgbImage& image() const { return image_; }

 private:
  RgbImage image_;
};

}  // namespace mltool::io
