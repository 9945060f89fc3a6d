// TFRecord framing, the DALI index, and every kind of damage a reader must name.
#include "mltool/io/tfrecord.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "mltool/io/crc32c.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "support/temp_dir.hpp"

namespace mltool::io {
namespace {

namespace fs = std::filesystem;

std::string random_string(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// Runs `fn`, expects a FormatError whose message contains every one of `parts`.
void expect_format_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no FormatError thrown";
  } catch (const FormatError& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message '" << e.what() << "' lacks '" << part << "'";
  }
}

// Reads every record of `path`; returns how many came out before the end or the error.
std::size_t read_all(const std::string& path, TFRecordReadOptions options = {}) {
  TFRecordReader reader(path, options);
  std::string_view record;
  std::size_t n = 0;
  while (reader.next(record)) ++n;
  return n;
}

class TFRecordTest : public ::testing::Test {
 protected:
  mltool::testing::TempDir tmp_;
  std::string dir_ = tmp_.path();

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // Three records of 10, 20 and 30 bytes: frames at bytes 0, 26 and 62; 108 in all.
  std::string write_three(const std::string& name) {
    TFRecordWriter writer(path(name));
    for (std::size_t n : {10, 20, 30}) writer.write(std::string(n, static_cast<char>('a' + n)));
    writer.commit();
    return path(name);
  }

  std::string rewrite(const std::string& name, const std::string& bytes) {
    util::write_file_atomic(path(name), bytes);
    return path(name);
  }
};

TEST_F(TFRecordTest, RoundTripIncludingEmptyAndBigRecords) {
  const std::vector<std::string> records = {
      "", "a", random_string(1000, 1), std::string(5, '\0'), random_string(3u << 20, 2), ""};
  {
    TFRecordWriter writer(path("x.tfrecord"));
    for (const auto& r : records) writer.write(r);
    EXPECT_EQ(writer.records(), records.size());
    writer.commit();
  }
  std::uint64_t expected_size = 0;
  for (const auto& r : records) expected_size += r.size() + kTFRecordOverhead;
  EXPECT_EQ(util::file_size(path("x.tfrecord")), expected_size);

  TFRecordReader reader(path("x.tfrecord"));
  std::string_view record;
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    ASSERT_TRUE(reader.next(record)) << i;
    EXPECT_EQ(record, records[i]) << i;
    EXPECT_EQ(reader.offset(), offset);
    EXPECT_EQ(reader.record_number(), i);
    offset += records[i].size() + kTFRecordOverhead;
  }
  EXPECT_FALSE(reader.next(record));
  EXPECT_FALSE(reader.next(record));  // end of file stays the end
}

TEST_F(TFRecordTest, FrameLayoutIsTensorFlows) {
  TFRecordWriter writer(path("x.tfrecord"), IndexMode::none);
  writer.write("abc");
  writer.commit();
  const std::string bytes = util::read_file(path("x.tfrecord"));
  ASSERT_EQ(bytes.size(), 19u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  auto le32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<std::uint8_t>(bytes[at + i]);
    return v;
  };
  EXPECT_EQ(unmask_crc(le32(8)), crc32c(bytes.data(), 8));
  EXPECT_EQ(bytes.substr(12, 3), "abc");
  EXPECT_EQ(unmask_crc(le32(15)), crc32c("abc", 3));
  EXPECT_FALSE(util::exists(path("x.idx")));
}

TEST_F(TFRecordTest, IndexPathRule) {
  EXPECT_EQ(index_path_for("x.tfrecord"), "x.idx");
  EXPECT_EQ(index_path_for("d/train-00001-of-00004.tfrecord"), "d/train-00001-of-00004.idx");
  EXPECT_EQ(index_path_for("d.tfrecord/x.rec"), "d.tfrecord/x.rec.idx");
  EXPECT_EQ(index_path_for("x"), "x.idx");
  EXPECT_EQ(index_path_for("x.tfrecord.gz"), "x.tfrecord.gz.idx");
  EXPECT_EQ(index_path_for("d/.tfrecord"), "d/.tfrecord.idx");
}

TEST_F(TFRecordTest, IndexMatchesScanAndDaliFormat) {
  const std::string file = write_three("x.tfrecord");
  EXPECT_EQ(util::read_file(path("x.idx")), "0 26\n26 36\n62 46\n");
  const auto index = read_index(path("x.idx"));
  EXPECT_EQ(index, build_index(file));
  ASSERT_EQ(index.size(), 3u);
  EXPECT_EQ(index[2], (IndexEntry{62, 46}));

  write_index(path("copy.idx"), index);
  EXPECT_EQ(util::read_file(path("copy.idx")), util::read_file(path("x.idx")));
}

