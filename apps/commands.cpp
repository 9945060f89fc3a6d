// The command table: the only list of subcommands. A command is added here when it works.
#include "cli.hpp"

namespace mltool::cli {

Command index_command();

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      index_command(),
  };
  return table;
}

}  // namespace mltool::cli
