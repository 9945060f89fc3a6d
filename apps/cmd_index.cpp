// mltool index SHARD.tfrecord... [--keep-going] [--json]
//
// Verifies TFRecord files (framing and both CRCs of every record) and writes the NVIDIA
// DALI index beside each (x.tfrecord → x.idx: "offset size" per record), so files written
// by any tool (TensorFlow, slideflow, mltool) can be read by random access. Files are
// indexed in parallel (--threads); an index is published only for a file that verified.
#include <exception>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/parallel.hpp"

namespace mltool::cli {
namespace {

struct IndexOptions {
  std::vector<std::string> shards;
  bool keep_going = false;
};

struct FileResult {
  std::uint64_t records = 0;
  std::string index;
  std::exception_ptr error;  // set when the file failed
  std::string message;       // its text, for an mltool::Error (empty for anything else)
};

FileResult index_one(const std::string& shard) {
  FileResult r;
  try {
    const auto entries = io::build_index(shard);
    r.index = io::index_path_for(shard);
    io::write_index(r.index, entries);
    r.records = entries.size();
  } catch (const Error& e) {
    r.error = std::current_exception();
    r.message = e.what();
  } catch (...) {
    r.error = std::current_exception();
  }
  return r;
}

int run_index(const IndexOptions& o, const CommonOptions& common) {
  const auto shards = expand_stdin_list(o.shards);
  if (shards.empty()) throw UsageError("no TFRecord files given");
  // Files are independent; results keep the input order.
  std::vector<FileResult> results(shards.size());
  util::parallel_for(shards.size(), common.threads,
                     [&](std::size_t i) { results[i] = index_one(shards[i]); });

  nlohmann::json files = nlohmann::json::array();
  std::uint64_t records = 0;
  int failed = 0;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& r = results[i];
    if (r.error) {
      if (!o.keep_going || r.message.empty()) std::rethrow_exception(r.error);
      ++failed;
      log::error(r.message);
      files.push_back({{"path", shards[i]}, {"error", r.message}});
      continue;
    }
    records += r.records;
    files.push_back({{"path", shards[i]}, {"index", r.index}, {"records", r.records}});
    log::info(shards[i] + ": " + std::to_string(r.records) + " records -> " + r.index);
  }
  if (common.json)
    std::cout << nlohmann::json{{"command", "index"},
                                {"files", files},
                                {"records", records},
                                {"failed", failed}}
                     .dump(2)
              << "\n";
  return failed == 0 ? exit_code::ok : exit_code::partial;
}

}  // namespace

Command index_command() {
  return {"index", "Verify TFRecord files and write their DALI index files",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto o = std::make_shared<IndexOptions>();
            app.add_option("shards", o->shards, "TFRecord files ('-' reads paths from stdin)")
                ->required();
            app.add_flag("--keep-going", o->keep_going,
                         "Continue past bad files; exit 4 if any failed");
            return [o, &common] { return run_index(*o, common); };
          }};
}

}  // namespace mltool::cli
