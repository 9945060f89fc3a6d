// A job's option table (mltool/util/options.hpp) on the command line: each Option becomes a
// CLI11 option, flag or positional whose parsed text is handed to the table's parser, so
// names, types, defaults, choices and help are those of the one declaration. A list's "-"
// entry reads the list from stdin (docs/cli.md).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "cli.hpp"
#include "mltool/util/options.hpp"

namespace mltool::cli {

/// The shown default of an option: its value in a default-constructed job.
template <class Job>
std::string default_text(const util::Option<Job>& o) {
  return util::value_text(o.value(Job{}));
}

/// Adds every option of `table` to `app`, parsing into `*job` (which must outlive the parse).
template <class Job>
void add_options(CLI::App& app, const util::Options<Job>& table, const std::shared_ptr<Job>& job) {
  for (const auto& o : table) {
    CLI::Option* added = nullptr;
    if (o.is_flag) {
      added = app.add_flag_function(
          o.names, [job, &o](std::int64_t) { o.parse(*job, "true"); }, o.help);
    } else if (o.many) {
      added = app.add_option_function<std::vector<std::string>>(
          o.names,
          [job, &o](const std::vector<std::string>& items) {
            for (const auto& item : expand_stdin_list(items)) o.parse(*job, item);
          },
          o.help);
      added->type_name(o.type);
    } else {
      added = app.add_option_function<std::string>(
          o.names, [job, &o](const std::string& text) { o.parse(*job, text); }, o.help);
      added->type_name(o.type);
      if (!o.is_required) added->default_str(default_text(o));
      if (!o.choices.empty()) added->check(CLI::IsMember(o.choices));
      if (o.value_optional) added->expected(0, 1);
    }
    if (o.is_required) added->required();
  }
}

}  // namespace mltool::cli