TEST_F(TFRecordTest, RandomAccessViaIndex) {
  const std::string file = write_three("x.tfrecord");
  const auto index = read_index(index_path_for(file));
  TFRecordReader reader(file);
  for (std::size_t i = index.size(); i-- > 0;) {
    const std::string_view record = reader.read_at(index[i].offset);
    EXPECT_EQ(record.size() + kTFRecordOverhead, index[i].size);
    EXPECT_EQ(record, std::string(record.size(), static_cast<char>('a' + record.size())));
    EXPECT_EQ(reader.where(), file + ": byte " + std::to_string(index[i].offset));
  }
  // read_at leaves sequential reading where it was.
  std::string_view record;
  ASSERT_TRUE(reader.next(record));
  EXPECT_EQ(record.size(), 10u);
  EXPECT_EQ(reader.where(), file + ": record 0 (byte 0)");
  expect_format_error([&] { reader.read_at(5); }, {file + ": byte 5: ", "length CRC mismatch"});
  expect_format_error([&] { reader.read_at(108); }, {file + ": byte 108: ", "only 108 bytes"});
}

TEST_F(TFRecordTest, WriterWithoutCommitLeavesNothing) {
  {
    TFRecordWriter writer(path("x.tfrecord"));
    writer.write("abc");
  }
  EXPECT_TRUE(fs::is_empty(dir_));  // neither the files nor their temporaries
}

TEST_F(TFRecordTest, WriteAfterCommitIsAUsageError) {
  TFRecordWriter writer(path("x.tfrecord"));
  writer.commit();
  EXPECT_THROW(writer.write("abc"), UsageError);
  EXPECT_EQ(read_all(path("x.tfrecord")), 0u);
  EXPECT_EQ(util::read_file(path("x.idx")), "");
}

TEST_F(TFRecordTest, FromBufferReadsTheSameFrames) {
  const std::string bytes = util::read_file(write_three("x.tfrecord"));
  auto reader = TFRecordReader::from_buffer("buf", bytes.data(), bytes.size());
  std::string_view record;
  std::size_t n = 0;
  while (reader.next(record)) ++n;
  EXPECT_EQ(n, 3u);
  auto empty = TFRecordReader::from_buffer("empty", nullptr, 0);
  EXPECT_FALSE(empty.next(record));
}

TEST_F(TFRecordTest, TruncatedHeader) {
  const std::string good = util::read_file(write_three("x.tfrecord"));
  const std::string bad = rewrite("bad.tfrecord", good.substr(0, 26 + 5));
  expect_format_error([&] { read_all(bad); },
                      {bad + ": byte 26: ", "record 1", "truncated record header", "found 5"});
}

TEST_F(TFRecordTest, TruncatedData) {
  const std::string good = util::read_file(write_three("x.tfrecord"));
  const std::string bad = rewrite("bad.tfrecord", good.substr(0, 26 + 12 + 7));
  expect_format_error([&] { read_all(bad); },
                      {bad + ": byte 26: ", "truncated record", "expected 20 data bytes"});
  // Missing only the data CRC is a truncation too.
  const std::string bad2 = rewrite("bad2.tfrecord", good.substr(0, good.size() - 1));
  expect_format_error([&] { read_all(bad2); }, {bad2 + ": byte 62: ", "truncated record"});
}

TEST_F(TFRecordTest, FlippedBitInEveryFieldIsCaught) {
  const std::string good = util::read_file(write_three("x.tfrecord"));
  struct Case {
    std::size_t byte;
    const char* expected;
  };
  // Second frame: length 26..33, length CRC 34..37, data 38..57, data CRC 58..61.
  for (const Case& c : {Case{26, "length CRC mismatch"}, Case{33, "length CRC mismatch"},
                        Case{35, "length CRC mismatch"}, Case{38, "data CRC mismatch"},
                        Case{57, "data CRC mismatch"}, Case{60, "data CRC mismatch"}}) {
    for (int bit : {0, 7}) {
      std::string bytes = good;
      bytes[c.byte] = static_cast<char>(bytes[c.byte] ^ (1 << bit));
      const std::string bad = rewrite("bad.tfrecord", bytes);
      SCOPED_TRACE("byte " + std::to_string(c.byte) + " bit " + std::to_string(bit));
      expect_format_error([&] { read_all(bad); }, {bad + ": byte 26: ", "record 1", c.expected});
    }
  }
}

