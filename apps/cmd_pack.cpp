// mltool pack FEATURES/ --labels labels.csv -o dataset/ [options]
//
// Option parsing and the summary; the packing is mltool::records::pack_dataset.
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/records/pack.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::cli {
namespace {

int run_pack(records::PackJob& job, const CommonOptions& common) {
  job.threads = common.threads;
  job.on_shard = [](const records::PackShard& s) {
    log::debug(s.file + ": " + std::to_string(s.records) + " records, " + std::to_string(s.bytes) +
               " bytes");
  };
  const auto r = records::pack_dataset(job);
  if (r.missing_keys)
    log::warn(std::to_string(r.missing_keys) +
              " labels rows name keys not in the feature store (skipped)");
  if (r.invalid_rows)
    log::warn(std::to_string(r.invalid_rows) + " labels fall on invalid feature rows (not packed)");
  if (r.empty_bags) log::warn(std::to_string(r.empty_bags) + " bags had no valid row (not packed)");
  // A split can come out empty when there are few groups (by default a group is a slide).
  std::map<std::string, std::uint64_t> per_split;
  for (const auto& s : r.shards) per_split[s.split] += s.records;
  for (const auto& [split, n] : per_split)
    if (n == 0)
      log::warn("split '" + split +
                "' is empty: too few groups (slides, or --group-by values) to fill every split");
  log::info(r.output + ": " + std::to_string(r.records) + " records in " +
            std::to_string(r.shards.size()) + " shards" +
            (job.dedupe ? ", " + std::to_string(r.duplicate_rows) + " duplicate rows shared" : ""));
  for (const auto& line : records::label_count_lines(r.manifest)) log::info("  " + line);
  if (common.json) std::cout << records::to_json(r).dump(2) << "\n";
  return exit_code::ok;
}

}  // namespace

Command pack_command() {
  return {"pack", "Pack features and labels into index-based TFRecord shards with leak-free splits",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto job = std::make_shared<records::PackJob>();
            add_options(app, records::pack_options(), job);
            return [job, &common] { return run_pack(*job, common); };
          }};
}

}  // namespace mltool::cli
