// The helpers commands share, linked into both the program and its LibTorch module.
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli.hpp"

namespace mltool::cli {

void add_common_options(CLI::App& app, CommonOptions& o) {
  app.add_option("--threads", o.threads, "Worker threads (0 = one per core)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--json", o.json, "Print one machine-readable JSON summary on stdout");
  app.add_flag("-v,--verbose", o.verbose, "More logging on stderr");
  app.add_flag("-q,--quiet", o.quiet, "Only errors on stderr");
  app.add_option("--log-format", o.log_format,
                 "Log lines on stderr: text (a timestamp, the command, the message) or json (one "
                 "object a line: time, level, command, message)")
      ->check(CLI::IsMember({"text", "json"}));
}

Action add_subcommands(CLI::App& app, const CommonOptions& common,
                       const std::vector<Command>& table) {
  app.require_subcommand(1, 1);
  auto actions = std::make_shared<std::vector<std::pair<CLI::App*, Action>>>();
  for (const auto& command : table) {
    CLI::App* sub = app.add_subcommand(command.name, command.summary);
    actions->emplace_back(sub, command.setup(*sub, common));
  }
  return [actions] {
    for (auto& [sub, action] : *actions)
      if (sub->parsed()) return action();
    return 1;  // not reached: CLI11 requires one subcommand
  };
}

std::string format_fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

std::vector<std::string> expand_stdin_list(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    if (item != "-") {
      out.push_back(item);
      continue;
    }
    std::string line;
    while (std::getline(std::cin, line)) {
      const auto first = line.find_first_not_of(" \t\r");
      if (first == std::string::npos || line[first] == '#') continue;
      const auto last = line.find_last_not_of(" \t\r");
      out.push_back(line.substr(first, last - first + 1));
    }
  }
  return out;
}

}  // namespace mltool::cli
