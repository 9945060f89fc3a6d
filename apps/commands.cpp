// The command table: the only list of subcommands. A command is added here when it works.
#include "cli.hpp"

namespace mltool::cli {

Command index_command();
Command pack_command();
#ifdef MLTOOL_HAVE_SLIDE
Command tile_command();
#endif
#ifdef MLTOOL_HAVE_TORCH
Command extract_command();
#endif

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
#ifdef MLTOOL_HAVE_SLIDE
      tile_command(),
#endif
#ifdef MLTOOL_HAVE_TORCH
      extract_command(),
#endif
      pack_command(),
      index_command(),
  };
  return table;
}

}  // namespace mltool::cli
