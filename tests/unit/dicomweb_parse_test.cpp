// The parts of the DICOMweb client that need no server (io/dicomweb_parse.cpp): series URLs
// (and the slide id they give), and multipart/related answers as WADO-RS frame retrieval sends
// them — boundaries quoted or not, a transfer syntax per part or for the whole answer, bodies
// that hold CR LF and "--", and truncated answers, which are FormatErrors naming the URL.
// tests/cli/dicomweb_test.py checks the whole client against Orthanc.
#include <gtest/gtest.h>

#include <string>

#include "mltool/io/dicomweb.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/util/error.hpp"

namespace {

using mltool::FormatError;
using mltool::UsageError;
namespace io = mltool::io;

TEST(DicomwebUrl, ParsesSeriesUrls) {
  const auto u =
      io::parse_dicomweb_url("https://pacs.example:8443/dicom-web/studies/1.2.3/series/4.5.6/");
  EXPECT_EQ(u.url, "https://pacs.example:8443/dicom-web/studies/1.2.3/series/4.5.6");
  EXPECT_EQ(u.base, "https://pacs.example:8443/dicom-web");
  EXPECT_EQ(u.study, "1.2.3");
  EXPECT_EQ(u.series, "4.5.6");
  EXPECT_EQ(io::parse_dicomweb_url("http://h/studies/1/series/2").base, "http://h");
  EXPECT_TRUE(io::is_dicomweb_url("http://h/x"));
  EXPECT_FALSE(io::is_dicomweb_url("/data/http://x"));
  // The slide id is the series UID, whole (a file's id would lose ".6" as an extension).
  EXPECT_EQ(io::slide_id_for("http://h/dicom-web/studies/1.2.3/series/4.5.6"), "4.5.6");
}

TEST(DicomwebUrl, RefusesOtherUrls) {
  for (const char* bad :
       {"http://h/studies/1.2", "http://h/series/1/studies/2", "http://h/studies/1.2/series/",
        "http://h/studies/1.2/series/3/instances/4", "ftp://h/studies/1/series/2",
        "http:///studies/1/series/2"}) {
    try {
      io::parse_dicomweb_url(bad);
      ADD_FAILURE() << bad << " parsed";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("not a DICOMweb series URL"), std::string::npos)
          << e.what();
    }
  }
}

// Every UID that goes into a request's path must be a DICOM UID: "1.2/../../admin" in a
// SOPInstanceUID would send the user's authenticated GET to /admin (libcurl collapses "../").
TEST(DicomUid, FollowsTheGrammar) {
  const std::string longest = "1." + std::string(62, '2');
  ASSERT_EQ(longest.size(), 64u);
  for (const std::string& good : {std::string("1.2.840.10008.1.2.4.50"), std::string("0"),
                                  std::string("2.25.329800735698586629295641978511506172918"),
                                  std::string("1.3.6.1.4.1.5962.99.1.1.1"), longest})
    EXPECT_TRUE(io::is_dicom_uid(good)) << good;
  for (const std::string& bad :
       {std::string(""), std::string("."), std::string(".."), std::string("1..2"),
        std::string("1.2/../x"), std::string("1.2/../../../../admin"), longest + "3",
        std::string(".1.2"), std::string("1.2."), std::string("1.2 "), std::string("%2e%2e"),
        std::string("1.2\\..\\x"), std::string("1.2?x=1"), std::string("1,2"),
        std::string("1.2\0", 4)})
    EXPECT_FALSE(io::is_dicom_uid(bad)) << bad;
}

TEST(DicomwebUrl, RefusesUidsThatAreNotUids) {
  for (const char* bad : {"http://h/studies/../series/1.2", "http://h/studies/1..2/series/3",
                          "http://h/studies/1.2/series/.", "http://h/studies/1.2/series/..",
                          "http://h/studies/.1/series/2", "http://h/studies/1.2./series/3"}) {
    try {
      io::parse_dicomweb_url(bad);
      ADD_FAILURE() << bad << " parsed";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("is not a DICOM UID"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(bad, 0), 0u) << e.what();
    }
  }
}

