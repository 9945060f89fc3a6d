// mltool index SHARD.tfrecord... [--keep-going] [--json]
//
// Verifies TFRecord files (framing and both CRCs of every record) and writes the NVIDIA
// DALI index beside each (x.tfrecord → x.idx: "offset size" per record), so files written
// by any tool (TensorFlow, slideflow, mltool) can be read by random access.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::cli {
namespace {

struct IndexOptions {
  std::vector<std::string> shards;
  bool keep_going = false;
};

int run_index(const IndexOptions& o, const CommonOptions& common) {
  const auto shards = expand_stdin_list(o.shards);
  if (shards.empty()) throw UsageError("no TFRecord files given");
  nlohmann::json files = nlohmann::json::array();
  std::uint64_t records = 0;
  int failed = 0;
  for (const auto& shard : shards) {
    try {
      const auto entries = io::build_index(shard);
      const auto index = io::index_path_for(shard);
      io::write_index(index, entries);
      records += entries.size();
      files.push_back({{"path", shard}, {"index", index}, {"records", entries.size()}});
      log::info(shard + ": " + std::to_string(entries.size()) + " records → " + index);
    } catch (const Error& e) {
      if (!o.keep_going) throw;
      ++failed;
      log::error(e.what());
      files.push_back({{"path", shard}, {"error", e.what()}});
    }
  }
  if (common.json)
    std::cout << nlohmann::json{{"command", "index"}, {"files", files}, {"records", records}, {"failed", failed}}.dump(2)
              << "\n";
  return failed == 0 ? exit_code::ok : exit_code::partial;
}

}  // namespace

Command index_command() {
  return {"index", "Verify TFRecord files and write their DALI index files",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto o = std::make_shared<IndexOptions>();
            app.add_option("shards", o->shards, "TFRecord files ('-' reads paths from stdin)")->required();
            app.add_flag("--keep-going", o->keep_going, "Continue past bad files; exit 4 if any failed");
            return [o, &common] { return run_index(*o, common); };
          }};
}

}  // namespace mltool::cli
