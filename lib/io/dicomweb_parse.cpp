// The parts of io/dicomweb.hpp that need no network, built with or without slide support (the
// tile store's slide ids use the URL parser): series URLs, and multipart/related bodies
// (RFC 2387) as WADO-RS frame retrieval sends them: parts separated by "--BOUNDARY", each with
// its own headers (Content-Type names the frame's transfer syntax).
#include <algorithm>
#include <cctype>

#include "mltool/io/dicomweb.hpp"

namespace mltool::io {
namespace {

constexpr const char* kUrlForm = "http[s]://HOST[:PORT]/PATH/studies/STUDY_UID/series/SERIES_UID";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The value of parameter `name` in a header value ("a/b; name=v" or name="v"), or "".
std::string header_parameter(const std::string& value, const std::string& name) {
  const std::string low = lower(value);
  for (std::size_t at = low.find(name + "="); at != std::string::npos;
       at = low.find(name + "=", at + 1)) {
    if (at > 0 && low[at - 1] != ';' && low[at - 1] != ' ' && low[at - 1] != '"') continue;
    std::size_t start = at + name.size() + 1;
    if (start < value.size() && value[start] == '"') {
      const auto end = value.find('"', start + 1);
      return value.substr(start + 1, end == std::string::npos ? end : end - start - 1);
    }
    const auto end = value.find_first_of(";\" \r\n", start);
    return value.substr(start, end == std::string::npos ? end : end - start);
  }
  return "";
}

// The Content-Type of a part's header block, or "".
std::string part_content_type(const std::string& headers) {
  std::size_t line = 0;
  while (line < headers.size()) {
    auto end = headers.find("\r\n", line);
    if (end == std::string::npos) end = headers.size();
    const std::string text = headers.substr(line, end - line);
    if (lower(text).rfind("content-type:", 0) == 0) {
      const auto v = text.find_first_not_of(' ', 13);
      return v == std::string::npos ? "" : text.substr(v);
    }
    line = end + 2;
  }
  return "";
}

// Where the next delimiter line starts at or after `from`: CR LF "--" BOUNDARY followed by
// CR LF, "--" (the last) or white space (RFC 2046), not the same bytes inside a frame.
std::size_t next_delimiter(const std::string& body, const std::string& line, std::size_t from) {
  for (auto at = body.find(line, from); at != std::string::npos; at = body.find(line, at + 1)) {
    const std::size_t end = at + line.size();
    if (end == body.size() || body.compare(end, 2, "--") == 0 || body[end] == '\r' ||
        body[end] == ' ' || body[end] == '\t')
      return at;
  }
  return std::string::npos;
}

}  // namespace

bool is_dicomweb_url(const std::string& path) {
  return path.rfind("http://", 0) == 0 || path.rfind("https://", 0) == 0;
}

bool is_dicom_uid(const std::string& uid) {
  if (uid.empty() || uid.size() > 64) return false;
  bool digit_before = false;  // the component so far has a digit
  for (const char c : uid) {
    if (c == '.') {
      if (!digit_before) return false;  // a leading dot, or two in a row
      digit_before = false;
    } else if (c >= '0' && c <= '9') {
      digit_before = true;
    } else {
      return false;
    }
  }
  return digit_before;  // no trailing dot
}

DicomwebSeriesUrl parse_dicomweb_url(const std::string& url) {
  DicomwebSeriesUrl out;
  out.url = url;
  while (!out.url.empty() && out.url.back() == '/') out.url.pop_back();
  const auto studies = out.url.rfind("/studies/");
  const auto series = out.url.rfind("/series/");
  const auto scheme_end = out.url.find("://");
  const bool ok = is_dicomweb_url(url) && studies != std::string::npos &&
                  series != std::string::npos && studies > scheme_end + 3 && series > studies + 9;
  if (ok) {
    out.base = out.url.substr(0, studies);
    out.study = out.url.substr(studies + 9, series - studies - 9);
    out.series = out.url.substr(series + 8);
  }
  if (!ok) throw UsageError(url + ": not a DICOMweb series URL (" + kUrlForm + ")");
  const auto check = [&url](const char* name, const std::string& uid) {
    if (!is_dicom_uid(uid))
      throw UsageError(url + ": not a DICOMweb series URL (" + kUrlForm + "): the " + name +
                       " UID '" + uid +
                       "' is not a DICOM UID (digits and dots, at most 64 characters)");
  };
  check("study", out.study);
  check("series", out.series);
  return out;
}

std::vector<DicomwebFrame> split_multipart(const std::string& body, const std::string& content_type,
                                           const std::string& url) {
  const std::string boundary = header_parameter(content_type, "boundary");
  if (boundary.empty())
    throw FormatError(url +
                      ": the answer is not multipart/related with a boundary (Content-Type '" +
                      content_type + "')");
  // The transfer syntax of the whole answer: type="image/jpeg; transfer-syntax=..." or a
  // transfer-syntax parameter of its own.
  const std::string whole = header_parameter(content_type, "transfer-syntax");
  const std::string delimiter = "--" + boundary;
  std::vector<DicomwebFrame> parts;
  std::size_t at = body.find(delimiter);
  while (at != std::string::npos) {
    at += delimiter.size();
    if (body.compare(at, 2, "--") == 0) return parts;  // the closing delimiter
    const auto headers_end = body.find("\r\n\r\n", at);
    if (headers_end == std::string::npos)
      throw FormatError(url + ": part " + std::to_string(parts.size() + 1) +
                        " of the multipart answer has no end of headers");
    const std::size_t start = headers_end + 4;
    const auto next = next_delimiter(body, "\r\n" + delimiter, start);
    if (next == std::string::npos)
      throw FormatError(url + ": part " + std::to_string(parts.size() + 1) +
                        " of the multipart answer is not closed (truncated answer?)");
    DicomwebFrame part;
    part.bytes = body.substr(start, next - start);
    part.transfer_syntax =
        header_parameter(part_content_type(body.substr(at, headers_end - at)), "transfer-syntax");
    if (part.transfer_syntax.empty()) part.transfer_syntax = whole;
    parts.push_back(std::move(part));
    at = next + 2;
  }
  throw FormatError(url + ": the multipart answer has no closing boundary (truncated answer?)");
}

}  // namespace mltool::io
