// The parts of io/dicomweb.hpp that need no network, built with or without slide support (the
// tile store's slide ids use the URL parser): series URLs, origins and redaction, Retry-After
// values, and multipart/related bodies
// (RFC 2387) as WADO-RS frame retrieval sends them: parts separated by "--BOUNDARY", each with
// its own headers (Content-Type names the frame's transfer syntax).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <ctime>

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

// A URL's parts: "scheme://" userinfo "@" authority rest (path, query, fragment).
struct UrlParts {
  std::string scheme, userinfo, authority, rest;
};

std::optional<UrlParts> split_url(const std::string& url) {
  const auto colon = url.find("://");
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  UrlParts p;
  p.scheme = lower(url.substr(0, colon));
  const std::size_t start = colon + 3;
  const auto end = std::min(url.find_first_of("/?#", start), url.size());
  std::string authority = url.substr(start, end - start);
  if (const auto at = authority.rfind('@'); at != std::string::npos) {
    p.userinfo = authority.substr(0, at);
    authority.erase(0, at + 1);
  }
  p.authority = authority;
  p.rest = url.substr(end);
  return p;
}

// "host:port" of an authority, the host in lower case, the scheme's port when none is given;
// "" when there is no host or the port is not a number of 1 to 65535.
std::string host_port(const std::string& authority, const std::string& scheme) {
  std::string host = authority, port;
  const auto bracket = authority.rfind(']');  // an IPv6 address: [::1]:8042
  const auto colon = authority.rfind(':');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (port.empty()) port = scheme == "https" ? "443" : "80";
  if (host.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return "";
  const long number = std::stol(port);
  if (number < 1 || number > 65535) return "";
  return lower(host) + ":" + std::to_string(number);
}

// An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") as Unix seconds, or nullopt.
std::optional<std::int64_t> imf_fixdate(const std::string& text) {
  static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char weekday[4] = "", month[4] = "", zone[4] = "";
  int day = 0, year = 0, hour = 0, minute = 0, second = 0, used = 0;
  if (std::sscanf(text.c_str(), "%3s, %d %3s %d %d:%d:%d %3s%n", weekday, &day, month, &year, &hour,
                  &minute, &second, zone, &used) != 8 ||
      static_cast<std::size_t>(used) != text.size() || std::strcmp(zone, "GMT") != 0)
    return std::nullopt;
  int m = 0;
  while (m < 12 && std::strcmp(month, kMonths[m]) != 0) ++m;
  if (m == 12 || day < 1 || day > 31 || year < 1970 || hour > 23 || minute > 59 || second > 60)
    return std::nullopt;
  std::tm t{};
  t.tm_year = year - 1900;
  t.tm_mon = m;
  t.tm_mday = day;
  t.tm_hour = hour;
  t.tm_min = minute;
  t.tm_sec = second;
  return static_cast<std::int64_t>(timegm(&t));
}

}  // namespace

std::uint64_t dicomweb_frames_limit(std::size_t frames, std::uint64_t frame_bytes) {
  constexpr std::uint64_t kUnknownFrame = std::uint64_t{64} << 20, kMost = std::uint64_t{1} << 40;
  const std::uint64_t each = 2 * std::min(frame_bytes ? frame_bytes : kUnknownFrame, kMost) + 4096;
  return std::min<std::uint64_t>(kMost, each * std::max<std::size_t>(frames, 1) + 65536);
}

std::string url_origin(const std::string& url, const std::string& what) {
  const auto p = split_url(url);
  const std::string hp = p ? host_port(p->authority, p->scheme) : "";
  if (!p || (p->scheme != "http" && p->scheme != "https") || hp.empty())
    throw UsageError(what + ": " + redacted_url(url) +
                     " is no http:// or https:// URL with a host (an origin is "
                     "http[s]://HOST[:PORT])");
  return p->scheme + "://" + hp;
}

bool is_loopback_origin(const std::string& origin) {
  const auto p = split_url(origin);
  if (!p) return false;
  const std::string hp = host_port(p->authority, p->scheme);
  const std::string host = hp.substr(0, hp.rfind(':'));
  if (host == "localhost" || host == "[::1]") return true;
  unsigned a = 0, b = 0, c = 0, d = 0;
  int used = 0;
  return std::sscanf(host.c_str(), "%u.%u.%u.%u%n", &a, &b, &c, &d, &used) == 4 &&
         static_cast<std::size_t>(used) == host.size() && a == 127 && b < 256 && c < 256 && d < 256;
}

void allow_origin(DicomwebOptions& options, const std::string& url) {
  std::string origin;
  try {
    origin = url_origin(url, "a slide URL");
  } catch (const UsageError&) {
    return;  // no URL: nothing to allow (a bad one fails alone when it is opened)
  }
  if (std::find(options.origins.begin(), options.origins.end(), origin) == options.origins.end())
    options.origins.push_back(origin);
}

std::string redacted_url(const std::string& url) {
  const auto p = split_url(url);
  if (!p) return url;
  std::string rest = p->rest;
  const auto query = rest.find('?');
  if (query != std::string::npos) {
    const auto fragment = rest.find('#', query);
    std::string q =
        rest.substr(query + 1, fragment == std::string::npos ? fragment : fragment - query - 1);
    std::string out;
    for (std::size_t at = 0; at <= q.size();) {
      auto amp = q.find('&', at);
      if (amp == std::string::npos) amp = q.size();
      const std::string param = q.substr(at, amp - at);
      const auto eq = param.find('=');
      out += (at ? "&" : "") +
             (eq == std::string::npos ? param : param.substr(0, eq + 1) + "REDACTED");
      at = amp + 1;
    }
    rest = rest.substr(0, query + 1) + out;
  }
  return url.substr(0, url.find("://") + 3) + p->authority + rest;
}

std::optional<double> parse_retry_after(const std::string& value, std::int64_t now) {
  const auto first = value.find_first_not_of(" \t");
  if (first == std::string::npos) return std::nullopt;
  const std::string v = value.substr(first, value.find_last_not_of(" \t\r\n") - first + 1);
  if (v.find_first_not_of("0123456789") == std::string::npos)
    return v.size() > 9 ? 1e9 : static_cast<double>(std::stol(v));
  const auto when = imf_fixdate(v);
  if (!when) return std::nullopt;
  return static_cast<double>(std::max<std::int64_t>(0, *when - now));
}

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

DicomwebSeriesUrl parse_dicomweb_url(const std::string& given) {
  DicomwebSeriesUrl out;
  const auto parts = split_url(given);  // the user name and password apart
  if (parts) out.userinfo = parts->userinfo;
  const std::string url =
      parts ? given.substr(0, given.find("://") + 3) + parts->authority + parts->rest : given;
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
  const std::string shown = redacted_url(url);  // no user name, password or query value
  if (!ok) throw UsageError(shown + ": not a DICOMweb series URL (" + kUrlForm + ")");
  const auto check = [&shown](const char* name, const std::string& uid) {
    const auto query = uid.find_first_of("?#");  // its values are no one's to read
    if (!is_dicom_uid(uid))
      throw UsageError(shown + ": not a DICOMweb series URL (" + kUrlForm + "): the " + name +
                       " UID '" + uid.substr(0, query) + "'" +
                       (query == std::string::npos ? "" : " (and a query: a series URL has none)") +
                       " is not a DICOM UID (digits and dots, at most 64 characters)");
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
