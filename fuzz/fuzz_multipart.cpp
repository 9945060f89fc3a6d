// libFuzzer target: arbitrary bytes as a DICOMweb answer (lib/io/dicomweb_parse.cpp): the first
// line is the response's Content-Type header value, the rest its body, split by split_multipart
// (RFC 2387 multipart/related, as WADO-RS frame retrieval sends frames); the first line is also
// read as a series URL (parse_dicomweb_url). The oracle: each returns or throws mltool::Error
// (anything else, a crash or a sanitizer report is a finding), and what is returned holds
// together:
//   - split_multipart: every part's bytes are found in the body, their sizes add up to no more
//     than the body; a transfer syntax comes from the Content-Type or from the body;
//   - parse_dicomweb_url: study and series UIDs non-empty, digits and dots only, the URL
//     without a trailing '/' and starting with the base.
//
// Seeds: fuzz/seeds/fuzz_multipart (two frames with their own transfer syntax, one frame with
// the answer's, a frame holding the boundary's bytes, a truncated answer).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "fuzz_check.hpp"
#include "mltool/io/dicomweb.hpp"
#include "mltool/util/error.hpp"

const char* const kFuzzTarget = "fuzz_multipart";

namespace {

bool uid(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789.") == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto newline = input.find('\n');
  const std::string content_type = input.substr(0, newline);
  const std::string body = newline == std::string::npos ? "" : input.substr(newline + 1);
  expect_clean("split_multipart", [&] {
    const auto parts = mltool::io::split_multipart(body, content_type, "http://fuzz/frames");
    std::size_t total = 0;
    for (const auto& p : parts) {
      total += p.bytes.size();
      if (total > body.size()) finding("the parts hold more bytes than the body");
      if (body.find(p.bytes) == std::string::npos) finding("a part's bytes are not in the body");
      if (!p.transfer_syntax.empty() && content_type.find(p.transfer_syntax) == std::string::npos &&
          body.find(p.transfer_syntax) == std::string::npos)
        finding("a transfer syntax from nowhere");
    }
  });
  expect_clean("parse_dicomweb_url", [&] {
    const auto url = mltool::io::parse_dicomweb_url(content_type);
    if (!uid(url.study) || !uid(url.series)) finding("a UID that is not digits and dots");
    if (!url.url.empty() && url.url.back() == '/') finding("a URL with a trailing '/'");
    if (url.url.rfind(url.base, 0) != 0) finding("the base is not the URL's start");
  });
  return 0;
}
