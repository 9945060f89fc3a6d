// mltool export FORMAT FEATURES/ -o DIR/ [options]
//
// Feature stores in other tools' formats. One row per format: its Command (name, summary,
// setup) comes from its own cmd_export_<format>.cpp; help, dispatch and the shared options
// are the table's (add_subcommands, cli.cpp).
#include "cli.hpp"

namespace mltool::cli {

Command export_h5_command();

Command export_command() {
  return {"export", "Write a feature store in other tools' formats (h5: CLAM, TRIDENT)",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            static const std::vector<Command> formats = {
                export_h5_command(),
            };
            return add_subcommands(app, common, formats);
          }};
}

}  // namespace mltool::cli
