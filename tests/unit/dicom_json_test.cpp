// The checked readers of a DICOMweb series' metadata (lib/slide/dicom_json.hpp), as a lying
// server would test them: non-numeric IS, floats above 2^63, negative or overflowing sizes,
// strings where numbers go, UIDs with "../"; the frame-size checks of decoded frames
// (io::decode_image with the expected size) and of the UID a frames request names.
// tests/cli/dicomweb_lies_test.py runs the same lies through mltool against a real server.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../../lib/slide/dicom_json.hpp"
#include "mltool/io/dicomweb.hpp"
#include "mltool/io/image_codec.hpp"
#include "mltool/util/error.hpp"
#include "support/errors.hpp"

namespace {

using mltool::FormatError;
using mltool::InputError;
using mltool::testing::contains;
using mltool::testing::error_of;
using nlohmann::json;
namespace io = mltool::io;
namespace slide = mltool::slide;

const std::string kUrl = "http://pacs/dicom-web/studies/1.2/series/3.4";

// An honest VOLUME instance's metadata, as Orthanc answers it.
json volume() {
  const auto element = [](const char* vr, json value) {
    return json{{"vr", vr}, {"Value", json::array({std::move(value)})}};
  };
  json ds = json::object();
  ds["00080016"] = element("UI", "1.2.840.10008.5.1.4.1.1.77.1.6");
  ds["00080018"] = element("UI", "1.2.3.4.5");
  ds["0020000E"] = element("UI", "3.4");
  ds["00080008"] = {{"vr", "CS"}, {"Value", {"ORIGINAL", "PRIMARY", "VOLUME", "NONE"}}};
  ds["00280004"] = element("CS", "YBR_FULL_422");
  ds["00280002"] = element("US", 3);
  ds["00280100"] = element("US", 8);
  ds["00280010"] = element("US", 256);
  ds["00280011"] = element("US", 256);
  ds["00280008"] = element("IS", "12");
  ds["00480006"] = element("UL", 1000);
  ds["00480007"] = element("UL", 700);
  return ds;
}

json with(const char* key, json value) {
  json ds = volume();
  ds[key]["Value"] = json::array({std::move(value)});
  return ds;
}

TEST(DicomJson, ReadsAnHonestInstance) {
  const auto h = slide::dicom_json_header(volume(), kUrl);
  EXPECT_EQ(h.sop_instance, "1.2.3.4.5");
  EXPECT_EQ(h.rows, 256);
  EXPECT_EQ(h.columns, 256);
  EXPECT_EQ(h.frames, 12);  // IS as text
  EXPECT_EQ(h.total_columns, 1000);
  EXPECT_EQ(h.image_type.at(2), "VOLUME");
  EXPECT_NO_THROW(slide::check_dicom_level(h, kUrl));
  EXPECT_EQ(slide::dicom_frame_bytes(h, kUrl), 256u * 256 * 3);
  // Numbers in the forms DICOM JSON allows: an IS as text with padding, a whole float.
  EXPECT_EQ(slide::dicom_json_header(with("00280010", " 128 "), kUrl).rows, 128);
  EXPECT_EQ(slide::dicom_json_header(with("00280010", 128.0), kUrl).rows, 128);
  EXPECT_EQ(slide::dicom_json_header(with("00280010", 65535), kUrl).rows, 65535);
  EXPECT_EQ(slide::dicom_json_header(with("00480006", 4294967295u), kUrl).total_columns,
            4294967295);
}

// Each lie is a FormatError naming the URL, the instance, the tag and the value.
TEST(DicomJson, RefusesValuesOfTheWrongTypeOrRange) {
  struct Lie {
    const char* key;
    json value;
    const char* tag;
    const char* shown;
  };
  const std::vector<Lie> lies = {
      {"00280010", "abc", "(0028,0010) Rows", "\"abc\""},      // non-numeric IS
      {"00280010", "12abc", "(0028,0010) Rows", "\"12abc\""},  // trailing junk
      {"00280010", 1e19, "(0028,0010) Rows", "1e+19"},         // float above 2^63
      {"00280010", 1.5, "(0028,0010) Rows", "1.5"},            // a fraction
      {"00280010", -5, "(0028,0010) Rows", "-5"},              // negative
      {"00280010", 0, "(0028,0010) Rows", "0"},                // empty frame
      {"00280010", 65536, "(0028,0010) Rows", "65536"},        // past US
      {"00280011", 6148914691236517461, "(0028,0011) Columns", "6148914691236517461"},
      {"00280011", 4294967296, "(0028,0011) Columns", "4294967296"},
      {"00280011", 18446744073709551615u, "(0028,0011) Columns", "18446744073709551615"},
      {"00280011", json::object(), "(0028,0011) Columns", "{}"},  // not a number
      {"00280011", true, "(0028,0011) Columns", "true"},
      {"00480006", 4294967296, "(0048,0006) TotalPixelMatrixColumns", "4294967296"},
      {"00480007", "1e3", "(0048,0007) TotalPixelMatrixRows", "\"1e3\""},  // IS is no float
      {"00280008", "2147483648", "(0028,0008) NumberOfFrames", "\"2147483648\""},
      {"00280008", "99999999999999999999", "(0028,0008) NumberOfFrames", "\"9999"},
      {"00280002", 70000, "(0028,0002) SamplesPerPixel", "70000"},
      {"00280004", 3, "(0028,0004) PhotometricInterpretation", "3"},  // number where text
      {"00080018", "1.2/../../../../admin", "(0008,0018) SOPInstanceUID", "\"1.2/../"},
      {"00080018", "..", "(0008,0018) SOPInstanceUID", "\"..\""},
      {"00083002", "1.2.840.10008.1.2.4.50/..", "(0008,3002) AvailableTransferSyntaxUID", "/.."},
  };
  for (const auto& lie : lies) {
    const std::string e =
        error_of<FormatError>([&] { slide::dicom_json_header(with(lie.key, lie.value), kUrl); });
    EXPECT_EQ(e.rfind(kUrl + ": ", 0), 0u) << e;
    EXPECT_TRUE(contains(e, lie.tag)) << e;
    EXPECT_TRUE(contains(e, lie.shown)) << e;
  }
  // The instance is named where its UID could be read.
  EXPECT_TRUE(contains(
      error_of<FormatError>([&] { slide::dicom_json_header(with("00280010", "abc"), kUrl); }),
      "instance 1.2.3.4.5"));
}

TEST(DicomJson, RefusesMalformedElements) {
  json ds = volume();
  ds["00280010"] = 256;  // an element that is no object
  EXPECT_TRUE(contains(error_of<FormatError>([&] { slide::dicom_json_header(ds, kUrl); }),
                       "(0028,0010) Rows is 256, not a DICOM JSON element"));
  ds = volume();
  ds["00280010"]["Value"] = 256;  // a Value that is no array
  EXPECT_TRUE(contains(error_of<FormatError>([&] { slide::dicom_json_header(ds, kUrl); }),
                       "not a Value array"));
  ds = volume();
  ds["00080008"]["Value"] = {"ORIGINAL", 7, "VOLUME"};
  EXPECT_TRUE(contains(error_of<FormatError>([&] { slide::dicom_json_header(ds, kUrl); }),
                       "(0008,0008) ImageType is 7"));
  EXPECT_TRUE(contains(error_of<FormatError>([&] { slide::dicom_json_header(json(3), kUrl); }),
                       "not a DICOM JSON dataset"));
  // A long value is cut short in the message.
  const std::string e = error_of<FormatError>(
      [&] { slide::dicom_json_header(with("00280010", std::string(100000, '9')), kUrl); });
  EXPECT_LT(e.size(), 400u) << e;
}

TEST(DicomJson, BoundsTheFrameGrid) {
  auto h = slide::dicom_json_header(volume(), kUrl);
  h.total_columns = h.total_rows = 4294967295;
  h.rows = h.columns = 1;  // 2^64 frames
  const std::string e = error_of<InputError>([&] { slide::check_dicom_level(h, kUrl); });
  EXPECT_TRUE(contains(e, kUrl + ": VOLUME instance 1.2.3.4.5")) << e;
  EXPECT_TRUE(contains(e, "more than NumberOfFrames can count")) << e;
  h.rows = h.columns = 65535;  // 65538 x 65538 frames
  EXPECT_THROW(slide::check_dicom_level(h, kUrl), InputError);
  h.total_columns = h.total_rows = 200000;  // a large real slide: 782 x 782 frames of 256
  h.rows = h.columns = 256;
  EXPECT_NO_THROW(slide::check_dicom_level(h, kUrl));
  h.rows = 0;  // absent
  EXPECT_TRUE(contains(error_of<InputError>([&] { slide::check_dicom_level(h, kUrl); }),
                       "has no TotalPixelMatrixColumns/Rows or frame size"));
  h.rows = h.columns = 65535;  // the largest frame: 12.9 GB, computed without overflow
  EXPECT_EQ(slide::dicom_frame_bytes(h, kUrl), std::size_t{65535} * 65535 * 3);
  h.rows = -1;
  EXPECT_THROW(slide::dicom_frame_bytes(h, kUrl), FormatError);
}

TEST(DicomJson, ReadsPixelSpacing) {
  json ds = volume();
  const json spacing = {{"vr", "DS"}, {"Value", {"0.00025", 0.0005}}};
  ds["52009229"] = {
      {"vr", "SQ"},
      {"Value", {{{"00289110", {{"vr", "SQ"}, {"Value", {{{"00280030", spacing}}}}}}}}}};
  const auto got = slide::dicom_json_pixel_spacing(ds, kUrl);
  ASSERT_TRUE(got);
  EXPECT_DOUBLE_EQ(got->first, 0.00025);
  EXPECT_DOUBLE_EQ(got->second, 0.0005);
  ds.erase("52009229");
  EXPECT_FALSE(slide::dicom_json_pixel_spacing(ds, kUrl));
  for (const json& bad : {json("abc"), json("nan"), json("inf"), json::array()}) {
    ds["00280030"] = {{"vr", "DS"}, {"Value", {bad, "0.0005"}}};
    EXPECT_TRUE(contains(error_of<FormatError>([&] { slide::dicom_json_pixel_spacing(ds, kUrl); }),
                         "(0028,0030) PixelSpacing is"))
        << bad;
  }
  ds.erase("00280030");
  ds["52009229"] = {{"vr", "SQ"}, {"Value", {"item"}}};
  EXPECT_TRUE(contains(error_of<FormatError>([&] { slide::dicom_json_pixel_spacing(ds, kUrl); }),
                       "not a sequence item"));
}

// A frame must be the size the metadata says, checked from the JPEG's header before its
// pixels are allocated (a header may claim 65500 x 65500: 12.9 GB).
TEST(DicomFrames, DecodedFramesHaveTheMetadataSize) {
  const std::vector<std::uint8_t> rgb(16 * 8 * 3, 128);
  std::string jpeg = io::encode_jpeg(rgb.data(), 16, 8, 90);
  io::RgbImage image;
  EXPECT_NO_THROW(io::decode_image(jpeg.data(), jpeg.size(), image, "f", {16, 8}));
  EXPECT_EQ(image.pixels.size(), 16u * 8 * 3);
  EXPECT_TRUE(
      contains(error_of<FormatError>([&] {
                 io::decode_image(jpeg.data(), jpeg.size(), image, "URL: frame 1", {16, 16});
               }),
               "URL: frame 1: the image is 16 x 8 pixels, not 16 x 16"));
  // The header claims 65500 x 65500 (SOF0: FF C0, length, precision, height, width).
  const auto sof = jpeg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  for (const std::size_t at : {sof + 5, sof + 7}) jpeg[at] = '\xff', jpeg[at + 1] = '\xdc';
  const auto claimed = io::image_size(jpeg.data(), jpeg.size(), "f");
  EXPECT_EQ(claimed.width, 65500);
  EXPECT_EQ(claimed.height, 65500);
  io::RgbImage untouched;
  EXPECT_TRUE(contains(error_of<FormatError>([&] {
                         io::decode_image(jpeg.data(), jpeg.size(), untouched, "f", {16, 8});
                       }),
                       "65500 x 65500 pixels, not 16 x 8"));
  EXPECT_EQ(untouched.pixels.capacity(), 0u);  // nothing allocated
}

// A frames request for an instance UID that is not one is refused before anything is sent
// (the port here is closed: a request would fail with a DicomwebError, not a FormatError).
TEST(DicomFrames, RequestsOnlyUids) {
  const io::DicomwebClient client(
      io::parse_dicomweb_url("http://127.0.0.1:9/dw/studies/1/series/2"), io::DicomwebOptions{});
  for (const char* sop : {"1.2/../../../../admin", "..", "1..2", "1.2?x"}) {
    const std::string e = error_of<FormatError>([&] { client.frames(sop, {1}, 0); });
    EXPECT_TRUE(contains(e, "is not a DICOM UID")) << e;
    EXPECT_TRUE(contains(e, "http://127.0.0.1:9/dw/studies/1/series/2")) << e;
  }
}

}  // namespace
