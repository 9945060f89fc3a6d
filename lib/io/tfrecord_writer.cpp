// TFRecordWriter: frames records, streams the DALI index beside them, and publishes
// both atomically.
#include <cstring>

#include "mltool/io/crc32c.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/util/endian.hpp"
#include "mltool/util/error.hpp"

namespace mltool::io {
namespace {

using util::store_le32;
using util::store_le64;

}  // namespace

std::string index_path_for(const std::string& tfrecord_path) {
  static constexpr std::string_view kExtension = ".tfrecord";
  const std::size_t slash = tfrecord_path.find_last_of('/');
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  // "dir/.tfrecord" is a hidden file named ".tfrecord", not an empty stem.
  if (tfrecord_path.size() > base + kExtension.size() &&
      tfrecord_path.compare(tfrecord_path.size() - kExtension.size(), kExtension.size(),
                            kExtension) == 0) {
    return tfrecord_path.substr(0, tfrecord_path.size() - kExtension.size()) + ".idx";
  }
  return tfrecord_path + ".idx";
}

TFRecordWriter::TFRecordWriter(const std::string& path, IndexMode index) : file_(path) {
  if (index == IndexMode::write) index_ = std::make_unique<util::AtomicFile>(index_path_for(path));
}

void TFRecordWriter::write(std::string_view record) {
  if (committed_) throw UsageError(at_file(file_.path(), "write after commit"));
  const std::uint64_t offset = file_.size();
  const std::uint64_t length = record.size();

  std::uint8_t header[kTFRecordHeaderSize];
  store_le64(header, length);
  store_le32(header + 8, mask_crc(crc32c(header, 8)));
  std::uint8_t footer[4];
  store_le32(footer, mask_crc(crc32c(record.data(), record.size())));

  file_.write(header, sizeof header);
  if (!record.empty()) file_.write(record.data(), record.size());
  file_.write(footer, sizeof footer);

  if (index_) {
    // "offset size\n" with size = the whole frame, as DALI's tfrecord2idx writes it.
    const std::string line =
        std::to_string(offset) + ' ' + std::to_string(length + kTFRecordOverhead) + '\n';
    index_->write(line);
  }
  ++records_;
}

void TFRecordWriter::commit() {
  if (committed_) throw UsageError(at_file(file_.path(), "commit called twice"));
  // Records first: an index is only meaningful beside the file it describes, and a
  // missing index can be rebuilt from the records (build_index), not the reverse.
  file_.commit();
  if (index_) index_->commit();
  committed_ = true;
}

}  // namespace mltool::io
