// `mltool index` as a library call: TFRecord files verified (framing and both CRCs of every
// record) and their NVIDIA DALI index written beside each (x.tfrecord → x.idx), in
// parallel; an index is published only for a file that verified.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mltool/util/options.hpp"

namespace mltool::records {

struct IndexJob {
  std::vector<std::string> files;  ///< TFRecord files
  bool keep_going = false;         ///< a file that fails is reported and skipped
  int threads = 0;                 ///< files indexed at once; 0 = one per core
};

/// The options of `mltool index`, declared once.
const util::Options<IndexJob>& index_options();

struct IndexedFile {
  std::string path;
  std::string index;  ///< the index written ("" if the file failed)
  std::uint64_t records = 0;
  std::string error;  ///< keep_going: why the file failed
};

struct IndexReport {
  std::vector<IndexedFile> files;  ///< in the job's order
  std::uint64_t records = 0;
  int failed = 0;
};

/// Indexes every file, logging each. Without keep_going the first failing file's error (in
/// the job's order) is rethrown; an error that is not an mltool::Error always is.
IndexReport index_files(const IndexJob& job);

/// The summary `mltool index --json` prints.
nlohmann::json to_json(const IndexReport& report);

}  // namespace mltool::records
