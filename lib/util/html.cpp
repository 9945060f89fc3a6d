// Escaping and URL encoding for the pages and charts mltool writes (html.hpp).
#include "mltool/util/html.hpp"

#include <algorithm>
#include <cstdint>

namespace mltool::util {
namespace {

// The length of the UTF-8 sequence starting at s[i] (0 when invalid: a bad lead or
// continuation byte, cut short, overlong, a surrogate or above U+10FFFF) and its code point.
std::size_t utf8_sequence(const std::string& s, std::size_t i, std::uint32_t& cp) {
  const auto b = static_cast<unsigned char>(s[i]);
  std::size_t n = 0;
  if (b < 0x80) return cp = b, 1;
  if ((b & 0xE0) == 0xC0)
    cp = b & 0x1F, n = 2;
  else if ((b & 0xF0) == 0xE0)
    cp = b & 0x0F, n = 3;
  else if ((b & 0xF8) == 0xF0)
    cp = b & 0x07, n = 4;
  else
    return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (c & 0x3F);
  }
  static constexpr std::uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

bool unreserved(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

}  // namespace

std::string html_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t cp = 0;
    const std::size_t n = utf8_sequence(text, i, cp);
    const bool control =
        (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0xFFFE || cp == 0xFFFF;
    if (n == 0 || control) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += n == 0 ? 1 : n;
      continue;
    }
    switch (cp) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.append(text, i, n);
    }
    i += n;
  }
  return out;
}

std::string html_attribute(const std::string& value) { return html_text(value); }

std::string url_path_segment(const std::string& segment) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(segment.size());
  for (const unsigned char c : segment) {
    if (unreserved(c)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string href(const std::string& path) {
  std::string out;
  if (!path.empty() && path.front() == '/') out += '/';
  for (std::size_t at = 0; at <= path.size();) {
    const std::size_t slash = std::min(path.find('/', at), path.size());
    if (slash > at) {
      if (!out.empty() && out.back() != '/') out += '/';
      out += url_path_segment(path.substr(at, slash - at));
    }
    at = slash + 1;
  }
  if (path.size() > 1 && path.back() == '/' && out.back() != '/') out += '/';
  return html_attribute(out);
}

}  // namespace mltool::util