TEST(DicomwebMultipart, SplitsParts) {
  const std::string b = "XyZ";
  const std::string first = std::string("\xff\xd8\r\n--XyZx\xff\xd9", 10);  // CR LF and "--" inside
  const std::string body =
      "preamble\r\n--XyZ\r\nContent-Type: image/jpeg; "
      "transfer-syntax=1.2.840.10008.1.2.4.50\r\n\r\n" +
      first + "\r\n--XyZ\r\ncontent-type: application/octet-stream\r\n\r\nraw\r\n--XyZ--\r\n";
  const auto parts = io::split_multipart(body,
                                         "multipart/related; type=\"application/octet-stream; "
                                         "transfer-syntax=1.2.840.10008.1.2.1\"; boundary=\"" +
                                             b + "\"",
                                         "U");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].bytes, first);
  EXPECT_EQ(parts[0].transfer_syntax, "1.2.840.10008.1.2.4.50");
  EXPECT_EQ(parts[1].bytes, "raw");
  EXPECT_EQ(parts[1].transfer_syntax, "1.2.840.10008.1.2.1");  // the answer's
}

TEST(DicomwebMultipart, RefusesMalformedAnswers) {
  const std::string type = "multipart/related; boundary=B";
  for (const auto& [body, content_type] :
       std::initializer_list<std::pair<std::string, std::string>>{
           {"--B\r\n\r\nabc\r\n--B--", "application/json"},
           {"--B\r\n\r\nabc", type},
           {"--B\r\nContent-Type: image/jpeg", type},
           {"--B\r\n\r\nabc\r\n--B", type}}) {
    try {
      io::split_multipart(body, content_type, "http://h/frames/1");
      ADD_FAILURE() << body << " split";
    } catch (const FormatError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("http://h/frames/1: ", 0), 0u) << e.what();
    }
  }
}

}  // namespace

