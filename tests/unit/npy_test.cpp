#include "mltool/io/npy.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "support/errors.hpp"
#include "unit/feature_store_fixture.hpp"

namespace {

using mltool::FormatError;
using mltool::io::DType;
using mltool::io::NpyHeader;
using mltool::io::parse_npy_header;
using mltool::testing::error_or_empty;

// An .npy file with the given header dict (padded like numpy) and `data_bytes` zeros.
std::string make_npy(const std::string& dict, std::size_t data_bytes, int major = 1,
                     int minor = 0) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += static_cast<char>(minor);
  for (std::size_t i = 0; i < prefix - 8; ++i)
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

NpyHeader parse(const std::string& bytes) {
  return parse_npy_header(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(),
                          "x.npy");
}

// The FormatError message of parsing `bytes`, or "" if it parsed.
std::string error_of(const std::string& bytes) {
  return error_or_empty<FormatError>([&] { parse(bytes); });
}

const char* kF4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";

TEST(Npy, DTypeHelpers) {
  EXPECT_EQ(mltool::io::itemsize(DType::float16), 2u);
  EXPECT_EQ(mltool::io::itemsize(DType::int64), 8u);
  EXPECT_EQ(mltool::io::name(DType::uint8), "uint8");
  EXPECT_EQ(mltool::io::npy_descr(DType::float32), "<f4");
  EXPECT_EQ(mltool::io::dtype_from_name("float16"), DType::float16);
  EXPECT_FALSE(mltool::io::dtype_from_name("float64").has_value());
}

TEST(Npy, ParsesNumpyHeader) {
  const NpyHeader h = parse(make_npy(kF4, 48));
  EXPECT_EQ(h.major_version, 1);
  EXPECT_EQ(h.dtype, DType::float32);
  EXPECT_EQ(h.shape, (std::vector<std::uint64_t>{3, 4}));
  EXPECT_EQ(h.data_offset, 128u);
  EXPECT_EQ(h.data_bytes, 48u);
  EXPECT_EQ(h.elements(), 12u);
}

TEST(Npy, AcceptsVersions2And3AndPythonVariants) {
  EXPECT_EQ(parse(make_npy(kF4, 48, 2)).data_offset, 128u);
  EXPECT_EQ(parse(make_npy(kF4, 48, 3)).major_version, 3);
  // Key order, double quotes, no trailing comma, Python 2 longs, 1-d, 0-d.
  EXPECT_EQ(
      parse(make_npy("{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<i8\"}", 48))
          .dtype,
      DType::int64);
  EXPECT_EQ(parse(make_npy("{'descr': '|u1', 'fortran_order': False, 'shape': (7,), }", 7)).shape,
            (std::vector<std::uint64_t>{7}));
  EXPECT_TRUE(
      parse(make_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (), }", 2)).shape.empty());
  EXPECT_EQ(parse(make_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (0, 768), }", 0))
                .data_bytes,
            0u);
}

TEST(Npy, RejectsBadMagicAndVersions) {
  std::string bytes = make_npy(kF4, 48);
  bytes[1] = 'X';
  EXPECT_EQ(error_of(bytes), "x.npy: byte 0: not an .npy file (bad magic bytes)");
  EXPECT_EQ(error_of("\x93NUM"), "x.npy: not an .npy file (only 4 bytes, too short for a header)");
  EXPECT_NE(error_of(std::string("\x93NUMPY\x01", 7)).find("too short"), std::string::npos);
  EXPECT_NE(error_of("").find("too short"), std::string::npos);
  EXPECT_EQ(error_of(make_npy(kF4, 48, 4)),
            "x.npy: byte 6: unsupported .npy version 4.0 (expected 1.0, 2.0 or 3.0)");
  EXPECT_NE(error_of(make_npy(kF4, 48, 1, 1)).find("version 1.1"), std::string::npos);
  EXPECT_NE(error_of(make_npy(kF4, 48, 0)).find("version 0.0"), std::string::npos);
}

TEST(Npy, RejectsOversizedOrCutHeaders) {
  std::string bytes = make_npy(kF4, 48, 2);
  bytes[10] = '\x7f';  // header length 0x7f0040: over the limit, not allocated or scanned
  EXPECT_NE(error_of(bytes).find("byte 8: header length"), std::string::npos);
  EXPECT_NE(error_of(make_npy(kF4, 48).substr(0, 40)).find("truncated: the header needs 128 bytes"),
            std::string::npos);
  EXPECT_NE(error_of(make_npy(kF4, 48).substr(0, 9)).find("too short"), std::string::npos);
}

TEST(Npy, RejectsUnsupportedDescrs) {
  const std::string be =
      error_of(make_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (3, 4), }", 48));
  EXPECT_NE(be.find("x.npy: byte 20: invalid .npy header: descr '>f4' is big-endian"),
            std::string::npos)
      << be;
  const std::string f8 =
      error_of(make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", 24));
  EXPECT_NE(f8.find("descr '<f8' is not supported (expected '<f4', '<f2', '|u1' or '<i8')"),
            std::string::npos);
  const std::string rec =
      error_of(make_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", 12));
  EXPECT_NE(rec.find("structured dtypes are not supported"), std::string::npos);
}

TEST(Npy, RejectsFortranOrder) {
  const std::string e =
      error_of(make_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }", 48));
  EXPECT_NE(e.find("fortran_order is True"), std::string::npos) << e;
}

TEST(Npy, RejectsMalformedDicts) {
  auto expect_error = [](const std::string& dict, const std::string& fragment) {
    const std::string e = error_of(make_npy(dict, 48));
    EXPECT_NE(e.find(fragment), std::string::npos) << dict << " -> " << e;
  };
  expect_error("{'descr': '<f4', 'shape': (3, 4), }", "missing key 'fortran_order'");
  expect_error("{'descr': '<f4', 'fortran_order': False, }", "missing key 'shape'");
  expect_error("{'fortran_order': False, 'shape': (12,), }", "missing key 'descr'");
  expect_error("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (12,)}",
               "duplicate key 'descr'");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (12,), 'x': 1}",
               "unexpected key 'x'");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (-12,)}", "negative dimension");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (12)}",
               "a 1-d shape must be written '(n,)'");
  expect_error("{'descr': '<f4', 'fortran_order': false, 'shape': (12,)}",
               "expected True or False");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)} x",
               "unexpected text after");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)", "expected '}'");
  expect_error("{'descr': '<f\\4', 'fortran_order': False, 'shape': (12,)}", "escape sequences");
  expect_error("{'descr: <f4, fortran_order: False, shape: (12,)}", "unterminated string");
  expect_error("{'descr' '<f4', 'fortran_order': False, 'shape': (12,)}", "expected ':', found");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (012,)}", "leading zero");
  expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3 4)}", "expected ','");
  expect_error("['descr']", "expected '{'");
}

