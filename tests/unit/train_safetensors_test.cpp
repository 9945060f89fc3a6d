// The safetensors writer (lib/train/safetensors.cpp), byte by byte against the format:
// 8-byte little-endian header length, a JSON header padded to 8 bytes, then the data.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "mltool/train/safetensors.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "support/temp_dir.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;

TEST(Safetensors, Layout) {
  const float w[6] = {1, 2, 3, 4, 5, 6};
  const std::int64_t n = 7;
  const std::uint16_t h[2] = {0x3C00, 0xC000};  // 1.0, -2.0 in float16
  const auto bytes = safetensors_bytes({{"z.count", "I64", {}, &n, 8},
                                        {"a.weight", "F32", {2, 3}, w, sizeof w},
                                        {"m.half", "F16", {2}, h, sizeof h}},
                                       {{"format", "pt"}});
  std::uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i)
    header_size |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(header_size % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + header_size + sizeof w + sizeof h + 8);
  const auto header = json::parse(bytes.substr(8, header_size));  // trailing spaces are whitespace
  EXPECT_EQ(header.at("__metadata__"), (json{{"format", "pt"}}));
  // Laid out in name order, back to back.
  EXPECT_EQ(header.at("a.weight"),
            (json{{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}));
  EXPECT_EQ(header.at("m.half"),
            (json{{"dtype", "F16"}, {"shape", {2}}, {"data_offsets", {24, 28}}}));
  EXPECT_EQ(header.at("z.count"),
            (json{{"dtype", "I64"}, {"shape", json::array()}, {"data_offsets", {28, 36}}}));
  const char* data = bytes.data() + 8 + header_size;
  EXPECT_EQ(std::memcmp(data, w, sizeof w), 0);
  EXPECT_EQ(std::memcmp(data + 24, h, sizeof h), 0);
  EXPECT_EQ(std::memcmp(data + 28, &n, 8), 0);
  EXPECT_EQ(bytes.substr(8, header_size).find_first_not_of(' ', header.dump().size()),
            std::string::npos);
}

TEST(Safetensors, RefusesInconsistentEntries) {
  const float w[2] = {1, 2};
  EXPECT_THROW(safetensors_bytes({{"a", "F32", {3}, w, sizeof w}}), UsageError);
  EXPECT_THROW(safetensors_bytes({{"a", "F99", {2}, w, sizeof w}}), UsageError);
  EXPECT_THROW(safetensors_bytes({{"a", "F32", {2}, w, sizeof w}, {"a", "F32", {2}, w, sizeof w}}),
               UsageError);
  EXPECT_THROW(safetensors_bytes({{"__metadata__", "F32", {2}, w, sizeof w}}), UsageError);
}

TEST(Safetensors, WritesAtomically) {
  testing::TempDir dir;
  const float w[1] = {3};
  write_safetensors(dir / "m.safetensors", {{"w", "F32", {1}, w, 4}});
  EXPECT_EQ(util::read_file(dir / "m.safetensors"), safetensors_bytes({{"w", "F32", {1}, w, 4}}));
}

}  // namespace
}  // namespace mltool::train
