// mltool inspect's outputs: --check thresholds, the JSON document and the text report.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "mltool/records/inspect.hpp"
#include "mltool/util/error.hpp"
#include "task_spec.hpp"

namespace mltool::records {
namespace {

using nlohmann::json;

constexpr std::size_t kLabelColumns = 12;  // label columns of the text tables, at most

json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string fixed(double v, int digits) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return "inf";
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

std::string general(double v) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return "inf";
  char text[64];
  std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

// Text padded on the left (numbers) or right (names) to `width`.
std::string pad(const std::string& s, std::size_t width, bool left = true) {
  if (s.size() >= width) return s;
  return left ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

struct Named {
  const char* name;
  std::optional<double> Thresholds::*field;
};
constexpr Named kChecks[] = {
    {"max-ratio", &Thresholds::max_ratio},   {"cv", &Thresholds::cv},
    {"oversample", &Thresholds::oversample}, {"decile-drift", &Thresholds::decile_drift},
    {"decile-p", &Thresholds::decile_p},     {"chi2-p", &Thresholds::chi2_p},
    {"outcome-p", &Thresholds::outcome_p}};

// What a regression or survival dataset's shards are compared by.
const char* outcome_figure(PackTask task) { return detail::spec_of(task).figure; }

// The outcome-p check: a shard whose mean target or event rate sampling noise cannot explain.
std::optional<Violation> outcome_violation(const InspectReport& report, const GroupReport& g,
                                           const Thresholds& limits) {
  if (!has_outcome_stats(report.task) || !limits.outcome_p || g.outcome_shard < 0 ||
      !(g.outcome_p < *limits.outcome_p))
    return std::nullopt;
  const ShardReport& s = g.shards[static_cast<std::size_t>(g.outcome_shard)];
  const std::string figure = outcome_figure(report.task);
  return Violation{"outcome-p", g.name, g.outcome_p, *limits.outcome_p,
                   g.name + ": outcome-p " + general(g.outcome_p) + " is below " +
                       general(*limits.outcome_p) + " (" + s.file + " has " + figure + " " +
                       general(s.outcome_mean) + " over " + std::to_string(s.outcome_records) +
                       " records, the split " + general(g.outcome_mean) + ")"};
}

// The label whose share in decile `d` is furthest from its overall share.
std::size_t drifting_label(const GroupReport& g, int d) {
  std::uint64_t in_decile = 0, labeled = 0;
  for (auto c : g.decile_labels[d]) in_decile += c;
  for (auto c : g.label_histogram) labeled += c;
  std::size_t best = 0;
  double worst = -1;
  for (std::size_t l = 0; l < g.label_histogram.size(); ++l) {
    const double dev =
        std::fabs(static_cast<double>(g.decile_labels[d][l]) / static_cast<double>(in_decile) -
                  static_cast<double>(g.label_histogram[l]) / static_cast<double>(labeled));
    if (dev > worst) {
      worst = dev;
      best = l;
    }
  }
  return best;
}

// The decile-drift check: a drift above the limit fails when sampling noise cannot explain it
// (decile_p below decile-p), or, with decile-p off, on its size alone.
std::optional<Violation> drift_violation(const InspectReport& report, const GroupReport& g,
                                         const Thresholds& limits) {
  if (g.worst_decile < 0 || report.labels.empty() || !limits.decile_drift) return std::nullopt;
  if (std::isnan(g.decile_drift) || g.decile_drift <= *limits.decile_drift) return std::nullopt;
  if (limits.decile_p && !(g.decile_p < *limits.decile_p)) return std::nullopt;
  const int d = g.worst_decile;
  const std::size_t l = drifting_label(g, d);
  std::uint64_t in_decile = 0, labeled = 0;
  for (auto c : g.decile_labels[d]) in_decile += c;
  for (auto c : g.label_histogram) labeled += c;
  const auto percent = [](std::uint64_t part, std::uint64_t whole) {
    return fixed(100.0 * static_cast<double>(part) / static_cast<double>(whole), 1) + "%";
  };
  std::string message = g.name + ": decile-drift " + general(g.decile_drift) + " exceeds " +
                        general(*limits.decile_drift);
  if (limits.decile_p)
    message += " and decile-p " + general(g.decile_p) + " is below " + general(*limits.decile_p);
  message += " (label '" + report.labels[l] + "' makes " +
             percent(g.decile_labels[d][l], in_decile) + " of decile " + std::to_string(d) +
             " and " + percent(g.label_histogram[l], labeled) + " of the records)";
  return Violation{"decile-drift", g.name, g.decile_drift, *limits.decile_drift, message};
}

}  // namespace

Thresholds parse_thresholds(std::string_view text) {
  Thresholds t;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string item(text.substr(start, comma - start));
    start = comma + 1;
    const auto eq = item.find('=');
    std::string known;
    for (const auto& c : kChecks) known += std::string(known.empty() ? "" : ", ") + c.name;
    if (eq == std::string::npos)
      throw UsageError("'" + item + "' is not NAME=VALUE (thresholds: " + known + ")");
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    const Named* check = nullptr;
    for (const auto& c : kChecks)
      if (name == c.name) check = &c;
    if (!check) throw UsageError("unknown threshold '" + name + "' (thresholds: " + known + ")");
    if (value == "off") {
      t.*(check->field) = std::nullopt;
      continue;
    }
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    const bool probability = name == "chi2-p" || name == "decile-p" || name == "outcome-p";
    if (value.empty() || *end != '\0' || !std::isfinite(v) || v < 0 || (probability && v > 1))
      throw UsageError("threshold " + name + ": '" + value + "' is not a number >= 0" +
                       (probability ? " and <= 1" : "") + " or 'off'");
    t.*(check->field) = v;
  }
  return t;
}

std::string format_thresholds(const Thresholds& limits) {
  std::string out;
  for (const auto& c : kChecks) {
    const auto& v = limits.*(c.field);
    out += std::string(out.empty() ? "" : ",") + c.name + "=" + (v ? general(*v) : "off");
  }
  return out;
}

std::vector<Violation> check_thresholds(const InspectReport& report, const Thresholds& limits) {
  std::vector<Violation> out;
  for (const auto& g : report.groups) {
    if (g.records == 0) continue;
    const auto exceeds = [&](const char* check, double value, const std::optional<double>& limit,
                             const std::string& why) {
      if (!limit || std::isnan(value) || value <= *limit) return;
      out.push_back({check, g.name, value, *limit,
                     g.name + ": " + check + " " + general(value) + " exceeds " + general(*limit) +
                         " (" + why + ")"});
    };
    std::size_t lo = 0, hi = 0;
    for (std::size_t i = 0; i < g.shards.size(); ++i) {
      if (g.shards[i].records < g.shards[lo].records) lo = i;
      if (g.shards[i].records > g.shards[hi].records) hi = i;
    }
    const std::string sizes = g.shards[hi].file + " holds " + std::to_string(g.shards[hi].records) +
                              " records, " + g.shards[lo].file + " " +
                              std::to_string(g.shards[lo].records);
    // Shard sizes within one record of each other are the best any writer can do (3 records in
    // 4 shards: 1, 1, 1, 0), so the size figures, however far from 1, do not fail them.
    const bool sizes_even = g.shards[hi].records - g.shards[lo].records <= 1;
    if (!sizes_even) {
      exceeds("max-ratio", g.max_min_ratio, limits.max_ratio, sizes);
      exceeds("cv", g.cv, limits.cv, sizes);
    }
    if (g.oversampled_shard >= 0 && !sizes_even) {
      const auto& s = g.shards[static_cast<std::size_t>(g.oversampled_shard)];
      exceeds("oversample", g.max_oversample, limits.oversample,
              s.file + " makes " +
                  fixed(100 * g.max_oversample * static_cast<double>(s.records) /
                            static_cast<double>(g.records),
                        1) +
                  "% of decile " + std::to_string(s.oversample_decile) +
                  " of a round-robin epoch and " +
                  fixed(100 * static_cast<double>(s.records) / static_cast<double>(g.records), 1) +
                  "% of the records");
    }
    if (auto v = drift_violation(report, g, limits)) out.push_back(std::move(*v));
    if (auto v = outcome_violation(report, g, limits)) out.push_back(std::move(*v));
    if (g.chi_square && limits.chi2_p && g.chi_square->p_value < *limits.chi2_p) {
      const auto& c = *g.chi_square;
      out.push_back({"chi2-p", g.name, c.p_value, *limits.chi2_p,
                     g.name + ": chi2-p " + general(c.p_value) + " is below " +
                         general(*limits.chi2_p) +
                         " (the label mix depends on the shard: chi-square " +
                         general(c.statistic) + ", dof " + std::to_string(c.dof) + ")"});
    }
  }
  return out;
}

namespace {

// Regression, survival: "task" and the outcome of each group and shard (docs/inspect.md#json).
void add_outcomes(const InspectReport& report, json& doc) {
  if (!has_outcome_stats(report.task)) return;
  doc["task"] = to_string(report.task);
  const char* figure = detail::spec_of(report.task).figure_key;
  for (std::size_t i = 0; i < report.groups.size(); ++i) {
    const GroupReport& g = report.groups[i];
    json& group = doc["groups"][i];
    group["outcome"] = {
        {"figure", figure},
        {"records", g.outcome_records},
        {"mean", number(g.outcome_mean)},
        {"sd", number(g.outcome_sd)},
        {"p_value", number(g.outcome_p)},
        {"shard", g.outcome_shard < 0 ? json(nullptr) : json(g.shards[g.outcome_shard].file)}};
    for (std::size_t j = 0; j < g.shards.size(); ++j) {
      const ShardReport& s = g.shards[j];
      group["shards"][j]["outcome"] = {{"records", s.outcome_records},
                                       {"mean", number(s.outcome_mean)},
                                       {"p_value", number(s.outcome_p)}};
    }
  }
}

// Regression, survival: the group's outcome line and the outcome of each shard.
std::string outcome_text(const InspectReport& report, const GroupReport& g) {
  if (!has_outcome_stats(report.task) || g.outcome_records == 0) return "";
  const std::string figure = outcome_figure(report.task);
  std::string out = "  outcome: " + figure + " " + fixed(g.outcome_mean, 4);
  if (detail::spec_of(report.task).figure_kind == detail::OutcomeFigure::mean)
    out += " (sd " + fixed(g.outcome_sd, 4) + ")";
  out += " over " + std::to_string(g.outcome_records) + " records; the shards' " + figure +
         "s differ from it with p " + general(g.outcome_p) +
         " under a random assignment of records to shards (Bonferroni)\n";
  std::size_t file_width = 5;
  for (const auto& s : g.shards) file_width = std::max(file_width, s.file.size());
  out += "    " + pad("shard", file_width, false) + pad("records", 10) + pad(figure, 13) +
         pad("p", 11) + "\n";
  for (const auto& s : g.shards)
    out += "    " + pad(s.file, file_width, false) + pad(std::to_string(s.outcome_records), 10) +
           pad(fixed(s.outcome_mean, 4), 13) + pad(general(s.outcome_p), 11) + "\n";
  return out;
}

json label_counts_json(const std::vector<LabelCount>& counts) {
  if (counts.empty()) return nullptr;
  json out = json::array();
  for (const auto& c : counts)
    out.push_back({{"label", c.label},
                   {"positives", c.positives},
                   {"negatives", c.negatives},
                   {"missing", c.missing}});
  return out;
}

}  // namespace

json to_json(const InspectReport& report, const Thresholds* limits,
             const std::vector<Violation>* violations) {
  json groups = json::array();
  for (const auto& g : report.groups) {
    json shards = json::array();
    for (const auto& s : g.shards) {
      json factors = json::array();
      for (double f : s.factors) factors.push_back(number(f));
      shards.push_back({{"file", s.file},
                        {"index", s.index.empty() ? json(nullptr) : json(s.index)},
                        {"records", s.records},
                        {"bytes", s.bytes},
                        {"label_histogram", s.label_histogram},
                        {"unlabeled", s.unlabeled},
                        {"oversample", number(s.oversample)},
                        {"oversample_decile",
                         s.oversample_decile < 0 ? json(nullptr) : json(s.oversample_decile)},
                        {"decile_factors", factors},
                        {"exhausted_at", number(s.exhausted_at)}});
    }
    json deciles = json::array();
    for (int d = 0; d < kDeciles; ++d) {
      deciles.push_back({{"records", g.decile_records[d]},
                         {"label_histogram", g.decile_labels[d]},
                         {"max_deviation", number(g.decile_deviation[d])}});
    }
    json chi = nullptr;
    if (g.chi_square)
      chi = {{"statistic", g.chi_square->statistic},
             {"dof", g.chi_square->dof},
             {"p_value", g.chi_square->p_value}};
    groups.push_back(
        {{"name", g.name},
         {"records", g.records},
         {"bytes", g.bytes},
         {"unlabeled", g.unlabeled},
         {"label_histogram", g.label_histogram},
         {"label_counts", label_counts_json(g.label_counts)},
         {"max_min_ratio", number(g.max_min_ratio)},
         {"cv", number(g.cv)},
         {"chi_square", chi},
         {"max_oversample", number(g.max_oversample)},
         {"oversampled_shard",
          g.oversampled_shard < 0 ? json(nullptr) : json(g.shards[g.oversampled_shard].file)},
         {"decile_drift", number(g.decile_drift)},
         {"worst_decile", g.worst_decile < 0 ? json(nullptr) : json(g.worst_decile)},
         {"decile_p", number(g.decile_p)},
         {"deciles", deciles},
         {"shards", shards}});
  }
  json doc = {{"dataset", report.dataset.empty() ? json(nullptr) : json(report.dataset)},
              {"deep", report.deep},
              {"label_feature", report.label_feature},
              {"labels", report.labels},
              {"records", report.records},
              {"bytes", report.bytes},
              {"groups", groups}};
  add_outcomes(report, doc);
  if (limits) {
    json thresholds = json::object();
    for (const auto& c : kChecks) {
      const auto& v = (*limits).*(c.field);
      thresholds[c.name] = v ? json(*v) : json(nullptr);
    }
    json list = json::array();
    if (violations)
      for (const auto& v : *violations)
        list.push_back({{"check", v.check},
                        {"group", v.group},
                        {"value", number(v.value)},
                        {"threshold", v.threshold},
                        {"message", v.message}});
    doc["checks"] = {{"thresholds", thresholds}, {"violations", list}};
  }
  return doc;
}

namespace {

// The label columns of the text tables: a column per label, up to kLabelColumns labels; past
// that (e.g. a slide id as the label) the number of labels present, and the per-label
// figures only in --json.
struct LabelLayout {
  const std::vector<std::string>& names;
  std::size_t labels = 0;   // labels in the report
  std::size_t columns = 0;  // those with a column of their own
  std::vector<std::size_t> width;
};

LabelLayout label_columns(const InspectReport& report) {
  LabelLayout c{report.labels, 0, 0, {}};
  c.labels = report.labels.size();
  c.columns = c.labels <= kLabelColumns ? c.labels : 0;
  c.width.resize(c.columns);
  for (std::size_t l = 0; l < c.columns; ++l)
    c.width[l] = std::max<std::size_t>(report.labels[l].size(), 6) + 2;
  return c;
}

// Multilabel: per split, each label's positives / negatives / missing, then the total.
std::string label_count_text(const InspectReport& report) {
  std::string out = std::string(to_string(report.task)) +
                    " records: per label positives / negatives / missing (shards not "
                    "compared by label)\n";
  std::vector<LabelCount> total = report.groups.front().label_counts;
  for (auto& t : total) t.positives = t.negatives = t.missing = 0;
  const auto line = [](const std::string& name, const std::vector<LabelCount>& counts) {
    std::string text = "  " + name + ":";
    for (const auto& c : counts)
      text += " " + c.label + " " + std::to_string(c.positives) + "/" +
              std::to_string(c.negatives) + "/" + std::to_string(c.missing);
    return text + "\n";
  };
  for (const auto& g : report.groups) {
    out += line(g.name, g.label_counts);
    for (std::size_t l = 0; l < total.size() && l < g.label_counts.size(); ++l) {
      total[l].positives += g.label_counts[l].positives;
      total[l].negatives += g.label_counts[l].negatives;
      total[l].missing += g.label_counts[l].missing;
    }
  }
  return out + line("all", total);
}

// The report's first lines: what was read, and why label figures may be missing.
std::string text_heading(const InspectReport& report) {
  std::string out;
  std::size_t shards = 0;
  for (const auto& g : report.groups) shards += g.shards.size();
  out += report.dataset.empty()
             ? std::to_string(shards) + " TFRecord files"
             : "dataset " + report.dataset + ": " + std::to_string(report.groups.size()) +
                   " splits, " + std::to_string(shards) + " shards";
  out += ", " + std::to_string(report.records) + " records, " + std::to_string(report.bytes) +
         " bytes";
  out += report.deep ? ", every frame, record and index verified\n" : "\n";
  if (!report.groups.empty() && !report.groups.front().label_counts.empty())
    out += label_count_text(report);
  else if (!has_label_map(report.task) && !has_outcome_stats(report.task))
    out += std::string(to_string(report.task)) + " records: no label or outcome figures\n";
  else if (has_outcome_stats(report.task))
    out += std::string(to_string(report.task)) + " records: no labels; shards compared by " +
           outcome_figure(report.task) + "\n";
  else if (report.labels.empty())
    out += "no record has a feature '" + report.label_feature + "': no label figures\n";
  if (report.labels.size() > kLabelColumns)
    out +=
        std::to_string(report.labels.size()) + " labels: per-label columns left out (see --json)\n";
  return out;
}

// A group's heading and its table of shards.
std::string shard_table(const GroupReport& g, const LabelLayout& c) {
  std::string out = "\n" + g.name + ": " + std::to_string(g.shards.size()) + " shards, " +
                    std::to_string(g.records) + " records, " + std::to_string(g.bytes) + " bytes\n";
  std::size_t file_width = 5;
  for (const auto& s : g.shards) file_width = std::max(file_width, s.file.size());
  std::string head = "  " + pad("shard", file_width, false) + pad("records", 10) + pad("bytes", 12);
  for (std::size_t l = 0; l < c.columns; ++l) head += pad(c.names[l], c.width[l]);
  if (c.labels > c.columns) head += pad("labels", 8);
  if (g.unlabeled) head += pad("unlabeled", 11);
  out += head + pad("oversample", 14) + pad("exhausted", 11) + "\n";
  for (const auto& s : g.shards) {
    std::string line = "  " + pad(s.file, file_width, false) + pad(std::to_string(s.records), 10) +
                       pad(std::to_string(s.bytes), 12);
    for (std::size_t l = 0; l < c.columns; ++l)
      line += pad(std::to_string(s.label_histogram[l]), c.width[l]);
    if (c.labels > c.columns) {
      const auto present = std::count_if(s.label_histogram.begin(), s.label_histogram.end(),
                                         [](std::uint64_t n) { return n > 0; });
      line += pad(std::to_string(present), 8);
    }
    if (g.unlabeled) line += pad(std::to_string(s.unlabeled), 11);
    const std::string exhausted =
        std::isnan(s.exhausted_at) ? "-" : fixed(100 * s.exhausted_at, 1) + "%";
    const std::string where =
        s.oversample_decile < 0 ? "" : " (" + std::to_string(s.oversample_decile) + ")";
    out += line + pad(fixed(s.oversample, 2) + where, 14) + pad(exhausted, 11) + "\n";
  }
  return out;
}

// A group's balance and interleave lines.
std::string balance_lines(const GroupReport& g) {
  std::string out =
      "  balance: max/min records " + fixed(g.max_min_ratio, 3) + ", cv " + fixed(g.cv, 4);
  if (g.chi_square) {
    out += ", chi-square " + fixed(g.chi_square->statistic, 2) + " (dof " +
           std::to_string(g.chi_square->dof) + ", p " + general(g.chi_square->p_value) + ")";
  }
  out += "\n  interleave (round-robin over " + std::to_string(g.shards.size()) + " shards): ";
  if (g.oversampled_shard >= 0) {
    const ShardReport& s = g.shards[static_cast<std::size_t>(g.oversampled_shard)];
    out += s.file + " is read " + fixed(g.max_oversample, 2) +
           "x as often as its size warrants in decile " + std::to_string(s.oversample_decile);
  }
  if (g.worst_decile >= 0) {
    out += "; label shares drift up to " + fixed(g.decile_drift, 3) + " (decile " +
           std::to_string(g.worst_decile) + ", p " + general(g.decile_p) +
           " under a random record order)";
  }
  return out + "\n";
}

// A group's label shares per decile of the epoch, beside its overall shares.
std::string decile_table(const GroupReport& g, const LabelLayout& c) {
  std::uint64_t labeled = 0;
  for (auto n : g.label_histogram) labeled += n;
  std::string out = "  label share by decile of the epoch (0 = first tenth):\n";
  std::string row = "    " + pad("decile", 7, false) + pad("records", 10);
  for (std::size_t l = 0; l < c.columns; ++l) row += pad(c.names[l], c.width[l]);
  out += row + pad("max dev", 10) + "\n";
  row = "    " + pad("all", 7, false) + pad(std::to_string(g.records), 10);
  for (std::size_t l = 0; l < c.columns; ++l)
    row += pad(fixed(static_cast<double>(g.label_histogram[l]) / static_cast<double>(labeled), 3),
               c.width[l]);
  out += row + "\n";
  for (int d = 0; d < kDeciles; ++d) {
    std::uint64_t in_decile = 0;
    for (auto n : g.decile_labels[d]) in_decile += n;
    row = "    " + pad(std::to_string(d), 7, false) + pad(std::to_string(g.decile_records[d]), 10);
    for (std::size_t l = 0; l < c.columns; ++l) {
      const double share =
          in_decile ? static_cast<double>(g.decile_labels[d][l]) / static_cast<double>(in_decile)
                    : std::numeric_limits<double>::quiet_NaN();
      row += pad(fixed(share, 3), c.width[l]);
    }
    out += row + pad(fixed(g.decile_deviation[d], 3), 10) + "\n";
  }
  return out;
}

}  // namespace

std::string format_text(const InspectReport& report) {
  std::string out = text_heading(report);
  const LabelLayout columns = label_columns(report);
  for (const auto& g : report.groups) {
    out += shard_table(g, columns);
    if (g.records == 0) continue;
    out += balance_lines(g) + outcome_text(report, g);
    if (columns.labels > 0 && g.worst_decile >= 0) out += decile_table(g, columns);
  }
  return out;
}

}  // namespace mltool::records
