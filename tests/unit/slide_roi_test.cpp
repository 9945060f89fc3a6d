// Tests of tile --roi's geometry (roi.hpp): QuPath GeoJSON in its three shapes, shares of
// tile boxes against areas worked out by hand (holes, MultiPolygons, overlapping regions, a
// repaired bow-tie), the class filter, the refusals (each naming the file, the feature and the
// option), the bounds on untrusted files, and the QC outline of the regions.
#include "mltool/slide/roi.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "mltool/slide/qc.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "support/temp_dir.hpp"

using mltool::InputError;
using mltool::UsageError;
using mltool::slide::Roi;
using mltool::slide::RoiJob;

namespace {

// A QuPath feature: one Polygon (rings as written) of class `cls` ("" unclassified).
std::string feature(const std::string& type, const std::string& coordinates,
                    const std::string& cls = "") {
  const std::string props = cls.empty()
                                ? R"({"objectType": "annotation"})"
                                : R"({"objectType": "annotation", "classification": {"name": ")" +
                                      cls + R"(", "color": [200, 0, 0]}})";
  return R"({"type": "Feature", "id": "a1b2", "geometry": {"type": ")" + type +
         R"(", "coordinates": )" + coordinates + R"(}, "properties": )" + props + "}";
}

std::string collection(const std::vector<std::string>& features) {
  std::string out = R"({"type": "FeatureCollection", "features": [)";
  for (std::size_t i = 0; i < features.size(); ++i) out += (i ? ", " : "") + features[i];
  return out + "]}";
}

// A square ring [x0, x1] × [y0, y1].
std::string square(double x0, double y0, double x1, double y1) {
  auto p = [](double x, double y) {
    return "[" + std::to_string(x) + ", " + std::to_string(y) + "]";
  };
  return "[" + p(x0, y0) + ", " + p(x1, y0) + ", " + p(x1, y1) + ", " + p(x0, y1) + ", " +
         p(x0, y0) + "]";
}

