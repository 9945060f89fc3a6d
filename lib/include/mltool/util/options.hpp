// Options declared once. Each job (TrainJob, PackJob, ...) has one table of Option<Job>
// beside it, as LightGBM's config.h and llama.cpp's option table do: the name, type,
// default (the job struct's own initializer), allowed values, checks and help of each. The
// command line is built from the table (apps/cli_options.hpp), the library validates a job
// against it (check_options) and manifests record options from it (recorded); `mltool help
// CMD --json` lists the options as bound, so the docs can be checked against them.
//
//   util::option("--epochs", &TrainJob::epochs, "Passes over the training split").at_least(1)
//   util::choice("--feed", &TrainJob::feed, kFeeds, "auto (pinned if it fits), ...")
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "mltool/util/error.hpp"

namespace mltool::util {

/// The names of an enum's values: {{E::a, "a"}, {E::b, "b"}}.
template <class E>
using EnumNames = std::vector<std::pair<E, const char*>>;

/// The name of `value` in `names`.
template <class E>
const char* name_of(const EnumNames<E>& names, E value) {
  for (const auto& [v, n] : names)
    if (v == value) return n;
  return "?";
}

/// The shortest text that reads back as `v` ("25", "0.001", "1e-06").
std::string number_text(double v);

/// An option's value as text: a string as it is, a number by number_text, null as "", else
/// JSON.
std::string value_text(const nlohmann::json& v);

/// "a, b or c".
std::string one_of_text(const std::vector<std::string>& names);

/// The value named `text`; throws UsageError "WHAT must be a, b or c, not 'x'".
template <class E>
E parse_enum(const EnumNames<E>& names, std::string_view text, const std::string& what) {
  std::vector<std::string> all;
  for (const auto& [v, n] : names) {
    if (text == n) return v;
    all.emplace_back(n);
  }
  throw UsageError(what + " must be " + one_of_text(all) + ", not '" + std::string(text) + "'");
}

/// Text → number for an option's value; throw UsageError naming `flag` ("--epochs: 'x' is
/// not an integer"). Reals must be finite.
std::int64_t parse_integer(const std::string& text, const std::string& flag);
std::uint64_t parse_unsigned(const std::string& text, const std::string& flag);
double parse_real(const std::string& text, const std::string& flag);

/// One option of a job. Built with option(), choice(), flag() or custom() below.
template <class Job>
struct Option {
  std::string
      names;  ///< as on the command line: "--epochs", "-o,--output", or "dataset" (a positional)
  std::string help;
  std::string type;  ///< shown in the help: INT, NUMBER, TEXT, ...; empty for a flag
  std::vector<std::string> choices;  ///< the allowed values (an enum's names); empty: any
  bool is_flag = false;              ///< takes no value
  bool many = false;            ///< a list: the value may be given several times (parse appends)
  bool value_optional = false;  ///< may be given without a value (parse gets "")
  bool is_required = false;
  std::string section;  ///< the manifest section it is recorded in (recorded()); empty: none
  /// Recorded: the value a manifest written before the option existed stands for (null:
  /// none), and whether a resumed job may not change it (a warning otherwise).
  nlohmann::json before_it_existed;
  bool fixed = false;
  std::function<void(Job&, const std::string&)> parse;  ///< sets (appends, if `many`) from text
  std::function<nlohmann::json(const Job&)> value;      ///< the value, as recorded and described
  /// Checks on the parsed value: each returns what is wrong ("must be at least 1") or "".
  std::vector<std::function<std::string(const Job&)>> checks;

  /// "--epochs" (a positional: its name).
  std::string flag() const {
    const auto comma = names.rfind(',');
    return comma == std::string::npos ? names : names.substr(comma + 1);
  }
  /// "epochs", "micro_batches": the long name without dashes, '-' as '_'.
  std::string key() const {
    std::string k = flag();
    k.erase(0, k.find_first_not_of('-'));
    for (char& c : k)
      if (c == '-') c = '_';
    return k;
  }

