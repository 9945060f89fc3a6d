// mltool export FORMAT INPUT -o DIR/ [options]
//
// mltool's stores in other tools' formats: h5 (a feature store for CLAM and TRIDENT), geojson
// (a tile store for QuPath). One row per format: its Command (name, summary,
// setup) comes from its own cmd_export_<format>.cpp; help, dispatch and the shared options
// are the table's (add_subcommands, cli.cpp).
#include "cli.hpp"

namespace mltool::cli {

Command export_h5_command();
Command export_geojson_command();

Command export_command() {
  return {"export", "Write stores in other tools' formats: h5 (CLAM, TRIDENT), geojson (QuPath)",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            static const std::vector<Command> formats = {
                export_h5_command(),
                export_geojson_command(),
            };
            return add_subcommands(app, common, formats);
          }};
}

}  // namespace mltool::cli
