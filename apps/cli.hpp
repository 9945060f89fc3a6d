// The command table and the options every subcommand shares. Dispatch, the top-level
// usage and `mltool help CMD` are all built from the one table in commands.cpp, joined by
// the commands of the LibTorch module (torch_module.hpp) when a command needs them.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace mltool::cli {

/// Options every subcommand accepts, declared once in add_common_options().
struct CommonOptions {
  int threads = 0;                  ///< worker threads; 0 = one per core
  bool json = false;                ///< print one machine-readable JSON summary on stdout
  int verbose = 0;                  ///< -v: debug logging
  bool quiet = false;               ///< -q: errors only
  std::string log_format = "text";  ///< --log-format text|json
};

/// The action of a parsed subcommand: runs it and returns the exit code.
using Action = std::function<int()>;

/// One row of the command table.
struct Command {
  const char* name;
  const char* summary;
  /// Declares the command's options and positionals on `app`; returns the action,
  /// which reads the parsed values when it runs.
  std::function<Action(CLI::App& app, const CommonOptions& common)> setup;
};

/// The table of the commands built into the program (those that need no LibTorch), in
/// pipeline order.
const std::vector<Command>& commands();

/// The table `mltool --help` lists: commands() with `module` (the LibTorch module's
/// commands) placed in pipeline order, before `pack`.
std::vector<Command> all_commands(const std::vector<Command>& module);

/// Makes `app` a command of subcommands (`mltool export h5`, `mltool import h5`): each row of
/// `table` becomes a subcommand of `app` (cli.cpp gives it the shared options too), one of
/// which must be named; the returned action runs the one that was.
Action add_subcommands(CLI::App& app, const CommonOptions& common,
                       const std::vector<Command>& table);

/// Adds --threads, --json, --verbose and --quiet to a subcommand.
void add_common_options(CLI::App& app, CommonOptions& options);

/// Replaces a "-" entry by the lines of stdin (blank lines and # comments skipped).
std::vector<std::string> expand_stdin_list(const std::vector<std::string>& items);

/// `v` with `digits` decimals ("%.*f"), for log lines.
std::string format_fixed(double v, int digits = 1);

/// Parses argv and runs the selected command; returns the exit code. Throws mltool::Error.
int run(int argc, char** argv);

}  // namespace mltool::cli
