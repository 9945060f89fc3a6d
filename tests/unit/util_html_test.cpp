// util/html.hpp: the escaping and URL encoding every page and chart uses.
#include "mltool/util/html.hpp"

#include <gtest/gtest.h>

#include <string>

namespace mltool::util {
namespace {

TEST(Html, TextIsEscapedAndValidUtf8) {
  EXPECT_EQ(html_text("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  EXPECT_EQ(html_text("fold’s Kaplan–Meier"), "fold’s Kaplan–Meier");  // kept as UTF-8
  EXPECT_EQ(html_text(std::string("a\xff") + "b"),
            "a\xEF\xBF\xBD"
            "b");                                                             // invalid byte
  EXPECT_EQ(html_text(std::string("\xC0\x80")), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong NUL
  EXPECT_EQ(html_text(std::string("x\x01y")), "x\xEF\xBF\xBDy");  // XML 1.0 has no U+0001
  EXPECT_EQ(html_text(std::string("x\0y", 3)), "x\xEF\xBF\xBDy");
  EXPECT_EQ(html_text("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // cut short
  EXPECT_EQ(html_text("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
}

TEST(Html, AColumnNameCannotOpenAnElement) {
  const std::string hostile = "x<img src=x onerror=alert(1)>";
  EXPECT_EQ(html_text("val_auc_" + hostile), "val_auc_x&lt;img src=x onerror=alert(1)&gt;");
  // In a double-quoted attribute a quote cannot end the value.
  EXPECT_EQ(html_attribute("a\" onmouseover=\"alert(1)"), "a&quot; onmouseover=&quot;alert(1)");
  EXPECT_EQ(html_attribute("it's"), "it&#39;s");
}

TEST(Html, PathSegmentsEncodeEveryReservedByte) {
  EXPECT_EQ(url_path_segment("Slide-1_a.b~c"), "Slide-1_a.b~c");
  EXPECT_EQ(url_path_segment("a#1?x=%2"), "a%231%3Fx%3D%252");
  EXPECT_EQ(url_path_segment("a/b c:d"), "a%2Fb%20c%3Ad");
  EXPECT_EQ(url_path_segment("<\"'&>"), "%3C%22%27%26%3E");
  EXPECT_EQ(url_path_segment("é"), "%C3%A9");  // UTF-8 bytes, as browsers send them
}

TEST(Html, HrefEncodesSegmentsAndKeepsSeparators) {
  EXPECT_EQ(href("heatmaps/a#1.png"), "heatmaps/a%231.png");
  EXPECT_EQ(href("heatmaps/50%?.png"), "heatmaps/50%25%3F.png");
  EXPECT_EQ(href("fold-1/report.html"), "fold-1/report.html");
  EXPECT_EQ(href("/runs/r 1/report.html"), "/runs/r%201/report.html");
  EXPECT_EQ(href("//host/x"), "/host/x");  // never a network-path reference
  EXPECT_EQ(href("a//b/"), "a/b/");
  EXPECT_EQ(href("javascript:alert(1)"), "javascript%3Aalert%281%29");  // no scheme
  EXPECT_EQ(href("x\".png"), "x%22.png");
  EXPECT_EQ(href(""), "");
}

}  // namespace
}  // namespace mltool::util