  /// May be given without a value: `--check` alone (parse gets "").
  Option& optional_value() {
    value_optional = true;
    return *this;
  }
  Option& required() {
    is_required = true;
    return *this;
  }
  /// Recorded in the manifest's `section` ("options", "runtime", ...).
  Option& in(std::string manifest_section) {
    section = std::move(manifest_section);
    return *this;
  }
  /// Recorded, and older manifests without it had `value`.
  Option& absent_means(nlohmann::json value) {
    before_it_existed = std::move(value);
    return *this;
  }
  /// A resumed job must keep the recorded value.
  Option& fixed_on_resume() {
    fixed = true;
    return *this;
  }
  /// A check: `ok(job)` or "FLAG must be " + `must`.
  Option& check(std::function<bool(const Job&)> ok, std::string must) {
    checks.push_back([ok = std::move(ok), must = std::move(must)](const Job& j) {
      return ok(j) ? std::string() : "must be " + must;
    });
    return *this;
  }
  Option& at_least(double least) {
    auto get = value;
    return check([get, least](const Job& j) { return get(j).template get<double>() >= least; },
                 least == 0 ? std::string(">= 0") : "at least " + number_text(least));
  }
  Option& at_most(double most) {
    auto get = value;
    return check([get, most](const Job& j) { return get(j).template get<double>() <= most; },
                 "at most " + number_text(most));
  }
  Option& positive() {
    auto get = value;
    return check([get](const Job& j) { return get(j).template get<double>() > 0; },
                 "a positive number");
  }
};

template <class Job>
using Options = std::vector<Option<Job>>;

/// One table of `parts` in order: a job's own options around a group several commands share
/// (io::dicomweb_options), declared once.
template <class Job>
Options<Job> joined(std::initializer_list<Options<Job>> parts) {
  Options<Job> out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

namespace detail {
template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "";
  if constexpr (std::is_floating_point_v<T>) return "NUMBER";
  if constexpr (std::is_integral_v<T>) return "INT";
  return "TEXT";
}
template <class T>
T parse_as(const std::string& text, const std::string& flag) {
  if constexpr (std::is_same_v<T, std::string>) {
    return text;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (text == "true" || text == "1") return true;
    if (text == "false" || text == "0") return false;
    throw UsageError(flag + ": '" + text + "' is not true or false");
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(parse_real(text, flag));
  } else if constexpr (std::is_unsigned_v<T>) {
    const std::uint64_t v = parse_unsigned(text, flag);
    if (v > std::numeric_limits<T>::max()) throw UsageError(flag + ": " + text + " is too large");
    return static_cast<T>(v);
  } else {
    const std::int64_t v = parse_integer(text, flag);
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
      throw UsageError(flag + ": " + text + " is out of range");
    return static_cast<T>(v);
  }
}
}  // namespace detail

/// An option stored where `field(job)` points (a member of a member: job.columns.key).
template <class Job, class Field,
          class T = std::remove_reference_t<std::invoke_result_t<Field, Job&>>>
Option<Job> option_at(std::string names, Field field, std::string help) {
  Option<Job> o;
  o.names = std::move(names);
  o.help = std::move(help);
  if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    o.type = "TEXT";
    o.many = true;
    o.parse = [field](Job& j, const std::string& text) { field(j).push_back(text); };
  } else {
    o.type = detail::type_name<T>();
    const std::string flag = o.flag();
    o.parse = [field, flag](Job& j, const std::string& text) {
      field(j) = detail::parse_as<T>(text, flag);
    };
  }
  o.value = [field](const Job& j) { return nlohmann::json(field(const_cast<Job&>(j))); };
  return o;
}

/// An option stored in `member` (a number, text or a list of text).
template <class Job, class T>
Option<Job> option(std::string names, T Job::*member, std::string help) {
  return option_at<Job>(
      std::move(names), [member](Job& j) -> T& { return j.*member; }, std::move(help));
}

/// A flag (no value) that sets where `field(job)` points.
template <class Job, class Field>
Option<Job> flag_at(std::string names, Field field, std::string help) {
  Option<Job> o = option_at<Job>(std::move(names), field, std::move(help));
  o.is_flag = true;
  return o;
}

/// A flag (no value) that sets `member`.
template <class Job>
Option<Job> flag(std::string names, bool Job::*member, std::string help) {
  Option<Job> o = option(std::move(names), member, std::move(help));
  o.is_flag = true;
  return o;
}

/// An option that names one value of the enum where `field(job)` points.
template <class Job, class Field,
          class E = std::remove_reference_t<std::invoke_result_t<Field, Job&>>>
Option<Job> choice_at(std::string names, Field field, const EnumNames<E>& values,
                      std::string help) {
  Option<Job> o;
  o.names = std::move(names);
  o.help = std::move(help);
  o.type = "TEXT";
  for (const auto& [v, n] : values) o.choices.emplace_back(n);
  const std::string flag = o.flag();
  o.parse = [field, &values, flag](Job& j, const std::string& text) {
    field(j) = parse_enum(values, text, flag);
  };
  o.value = [field, &values](const Job& j) {
    return nlohmann::json(name_of(values, field(const_cast<Job&>(j))));
  };
  return o;
}

/// An option that names one value of the enum `member` (its names in `values`).
template <class Job, class E>
Option<Job> choice(std::string names, E Job::*member, const EnumNames<E>& values,
                   std::string help) {
  return choice_at<Job>(
      std::move(names), [member](Job& j) -> E& { return j.*member; }, values, std::move(help));
}

/// An option with its own parser and value (a list of splits, "I/N", ...).
template <class Job>
Option<Job> custom(std::string names, std::string type, std::string help,
                   std::function<void(Job&, const std::string&)> parse,
                   std::function<nlohmann::json(const Job&)> value) {
  Option<Job> o;
  o.names = std::move(names);
  o.type = std::move(type);
  o.help = std::move(help);
  o.parse = std::move(parse);
  o.value = std::move(value);
  return o;
}

/// Throws UsageError for the first option of `job` that fails a check ("--epochs must be at
/// least 1"). Checks between options (--resume and --overwrite) are the job's own.
template <class Job>
void check_options(const Options<Job>& table, const Job& job) {
  for (const auto& o : table)
    for (const auto& check : o.checks)
      if (const std::string wrong = check(job); !wrong.empty())
        throw UsageError(o.flag() + " " + wrong);
}

/// The flag of the first option of `table` whose value in `job` is not its default (a
/// default-constructed Job's), or "" when every one has its default: an option given where it
/// does not apply, to refuse rather than ignore.
template <class Job>
std::string first_changed(const Options<Job>& table, const Job& job) {
  const Job defaults{};
  for (const auto& o : table)
    if (o.value(job) != o.value(defaults)) return o.flag();
  return "";
}

/// The options of `job` recorded in the manifest section `section`, by key.
template <class Job>
nlohmann::json recorded(const Options<Job>& table, const Job& job, std::string_view section) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& o : table)
    if (o.section == section) out[o.key()] = o.value(job);
  return out;
}

}  // namespace mltool::util
