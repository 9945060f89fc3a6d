#include "cli.hpp"

#include <cstdio>
#include <iostream>
#include <memory>

#include "mltool/util/build_info.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::cli {
namespace {

constexpr const char* kDescription =
    "mltool: whole-slide images to trained models without running out of memory.\n"
    "Exit codes: 0 ok, 1 usage, 2 input/data error, 3 runtime/resource error, 4 partial success.";

std::string version_text() {
  std::string out;
  for (const auto& [name, value] : component_versions()) out += name + " " + value + "\n";
  return out;
}

// The help of a subcommand, identical whether asked as `mltool CMD --help` or `mltool help CMD`.
std::string command_help(const CLI::App& sub) { return sub.help("mltool"); }

void apply_logging(const std::string& name, const CommonOptions& common) {
  log::set_prefix("mltool " + name);
  if (common.quiet) log::set_level(log::Level::error);
  else if (common.verbose > 0) log::set_level(log::Level::debug);
}

}  // namespace

void add_common_options(CLI::App& app, CommonOptions& o) {
  app.add_option("--threads", o.threads, "Worker threads (0 = one per core)")->check(CLI::NonNegativeNumber);
  app.add_flag("--json", o.json, "Print one machine-readable JSON summary on stdout");
  app.add_flag("-v,--verbose", o.verbose, "More logging on stderr");
  app.add_flag("-q,--quiet", o.quiet, "Only errors on stderr");
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

int run(int argc, char** argv) {
  CLI::App app(kDescription, "mltool");
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the versions of mltool and its components");

  auto common = std::make_shared<CommonOptions>();
  std::vector<std::pair<CLI::App*, Action>> actions;
  for (const auto& command : commands()) {
    CLI::App* sub = app.add_subcommand(command.name, command.summary);
    add_common_options(*sub, *common);
    actions.emplace_back(sub, command.setup(*sub, *common));
  }
  CLI::App* help = app.add_subcommand("help", "Show the help of a command: mltool help CMD");
  std::string help_topic;
  help->add_option("command", help_topic, "Command name");

  auto find_sub = [&actions](const std::string& name) -> CLI::App* {
    for (auto& [sub, action] : actions)
      if (sub->get_name() == name) return sub;
    return nullptr;
  };

  // `mltool CMD` alone prints the command's usage, as samtools does.
  if (argc == 2) {
    const CLI::App* sub = find_sub(argv[1]);
    if (sub && !sub->get_options([](const CLI::Option* o) { return o->get_required(); }).empty()) {
      std::cout << command_help(*sub);
      return exit_code::usage;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    for (auto& [sub, action] : actions)
      if (sub->parsed()) {
        std::cout << command_help(*sub);
        return exit_code::ok;
      }
    std::cout << app.help();
    return exit_code::ok;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what() + std::string(" (see mltool --help)"));
  }

  if (show_version) {
    std::cout << version_text();
    return exit_code::ok;
  }
  if (help->parsed()) {
    if (help_topic.empty()) {
      std::cout << app.help();
      return exit_code::ok;
    }
    if (const CLI::App* sub = find_sub(help_topic)) {
      std::cout << command_help(*sub);
      return exit_code::ok;
    }
    throw UsageError("unknown command '" + help_topic + "' (see mltool --help)");
  }
  for (auto& [sub, action] : actions)
    if (sub->parsed()) {
      apply_logging(sub->get_name(), *common);
      return action();
    }
  std::cout << app.help();
  return exit_code::usage;
}

}  // namespace mltool::cli
