// The one way mltool writes text and links into its HTML pages (the QC contact sheet, train's
// and predict's report.html) and its SVG charts: every text escaped, every link URL-encoded,
// so a slide id, a labels column or a run name from someone else's files cannot add an element
// or an attribute to a page, nor break a link (docs/reliability.md).
#pragma once

#include <string>

namespace mltool::util {

/// `text` made safe as HTML (and XML) character data: & < > " ' escaped, invalid UTF-8 and the
/// control characters XML 1.0 forbids (all below U+0020 but tab, newline and carriage return)
/// replaced by U+FFFD. Other UTF-8 is kept as is.
std::string html_text(const std::string& text);

/// `value` made safe inside a double-quoted attribute value (`name="…"`): escaped as
/// html_text (quotes included), so it cannot end the attribute.
std::string html_attribute(const std::string& value);

/// One path segment of a URL: every byte but the unreserved ones (A-Z a-z 0-9 - _ . ~)
/// percent-encoded, so '/', '#', '?', '%', ':' and spaces are data, never URL syntax.
std::string url_path_segment(const std::string& segment);

/// A file path (relative to the page, or absolute) as an href/src attribute value, ready to
/// write between double quotes: each '/'-separated segment encoded by url_path_segment, the
/// separators kept (repeated ones collapsed, so "//x" is never a host), then html_attribute.
/// "heatmaps/a#1.png" -> "heatmaps/a%231.png".
std::string href(const std::string& path);

}  // namespace mltool::util
