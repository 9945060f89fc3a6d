// mltool index SHARD.tfrecord... [--keep-going] [--json]
//
// Option parsing and the summary; the verifying and indexing is mltool::io::index_files.
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/io/index_files.hpp"
#include "mltool/util/error.hpp"

namespace mltool::cli {

Command index_command() {
  return {"index", "Verify TFRecord files and write their DALI index files",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto job = std::make_shared<io::IndexJob>();
            add_options(app, io::index_options(), job);
            return [job, &common] {
              job->threads = common.threads;
              const auto r = io::index_files(*job);
              if (common.json) std::cout << io::to_json(r).dump(2) << "\n";
              return r.failed == 0 ? exit_code::ok : exit_code::partial;
            };
          }};
}

}  // namespace mltool::cli