TEST(Npy, RejectsAbsurdShapesWithoutAllocating) {
  // The buffers are tiny; an implementation that trusted the shape would
  // allocate or read far beyond them.
  std::string too_many = "{'descr': '|u1', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < 33; ++i) too_many += "1, ";
  EXPECT_NE(error_of(make_npy(too_many + ")}", 1)).find("more than 32 dimensions"),
            std::string::npos);
  EXPECT_NE(
      error_of(
          make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
                   0))
          .find("is too large (its size overflows 64 bits)"),
      std::string::npos);
  EXPECT_NE(
      error_of(
          make_npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2305843009213693952,), }",
                   0))
          .find("overflows"),
      std::string::npos);
  EXPECT_NE(
      error_of(
          make_npy("{'descr': '|u1', 'fortran_order': False, 'shape': (99999999999999999999,), }",
                   0))
          .find("does not fit in 64 bits"),
      std::string::npos);
  // Large but representable: a plain size mismatch.
  EXPECT_NE(
      error_of(
          make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000), }", 0))
          .find("truncated: expected 4000000000000 bytes of data"),
      std::string::npos);
}

TEST(Npy, ChecksTheDataSize) {
  EXPECT_EQ(
      error_of(make_npy(kF4, 40)),
      "x.npy: byte 128: truncated: expected 48 bytes of data for shape (3, 4) float32, found 40");
  EXPECT_NE(error_of(make_npy(kF4, 49)).find("trailing data: expected 48 bytes"),
            std::string::npos);
}