namespace mltool_dicomweb_origins {

using mltool::UsageError;
namespace io = mltool::io;

TEST(DicomwebOrigin, NormalisesSchemeHostAndPort) {
  EXPECT_EQ(io::url_origin("HTTPS://PACS.Example/dicom-web/studies/1/series/2", "x"),
            "https://pacs.example:443");
  EXPECT_EQ(io::url_origin("https://pacs.example:443", "x"), "https://pacs.example:443");
  EXPECT_EQ(io::url_origin("http://u:p@127.0.0.1:8042/dicom-web?x=1", "x"),
            "http://127.0.0.1:8042");
  EXPECT_EQ(io::url_origin("http://[::1]:8042/a", "x"), "http://[::1]:8042");
  EXPECT_EQ(io::url_origin("http://h", "x"), "http://h:80");
  EXPECT_NE(io::url_origin("http://h:8080", "x"), io::url_origin("https://h:8080", "x"));
  for (const char* bad : {"ftp://h/", "h:80", "http:///studies/1", "http://h:0/", "http://h:99999",
                          "http://h:8x/", "http://u:p@/x"}) {
    try {
      io::url_origin(bad, "--dicomweb-origin");
      ADD_FAILURE() << bad << " has an origin";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--dicomweb-origin"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("u:p"), std::string::npos) << e.what();
    }
  }
}

TEST(DicomwebOrigin, TellsLoopbackAddresses) {
  for (const char* yes : {"http://127.0.0.1:80", "http://127.1.2.3:8042", "http://localhost:80",
                          "http://LOCALHOST:1", "http://[::1]:8042"})
    EXPECT_TRUE(io::is_loopback_origin(yes)) << yes;
  for (const char* no :
       {"http://10.255.255.1:80", "http://128.0.0.1:80", "http://127.0.0.1.evil:80",
        "http://localhost.evil:80", "http://[::2]:80", "http://127.0.0.256:80"})
    EXPECT_FALSE(io::is_loopback_origin(no)) << no;
}

TEST(DicomwebOrigin, AllowsTheOriginsOfUrlsNamed) {
  io::DicomwebOptions o;
  io::allow_origin(o, "http://u:p@127.0.0.1:8042/dicom-web/studies/1/series/2");
  io::allow_origin(o, "http://127.0.0.1:8042/other/studies/3/series/4");
  io::allow_origin(o, "/data/slide.svs");             // no URL: nothing
  io::allow_origin(o, "http:///studies/1/series/2");  // fails alone when opened
  ASSERT_EQ(o.origins.size(), 1u);
  EXPECT_EQ(o.origins[0], "http://127.0.0.1:8042");
}

TEST(DicomwebRedaction, DropsUserInfoAndQueryValues) {
  EXPECT_EQ(io::redacted_url("https://user:pa%40ss@pacs.example:8443/dw/studies/1/series/2"),
            "https://pacs.example:8443/dw/studies/1/series/2");
  EXPECT_EQ(io::redacted_url("https://h/dw/studies/1/series/2?access_token=abc&x=1#f"),
            "https://h/dw/studies/1/series/2?access_token=REDACTED&x=REDACTED");
  EXPECT_EQ(io::redacted_url("http://u@h?flag"), "http://h?flag");
  EXPECT_EQ(io::redacted_url("/data/a@b.svs"), "/data/a@b.svs");
  EXPECT_EQ(io::redacted_url("http://h/x@y"), "http://h/x@y");  // an '@' of the path stays
  // A series URL keeps its credentials apart, never in what it shows.
  const auto u = io::parse_dicomweb_url("http://u:p@127.0.0.1:8042/dicom-web/studies/1/series/2");
  EXPECT_EQ(u.url, "http://127.0.0.1:8042/dicom-web/studies/1/series/2");
  EXPECT_EQ(u.base, "http://127.0.0.1:8042/dicom-web");
  EXPECT_EQ(u.userinfo, "u:p");
  try {
    io::parse_dicomweb_url("https://u:secret@h/dw/studies/1/series/2?token=secret");
    ADD_FAILURE() << "a query parsed as part of the series UID";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).find("secret"), std::string::npos) << e.what();
  }
}

TEST(DicomwebRetryAfter, ReadsSecondsAndHttpDates) {
  const std::int64_t now = 784111777;  // Sun, 06 Nov 1994 08:49:37 GMT
  EXPECT_EQ(io::parse_retry_after(" 2", now), 2.0);
  EXPECT_EQ(io::parse_retry_after("120\r\n", now), 120.0);
  EXPECT_EQ(io::parse_retry_after("99999999999999999999", now), 1e9);
  EXPECT_EQ(io::parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now), 10.0);
  EXPECT_EQ(io::parse_retry_after("Sun, 06 Nov 1994 08:49:30 GMT", now), 0.0);  // past
  EXPECT_EQ(io::parse_retry_after("Mon, 07 Nov 1994 08:49:37 GMT", now), 86400.0);
  for (const char* bad : {"", "-1", "2.5", "soon", "Sun, 06 Nov 1994 08:49:47 CET",
                          "Sun, 06 Foo 1994 08:49:47 GMT", "Sun, 06 Nov 1994 08:49:47 GMT x"})
    EXPECT_FALSE(io::parse_retry_after(bad, now).has_value()) << bad;
}

TEST(DicomwebLimits, BoundFramesAnswersByWhatTheyCanHold) {
  // 256 frames of 256x256 RGB: twice the pixels, 4 kB a part, 64 kB.
  EXPECT_EQ(io::dicomweb_frames_limit(256, 256 * 256 * 3), 256u * (2 * 196608 + 4096) + 65536);
  EXPECT_EQ(io::dicomweb_frames_limit(1, 0), 2 * (std::uint64_t{64} << 20) + 4096 + 65536);
  EXPECT_LE(io::dicomweb_frames_limit(1024, ~std::uint64_t{0}), std::uint64_t{1} << 40);
}

}  // namespace mltool_dicomweb_origins
