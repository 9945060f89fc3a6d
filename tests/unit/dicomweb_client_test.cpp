// Where DicomwebClient lets its credentials go (io/dicomweb.cpp), decided before any request:
// a bearer token only to the origins of DicomwebOptions::origins (the slide URLs the user
// named, --dicomweb-origin), and a token or a URL's password over plain http:// only to a
// loopback address. tests/cli/dicomweb_limits_test.py checks the same against a real server.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "mltool/io/dicomweb.hpp"

namespace {

namespace io = mltool::io;

const char* const kStore = "http://127.0.0.1:8042/dicom-web/studies/1.2/series/3.4";

// Options with a token file holding "t0ken".
io::DicomwebOptions with_token() {
  static const std::string file = [] {
    const std::string path = ::testing::TempDir() + "dicomweb_client_test_token";
    std::ofstream(path) << "t0ken\n";
    return path;
  }();
  io::DicomwebOptions o;
  o.token_file = file;
  return o;
}

// The refusal's message, or "" when the client is made.
std::string refusal(const std::string& url, const io::DicomwebOptions& o) {
  try {
    const io::DicomwebClient client(io::parse_dicomweb_url(url), o);
    return "";
  } catch (const io::DicomwebAuthError& e) {
    return e.what();
  }
}

TEST(DicomwebClientOrigins, TheTokenGoesOnlyWhereTheUserSaid) {
  io::DicomwebOptions o = with_token();
  const std::string why = refusal(kStore, o);
  EXPECT_NE(why.find("--dicomweb-origin http://127.0.0.1:8042"), std::string::npos) << why;
  EXPECT_EQ(why.find("t0ken"), std::string::npos) << why;
  io::allow_origin(o, "http://LOCALHOST:9/x");  // another origin allows nothing here
  EXPECT_NE(refusal(kStore, o), "");
  io::allow_origin(o, "http://127.0.0.1:8042/dicom-web/studies/5/series/6");
  EXPECT_EQ(refusal(kStore, o), "");
  // Without a token there is nothing to give away: no origin is checked.
  EXPECT_EQ(refusal(kStore, io::DicomwebOptions{}), "");
}

TEST(DicomwebClientOrigins, PlainHttpOnlyToLoopback) {
  io::DicomwebOptions o = with_token();
  const std::string far = "http://10.255.255.1/dw/studies/1/series/2";
  io::allow_origin(o, far);
  const std::string why = refusal(far, o);
  EXPECT_NE(why.find("https://"), std::string::npos) << why;
  EXPECT_NE(why.find("--dicomweb-token-file"), std::string::npos) << why;
  io::allow_origin(o, "https://10.255.255.1/dw");
  EXPECT_EQ(refusal("https://10.255.255.1/dw/studies/1/series/2", o), "");
  // A password in the URL, without a token: the same rule, and never in the message.
  const std::string secret = "http://u:s3cret@10.255.255.1/dw/studies/1/series/2";
  const std::string why_password = refusal(secret, io::DicomwebOptions{});
  EXPECT_NE(why_password.find("user name and password"), std::string::npos) << why_password;
  EXPECT_EQ(why_password.find("s3cret"), std::string::npos) << why_password;
  EXPECT_EQ(refusal("http://u:s3cret@127.0.0.1:8042/dw/studies/1/series/2", {}), "");
}

}  // namespace