TEST(Npy, FormatsHeadersNumpyReads) {
  for (const auto& shape :
       std::vector<std::vector<std::uint64_t>>{{}, {5}, {3, 4}, {0, 768}, {1ull << 40, 1}}) {
    const std::string header = mltool::io::format_npy_header(DType::float16, shape);
    EXPECT_EQ(header.size() % 64, 0u);
    EXPECT_EQ(header.back(), '\n');
    std::uint64_t elements = 1;
    for (auto d : shape) elements *= d;
    if (elements > 1000) continue;
    const NpyHeader h = parse(header + std::string(elements * 2, '\0'));
    EXPECT_EQ(h.shape, shape);
    EXPECT_EQ(h.data_offset, header.size());
  }
  // Byte for byte what numpy writes for np.zeros((3, 4), '<f4').
  const std::string h = mltool::io::format_npy_header(DType::float32, {3, 4});
  EXPECT_EQ(h.size(), 128u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(h.substr(8, 2), std::string("\x76\x00", 2));
  EXPECT_EQ(h.substr(10, 59), "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }");
}

TEST(Npy, PaddedHeaderHasFixedSize) {
  const std::string small = mltool::io::format_npy_header_padded(DType::float32, {0, 4}, 128);
  const std::string big = mltool::io::format_npy_header_padded(DType::float32, {~0ull, ~0ull}, 128);
  EXPECT_EQ(small.size(), 128u);
  EXPECT_EQ(big.size(), 128u);
  EXPECT_THROW(mltool::io::format_npy_header_padded(DType::float32, {1, 2}, 64),
               mltool::UsageError);
  EXPECT_THROW(mltool::io::format_npy_header_padded(DType::float32, {1, 2}, 130),
               mltool::UsageError);
}

TEST(Npy, WriterStreamsAndPatchesTheRowCount) {
  mltool::testing::TempDir dir;
  const std::string path = dir / "a.npy";
  {
    mltool::io::NpyWriter w(path, DType::int64, {3});
    EXPECT_EQ(w.row_bytes(), 24u);
    for (std::int64_t i = 0; i < 1000; ++i) {
      const std::int64_t row[3] = {i, -i, i * i};
      w.write_rows(row, 1);
    }
    EXPECT_FALSE(mltool::util::exists(path));  // not published before commit
    w.commit();
  }
  const mltool::io::MappedNpy m = mltool::io::map_npy(path);
  EXPECT_EQ(m.header.shape, (std::vector<std::uint64_t>{1000, 3}));
  EXPECT_EQ(m.header.data_offset, mltool::io::kNpyStreamingHeaderSize);
  std::int64_t last[3];
  std::memcpy(last, m.data() + 999 * 24, 24);
  EXPECT_EQ(last[2], 999 * 999);
}

TEST(Npy, AbandonedWriterPublishesNothing) {
  mltool::testing::TempDir dir;
  {
    mltool::io::NpyWriter w(dir / "a.npy", DType::uint8, {2});
    w.write_rows("ab", 1);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(Npy, MapNpyReportsMissingFiles) {
  EXPECT_THROW(mltool::io::map_npy("/nonexistent/x.npy"), mltool::InputError);
  mltool::testing::TempDir dir;
  mltool::util::write_file_atomic(dir / "empty.npy", "");
  EXPECT_THROW(mltool::io::map_npy(dir / "empty.npy"), FormatError);
}

}  // namespace