TEST_F(TFRecordTest, DataCrcCheckCanBeSkipped) {
  std::string bytes = util::read_file(write_three("x.tfrecord"));
  bytes[40] ^= 1;
  const std::string bad = rewrite("bad.tfrecord", bytes);
  EXPECT_THROW(read_all(bad), FormatError);
  EXPECT_EQ(read_all(bad, TFRecordReadOptions{/*verify_data_crc=*/false}), 3u);
}

TEST_F(TFRecordTest, AbsurdLengthIsReportedWithoutAllocating) {
  // A frame header claiming 2^63 bytes, with a correct length CRC.
  std::string header(12, '\0');
  header[7] = static_cast<char>(0x80);
  const std::uint32_t crc = mask_crc(crc32c(header.data(), 8));
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<char>(crc >> (8 * i));
  const std::string good = util::read_file(write_three("x.tfrecord"));
  const std::string bad = rewrite("bad.tfrecord", good + header + "some bytes");
  expect_format_error(
      [&] { read_all(bad); },
      {bad + ": byte 108: ", "record length 9223372036854775808", "larger than the whole file"});
  // Same length with a wrong CRC: the CRC is the diagnosis, the length a hint.
  header[8] ^= 1;
  const std::string bad2 = rewrite("bad2.tfrecord", header);
  expect_format_error([&] { read_all(bad2); },
                      {bad2 + ": byte 0: ", "length CRC mismatch", "beyond the end of the file"});
}

TEST_F(TFRecordTest, TrailingGarbage) {
  const std::string good = util::read_file(write_three("x.tfrecord"));
  const std::string partial = rewrite("partial.tfrecord", good + "xyz");
  expect_format_error([&] { read_all(partial); },
                      {partial + ": byte 108: ", "record 3", "truncated record header"});
  const std::string junk = rewrite("junk.tfrecord", good + std::string(40, 'z'));
  expect_format_error([&] { read_all(junk); }, {junk + ": byte 108: ", "length CRC mismatch"});
  // The records before the damage still come out.
  TFRecordReader reader(junk);
  std::string_view record;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(reader.next(record));
  EXPECT_THROW(reader.next(record), FormatError);
}

TEST_F(TFRecordTest, EmptyFileHasNoRecords) {
  EXPECT_EQ(read_all(rewrite("empty.tfrecord", "")), 0u);
  EXPECT_TRUE(build_index(path("empty.tfrecord")).empty());
}

TEST_F(TFRecordTest, MissingFileIsAnInputError) {
  EXPECT_THROW(TFRecordReader{path("nope.tfrecord")}, InputError);
  EXPECT_THROW(read_index(path("nope.idx")), InputError);
}

TEST_F(TFRecordTest, BuildIndexVerifiesRecords) {
  std::string bytes = util::read_file(write_three("x.tfrecord"));
  bytes[80] ^= 4;  // inside the third record's data (74..103)
  const std::string bad = rewrite("bad.tfrecord", bytes);
  expect_format_error([&] { build_index(bad); }, {bad + ": byte 62: ", "data CRC mismatch"});
}

TEST_F(TFRecordTest, ReadIndexToleratesWhatDaliTolerates) {
  const std::string idx = rewrite("x.idx", "0 26\r\n\n  26\t36 \n62 46");
  EXPECT_EQ(read_index(idx), (std::vector<IndexEntry>{{0, 26}, {26, 36}, {62, 46}}));
  EXPECT_TRUE(read_index(rewrite("empty.idx", "")).empty());
}

TEST_F(TFRecordTest, ReadIndexErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* expected;
  };
  for (const Case& c : {Case{"0 26\n26 36\n62 x\n", "x.idx:3: expected 'offset size'"},
                        Case{"0 26\n26\n", "x.idx:2: expected 'offset size'"},
                        Case{"0 26 7\n", "x.idx:1: expected 'offset size'"},
                        Case{"-1 26\n", "x.idx:1: expected 'offset size'"},
                        Case{"0 26\n26 99999999999999999999\n", "x.idx:2: expected"},
                        Case{"0 26\n26 15\n", "x.idx:2: frame size 15 is smaller"},
                        Case{"0 26\n20 36\n", "x.idx:2: offset 20 overlaps"},
                        Case{"0 26\n18446744073709551615 16\n", "x.idx:2: offset"}}) {
    const std::string idx = rewrite("x.idx", c.text);
    SCOPED_TRACE(c.text);
    expect_format_error([&] { read_index(idx); }, {c.expected});
  }
}

}  // namespace
}  // namespace mltool::io
