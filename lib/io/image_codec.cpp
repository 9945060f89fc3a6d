#include "mltool/io/image_codec.hpp"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstring>

#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::io {

std::string encode_jpeg(const std::uint8_t* rgb, int width, int height, int quality) {
  struct Compressor {
    tjhandle handle = tjInitCompress();
    ~Compressor() {
      if (handle) tjDestroy(handle);
    }
  };
  thread_local Compressor compressor;
  if (!compressor.handle) throw ResourceError("libjpeg-turbo: cannot create a compressor");
  const int subsampling = quality >= 90 ? TJSAMP_444 : TJSAMP_420;
  // A worst-case buffer per thread, reused: zero-filling a fresh one per tile cost 5% of a run.
  thread_local std::vector<unsigned char> buffer;
  buffer.resize(std::max<std::size_t>(buffer.size(), tjBufSize(width, height, subsampling)));
  unsigned char* data = buffer.data();
  unsigned long size = buffer.size();
  if (tjCompress2(compressor.handle, rgb, width, width * 3, height, TJPF_RGB, &data, &size,
                  subsampling, quality, TJFLAG_NOREALLOC) != 0)
    throw ResourceError(std::string("libjpeg-turbo: ") + tjGetErrorStr2(compressor.handle));
  return std::string(reinterpret_cast<const char*>(data), size);
}

namespace {

// `pixels` (width × height, `channels` interleaved bytes per pixel in `format`) as a PNG.
std::string encode_png_as(const std::uint8_t* pixels, int width, int height, int channels,
                          png_uint_32 format) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = format;
  const int stride = width * channels;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, pixels, stride, nullptr))
    throw ResourceError(std::string("libpng: ") + image.message);
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&image, out.data(), &size, 0, pixels, stride, nullptr))
    throw ResourceError(std::string("libpng: ") + image.message);
  out.resize(size);
  return out;
}

}  // namespace

std::string encode_png(const std::uint8_t* rgb, int width, int height) {
  return encode_png_as(rgb, width, height, 3, PNG_FORMAT_RGB);
}

std::string encode_png_grey(const std::uint8_t* grey, int width, int height) {
  return encode_png_as(grey, width, height, 1, PNG_FORMAT_GRAY);
}

GreyImage decode_png_grey(const void* data, std::size_t size, const std::string& what) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data, size))
    throw FormatError(what + ": not a readable PNG: " + image.message);
  image.format = PNG_FORMAT_GRAY;
  GreyImage out;
  out.width = static_cast<int>(image.width);
  out.height = static_cast<int>(image.height);
  out.pixels.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr)) {
    png_image_free(&image);
    throw FormatError(what + ": corrupt PNG: " + image.message);
  }
  return out;
}

