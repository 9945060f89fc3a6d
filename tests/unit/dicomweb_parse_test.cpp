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
