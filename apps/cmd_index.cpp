// mltool index SHARD.tfrecord... [--keep-going] [--json]
//
// Option parsing and the summary; the verifying and indexing is mltool::records::index_files.
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/records/index_files.hpp"
#include "mltool/util/error.hpp"

namespace mltool::cli {

Command index_command() {
  return {"index", "Verify TFRecord files and write their DALI index files",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto job = std::make_shared<records::IndexJob>();
            add_options(app, records::index_options(), job);
            return [job, &common] {
              job->threads = common.threads;
              const auto r = records::index_files(*job);
              if (common.json) std::cout << records::to_json(r).dump(2) << "\n";
              return r.failed == 0 ? exit_code::ok : exit_code::partial;
            };
          }};
}

}  // namespace mltool::cli