// The message of the InputError `f` throws ("" if none).
template <class F>
std::string input_error(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(Roi, PolygonWithHoleShares) {
  // 0..100 square with a 40..60 hole: area 10000 - 400.
  const Roi roi = Roi::parse(
      collection({feature(
          "Polygon", "[" + square(0, 0, 100, 100) + ", " + square(40, 40, 60, 60) + "]", "Tumor")}),
      "a.geojson", {});
  EXPECT_DOUBLE_EQ(roi.area(), 9600);
  EXPECT_EQ(roi.regions(), 1);
  EXPECT_DOUBLE_EQ(roi.share(0, 0, 20), 1);           // inside: the fast path
  EXPECT_DOUBLE_EQ(roi.share(200, 200, 20), 0);       // apart
  EXPECT_DOUBLE_EQ(roi.share(40, 40, 20), 0);         // the hole exactly
  EXPECT_NEAR(roi.share(30, 30, 20), 0.75, 1e-12);    // a quarter in the hole
  EXPECT_NEAR(roi.share(90, 0, 20), 0.5, 1e-12);      // half out on the right
  EXPECT_NEAR(roi.share(-10, -10, 20), 0.25, 1e-12);  // a corner
  EXPECT_NEAR(roi.share(95.5, 50, 10), 0.45, 1e-12);  // a real-valued box
  EXPECT_DOUBLE_EQ(roi.share(100, 0, 20), 0);         // touching the edge only
  ASSERT_EQ(roi.rings().size(), 2u);                  // shell and hole
  EXPECT_EQ(roi.classes(), std::vector<std::string>{"Tumor"});
}

TEST(Roi, MultiPolygonOverlapsAndClasses) {
  const std::string text = collection(
      {feature("MultiPolygon", "[[" + square(0, 0, 10, 10) + "], [" + square(20, 0, 30, 10) + "]]",
               "Tumor"),
       feature("Polygon", "[" + square(5, 0, 25, 10) + "]", "Stroma"),
       feature("Polygon", "[" + square(100, 100, 110, 110) + "]")});
  const Roi all = Roi::parse(text, "m.geojson", {});
  EXPECT_DOUBLE_EQ(all.area(), 300 + 100);  // 0..30 × 0..10 united, and the unclassified one
  EXPECT_EQ(all.regions(), 3);
  EXPECT_NEAR(all.share(0, 0, 10), 1, 1e-12);
  const Roi tumour = Roi::parse(text, "m.geojson", {"Tumor"});
  EXPECT_DOUBLE_EQ(tumour.area(), 200);
  EXPECT_NEAR(tumour.share(5, 0, 10), 0.5, 1e-12);  // 5..10 in, 10..15 between the parts
  const Roi two = Roi::parse(text, "m.geojson", {"Tumor", "Stroma"});
  EXPECT_DOUBLE_EQ(two.area(), 300);
  EXPECT_EQ(two.classes(), (std::vector<std::string>{"Stroma", "Tumor"}));
  const std::string missing = input_error([&] { Roi::parse(text, "m.geojson", {"Tumour"}); });
  EXPECT_TRUE(has(missing, "m.geojson")) << missing;
  EXPECT_TRUE(has(missing, "'Tumour' (--roi-class)")) << missing;
  EXPECT_TRUE(has(missing, "'Tumor' (1)")) << missing;
  EXPECT_TRUE(has(missing, "unclassified (1)")) << missing;
}

TEST(Roi, BareFeatureArrayAndUnclosedRing) {
  const std::string f = feature("Polygon", "[[[0, 0], [10, 0], [10, 10], [0, 10]]]");
  EXPECT_DOUBLE_EQ(Roi::parse(f, "f.geojson", {}).area(), 100);           // a bare Feature
  EXPECT_DOUBLE_EQ(Roi::parse("[" + f + "]", "f.json", {}).area(), 100);  // QuPath 0.2's array
}

TEST(Roi, BowTieIsRepaired) {
  // (0,0) (10,10) (10,0) (0,10): two triangles of 25 each, meeting at (5, 5).
  const Roi roi =
      Roi::parse(collection({feature("Polygon", "[[[0, 0], [10, 10], [10, 0], [0, 10], [0, 0]]]")}),
                 "bow.geojson", {});
  EXPECT_NEAR(roi.area(), 50, 1e-9);
  EXPECT_NEAR(roi.share(0, 0, 10), 0.5, 1e-12);
  EXPECT_NEAR(roi.share(0, 0, 5), 0.5, 1e-12);  // the left triangle's half of that box
}

TEST(Roi, PointsAndLinesAreSkipped) {
  const Roi roi =
      Roi::parse(collection({feature("Point", "[5, 5]", "Tumor"),
                             feature("LineString", "[[0, 0], [5, 5]]", "Tumor"),
                             feature("Polygon", "[" + square(0, 0, 10, 10) + "]", "Tumor")}),
                 "p.geojson", {});
  EXPECT_EQ(roi.regions(), 1);
  EXPECT_EQ(roi.skipped(), 2);
  const std::string only_points =
      input_error([] { Roi::parse(collection({feature("Point", "[5, 5]")}), "p.geojson", {}); });
  EXPECT_TRUE(has(only_points, "no region")) << only_points;
}

TEST(Roi, BadInputIsRefusedNamingFileFeatureAndOption) {
  const auto error = [](const std::string& text) {
    return input_error([&] { Roi::parse(text, "bad.geojson", {}); });
  };
  const std::string ok = feature("Polygon", "[" + square(0, 0, 10, 10) + "]");
  std::string m = error("{\"type\": \"FeatureCollection\", \"features\": [");
  EXPECT_TRUE(has(m, "bad.geojson") && has(m, "not valid JSON") && has(m, "--roi")) << m;
  m = error(R"({"type": "Polygon", "coordinates": []})");
  EXPECT_TRUE(has(m, "not a GeoJSON FeatureCollection") && has(m, "--roi")) << m;
  m = error(collection({ok, feature("Polygon", "[[[0, 0], [1, 0], [0, 0]]]", "Tumor")}));
  EXPECT_TRUE(has(m, "bad.geojson: feature 1 (id a1b2, class 'Tumor')") &&
              has(m, "ring 0 has 3 positions") && has(m, "--roi-class"))
      << m;
  m = error(collection({feature("Polygon", "[[[0, 0], [1, 0], [1, 1e999], [0, 0]]]")}));
  // JSON has no infinities: a number too large to be a double is refused by the parser.
  EXPECT_TRUE(has(m, "bad.geojson") && has(m, "number overflow") && has(m, "--roi")) << m;
  m = error(collection({feature("Polygon", "[[[0, 0], [1, 0], [\"x\", 1], [0, 0]]]")}));
  EXPECT_TRUE(has(m, "position 2 is not [x, y]")) << m;
  m = error(collection({ok, feature("GeometryCollection", "[]")}));
  EXPECT_TRUE(has(m, "feature 1") && has(m, "GeometryCollection, not a Polygon")) << m;
  m = error(collection({}));
  EXPECT_TRUE(has(m, "holds no region")) << m;
  // A bad feature of a class left out is not read.
  const std::string mixed =
      collection({ok, feature("Polygon", "[[[0, 0], [1, 0], [0, 0]]]", "Other")});
  EXPECT_EQ(Roi::parse(mixed, "bad.geojson", {""}).regions(), 1);  // "": the unclassified
}

TEST(Roi, DeepNestingIsRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string m = input_error([&] { Roi::parse(deep, "deep.geojson", {}); });
  EXPECT_TRUE(has(m, "nested deeper")) << m;
}

TEST(Roi, FilesAndDirectories) {
  mltool::testing::TempDir dir;
  const std::string good = collection({feature("Polygon", "[" + square(0, 0, 10, 10) + "]")});
  mltool::util::write_file_atomic(dir.path() + "/S1.geojson", good);
  mltool::util::write_file_atomic(dir.path() + "/S2.svs.geojson", good);
  using mltool::slide::roi_file_for;
  EXPECT_EQ(roi_file_for(dir.path(), "/data/S1.svs"), dir.path() + "/S1.geojson");
  EXPECT_EQ(roi_file_for(dir.path(), "/data/S2.svs"), dir.path() + "/S2.svs.geojson");
  EXPECT_EQ(roi_file_for(dir.path(), "/data/S3.svs"), "");
  const Roi roi = Roi::load(dir.path() + "/S1.geojson", {});
  EXPECT_EQ(roi.sha256().size(), 64u);
  RoiJob job;
  job.path = dir.path();
  std::string m = input_error([&] { mltool::slide::slide_roi(job, "/data/S3.svs"); });
  EXPECT_TRUE(has(m, "/data/S3.svs") && has(m, "--roi-missing")) << m;
  job.missing = mltool::io::RoiMissing::skip;
  EXPECT_TRUE(mltool::slide::slide_roi(job, "/data/S3.svs").skip);
  job.missing = mltool::io::RoiMissing::all;
  const auto whole = mltool::slide::slide_roi(job, "/data/S3.svs");
  EXPECT_TRUE(whole.enabled && !whole.skip && !whole.roi);
  job.path = dir.path() + "/S1.geojson";
  EXPECT_THROW(mltool::slide::check_rois(job, {"/a/S1.svs", "/a/S2.svs"}), UsageError);
  m = input_error([&] { Roi::load(dir.path() + "/none.geojson", {}); });
  EXPECT_TRUE(has(m, "none.geojson") && has(m, "--roi")) << m;
  RoiJob lone;
  lone.classes = {"Tumor"};
  EXPECT_THROW(mltool::slide::check_roi_options(lone), UsageError);
}

TEST(Roi, QcPictureDrawsTheRegions) {
  mltool::io::RgbImage slide{100, 50, std::vector<std::uint8_t>(100 * 50 * 3, 240)};
  mltool::slide::QcOverlay overlay;
  overlay.roi = {{{10, 10}, {60, 10}, {60, 40}, {10, 40}, {10, 10}}};
  const auto out = mltool::slide::qc_picture(slide, overlay);
  const auto* p = &out.pixels[(static_cast<std::size_t>(10) * 100 + 30) * 3];
  EXPECT_EQ(p[0], mltool::slide::kRoiOutline[0]);
  EXPECT_EQ(p[1], mltool::slide::kRoiOutline[1]);
  const auto* inside = &out.pixels[(static_cast<std::size_t>(25) * 100 + 30) * 3];
  EXPECT_EQ(inside[0], 240);
  mltool::slide::QcCaption c;
  c.roi = "regions of interest: S1.geojson";
  const auto lines = mltool::slide::caption_lines(c);
  EXPECT_EQ(lines[lines.size() - 2], c.roi);
  EXPECT_NE(lines.back().find("orange: regions of interest"), std::string::npos);
}

TEST(Roi, GroupedUnionAndRowStrips) {
  // A and B overlap; C touches B at a corner (their envelopes meet: one group); D is apart.
  const Roi roi = Roi::parse(collection({feature("Polygon", "[" + square(0, 0, 10, 10) + "]"),
                                         feature("Polygon", "[" + square(5, 5, 15, 15) + "]"),
                                         feature("Polygon", "[" + square(15, 15, 20, 20) + "]"),
                                         feature("Polygon", "[" + square(100, 0, 110, 10) + "]")}),
                             "g.geojson", {});
  EXPECT_NEAR(roi.area(), 100 + 100 - 25 + 25 + 100, 1e-9);
  EXPECT_NEAR(roi.share(0, 0, 20), 200.0 / 400, 1e-12);
  EXPECT_DOUBLE_EQ(roi.share(0, 0, 10), 1);  // same row, another size
  EXPECT_NEAR(roi.share(0, 0, 12), 124.0 / 144, 1e-12);
  EXPECT_NEAR(roi.share(95, 0, 10), 0.5, 1e-12);          // D, in the same row's strip
  EXPECT_NEAR(roi.share(10, 10, 10), 50.0 / 100, 1e-12);  // B's corner and C
  EXPECT_NEAR(roi.share(0, 0, 12), 124.0 / 144, 1e-12);   // back to an earlier row
}

TEST(Roi, UntrustedFilesAreBounded) {
  std::string many = "[";
  for (std::int64_t i = 0; i <= mltool::slide::kMaxRoiFeatures; ++i) many += i ? ",{}" : "{}";
  many += "]";
  std::string m = input_error([&] { Roi::parse(many, "many.geojson", {}); });
  EXPECT_TRUE(has(m, "many.geojson") && has(m, "1000001 features, over the 1000000")) << m;
  mltool::testing::TempDir dir;
  const std::string big = dir.path() + "/big.geojson";
  mltool::util::write_file_atomic(big, "[]");
  ASSERT_EQ(::truncate(big.c_str(), static_cast<off_t>(mltool::slide::kMaxRoiFileBytes + 1)), 0);
  m = input_error([&] { Roi::load(big, {}); });  // refused before it is read (a sparse file)
  EXPECT_TRUE(has(m, "big.geojson") && has(m, "over the 256 MiB") && has(m, "--roi")) << m;
}