namespace {

struct Decompressor {
  tjhandle handle = tjInitDecompress();
  ~Decompressor() {
    if (handle) tjDestroy(handle);
  }
};

tjhandle decompressor() {
  thread_local Decompressor d;
  if (!d.handle) throw ResourceError("libjpeg-turbo: cannot create a decompressor");
  return d.handle;
}

ImageSize jpeg_size(const unsigned char* data, std::size_t size, const std::string& what) {
  tjhandle d = decompressor();
  int width = 0, height = 0, subsampling = 0, colourspace = 0;
  if (tjDecompressHeader3(d, data, static_cast<unsigned long>(size), &width, &height, &subsampling,
                          &colourspace) != 0)
    throw FormatError(what + ": not a readable JPEG: " + tjGetErrorStr2(d));
  return {width, height};
}

// The size in the header, checked against `expected` (when given) before anything is allocated.
void check_size(const ImageSize& got, const ImageSize* expected, const std::string& what) {
  if (expected && (got.width != expected->width || got.height != expected->height))
    throw FormatError(what + ": the image is " + std::to_string(got.width) + " x " +
                      std::to_string(got.height) + " pixels, not " +
                      std::to_string(expected->width) + " x " + std::to_string(expected->height));
}

void decode_jpeg(const unsigned char* data, std::size_t size, RgbImage& out,
                 const std::string& what, const ImageSize* expected) {
  const ImageSize header = jpeg_size(data, size, what);
  check_size(header, expected, what);
  const int width = header.width, height = header.height;
  out.width = width;
  out.height = height;
  out.pixels.resize(static_cast<std::size_t>(width) * height * 3);
  tjhandle d = decompressor();
  // TJFLAG_STOPONWARNING: a truncated or damaged stream is an error, not a grey bottom half.
  if (tjDecompress2(d, data, static_cast<unsigned long>(size), out.pixels.data(), width, width * 3,
                    height, TJPF_RGB, TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING) != 0)
    throw FormatError(what + ": corrupt JPEG: " + tjGetErrorStr2(d));
}

void decode_png(const void* data, std::size_t size, RgbImage& out, const std::string& what,
                const ImageSize* expected) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data, size))
    throw FormatError(what + ": not a readable PNG: " + image.message);
  try {
    check_size({static_cast<int>(image.width), static_cast<int>(image.height)}, expected, what);
  } catch (...) {
    png_image_free(&image);
    throw;
  }
  image.format = PNG_FORMAT_RGB;  // grey, palette, 16-bit converted; alpha composited below
  out.width = static_cast<int>(image.width);
  out.height = static_cast<int>(image.height);
  out.pixels.resize(PNG_IMAGE_SIZE(image));
  const png_color white{255, 255, 255};
  if (!png_image_finish_read(&image, &white, out.pixels.data(), 0, nullptr)) {
    png_image_free(&image);
    throw FormatError(what + ": corrupt PNG: " + image.message);
  }
}

bool is_jpeg(const unsigned char* bytes, std::size_t size) {
  return size >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
}

bool is_png(const unsigned char* bytes, std::size_t size) {
  return size >= 8 && std::memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) == 0;
}

void decode_as(const void* data, std::size_t size, RgbImage& out, const std::string& what,
               const ImageSize* expected) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (is_jpeg(bytes, size)) return decode_jpeg(bytes, size, out, what, expected);
  if (is_png(bytes, size)) return decode_png(data, size, out, what, expected);
  throw FormatError(what + ": neither JPEG nor PNG (" + std::to_string(size) + " bytes)");
}

}  // namespace

void decode_image(const void* data, std::size_t size, RgbImage& out, const std::string& what) {
  decode_as(data, size, out, what, nullptr);
}

void decode_image(const void* data, std::size_t size, RgbImage& out, const std::string& what,
                  const ImageSize& expected) {
  decode_as(data, size, out, what, &expected);
}

ImageSize image_size(const void* data, std::size_t size, const std::string& what) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (is_jpeg(bytes, size)) return jpeg_size(bytes, size, what);
  if (!is_png(bytes, size))
    throw FormatError(what + ": neither JPEG nor PNG (" + std::to_string(size) + " bytes)");
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data, size))
    throw FormatError(what + ": not a readable PNG: " + image.message);
  const ImageSize got{static_cast<int>(image.width), static_cast<int>(image.height)};
  png_image_free(&image);
  return got;
}

void write_png(const std::string& path, const RgbImage& image) {
  util::write_file_atomic(path, encode_png(image.pixels.data(), image.width, image.height));
}

const util::EnumNames<TileEncoding>& encoding_names() {
  static const util::EnumNames<TileEncoding> names = [] {
    util::EnumNames<TileEncoding> out;
    for (const auto& e : kEncodings) out.emplace_back(e.encoding, e.name);
    return out;
  }();
  return names;
}

const EncodingInfo kEncodings[2] = {
    {TileEncoding::jpeg, "jpeg", &encode_jpeg},
    {TileEncoding::png, "png",
     [](const std::uint8_t* rgb, int width, int height, int) {
       return encode_png(rgb, width, height);
     }},
};

const EncodingInfo& encoding_info(TileEncoding encoding) {
  for (const auto& e : kEncodings)
    if (e.encoding == encoding) return e;
  throw UsageError("unknown tile encoding");  // unreachable: every enumerator has a row
}

std::optional<TileEncoding> encoding_named(std::string_view name) {
  for (const auto& e : kEncodings)
    if (name == e.name) return e.encoding;
  return std::nullopt;
}

}  // namespace mltool::io
