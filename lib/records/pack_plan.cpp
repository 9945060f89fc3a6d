#include "pack_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "mltool/io/crc32c.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/options.hpp"
#include "task_spec.hpp"

namespace mltool::records::detail {
namespace {

std::string_view slide_of(std::string_view key) {
  const auto slash = key.rfind('/');
  return slash == std::string_view::npos ? key : key.substr(0, slash);
}

/// Interns strings as dense ids in order of first appearance. Looked up by view (no
/// string is built for a name already seen); the last name is remembered, since labels
/// tables list a slide's rows together.
class Interner {
 public:
  std::uint32_t id(std::string_view s) {
    if (!names_.empty() && s == *last_) return last_id_;
    auto it = ids_.find(s);
    if (it == ids_.end()) {
      names_.emplace_back(s);  // a deque: earlier names never move, so their views stay valid
      it = ids_.emplace(names_.back(), static_cast<std::uint32_t>(names_.size() - 1)).first;
    }
    last_ = &names_[it->second];
    last_id_ = it->second;
    return it->second;
  }
  std::vector<std::string> take() {
    return {std::make_move_iterator(names_.begin()), std::make_move_iterator(names_.end())};
  }

 private:
  std::unordered_map<std::string_view, std::uint32_t> ids_;
  std::deque<std::string> names_;
  const std::string* last_ = nullptr;
  std::uint32_t last_id_ = 0;
};

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

// Rows of every slide, built on the first key that is not a tile key.
class SlideRows {
 public:
  explicit SlideRows(const io::FeatureStore& store) : store_(store) {}
  const std::vector<std::uint64_t>* find(std::string_view slide) {
    if (!built_) {
      for (std::uint64_t i = 0; i < store_.rows(); ++i) {
        const std::string_view key = store_.key(i);
        if (key.find('/') != std::string_view::npos) rows_[slide_of(key)].push_back(i);
      }
      built_ = true;
    }
    const auto it = rows_.find(slide);
    return it == rows_.end() ? nullptr : &it->second;
  }

 private:
  const io::FeatureStore& store_;
  std::unordered_map<std::string_view, std::vector<std::uint64_t>> rows_;
  bool built_ = false;
};

// The record "label" of a labels row: its id in the label map (classification), or of its
// outcome among the distinct outcomes (regression, survival), so repeats and bags key on it
// alike.
class OutcomeIds {
 public:
  OutcomeIds(PackTask task, PackPlan& plan) : spec_(spec_of(task)), plan_(plan) {}
  std::uint32_t id(const LabelRecord& rec) {
    if (spec_.label_map) return plan_.labels.id(rec.label);
    const Outcome o{rec.target, rec.time, rec.event, rec.values};
    const auto [it, added] =
        ids_.try_emplace(key(o), static_cast<std::uint32_t>(plan_.outcomes.size()));
    if (added) plan_.outcomes.push_back(o);
    return it->second;
  }
  std::string describe(std::uint32_t id) const {
    if (spec_.label_map) return "label " + in_quotes(plan_.labels.name(id));
    return spec_.describe(plan_.outcomes[id]);
  }

 private:
  static std::string key(const Outcome& o) {
    std::string out;
    const auto add = [&out](float v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
    add(o.target);
    add(o.time);
    add(o.event);
    for (const float v : o.values) add(std::isnan(v) ? NAN : v);  // one NaN spelling
    return out;
  }
  const PackTaskSpec& spec_;
  PackPlan& plan_;
  std::unordered_map<std::string, std::uint32_t> ids_;
};

// A bag as first seen: its group, outcome and line.
struct BagSeen {
  std::uint32_t group = 0;
  std::uint32_t label = 0;
  std::uint64_t line = 0;
};

// What the labels rows reach, before records are formed.
struct Matches {
  // tile/image: (row, label, group); bag: (bag, label) -> rows, and bag -> first sight.
  std::vector<std::tuple<std::uint64_t, std::uint32_t, std::uint32_t>> pairs;
  std::map<std::pair<std::string, std::uint32_t>, std::vector<std::uint64_t>> bags;
  std::unordered_map<std::string, BagSeen> bag_seen;
  std::vector<std::string> missing;  // the first few rows whose key is not in the store
  std::set<std::string> incomplete;  // --bag-by: bags with a key missing from the store
};

// The rows a labels key reaches: one tile, or every tile of a slide; none when missing.
struct Reach {
  std::uint64_t tile_row = 0;
  const std::uint64_t* rows = nullptr;
  std::size_t count = 0;
  std::string_view slide;
};

Reach reach_of(const io::FeatureStore& store, SlideRows& slide_rows, const std::string& key) {
  Reach r;
  if (const auto row = store.find(key)) {
    r.tile_row = *row;
    r.rows = &r.tile_row;
    r.count = 1;
    r.slide = slide_of(key);
  } else if (const auto* rows = slide_rows.find(key)) {
    r.rows = rows->data();
    r.count = rows->size();
    r.slide = key;
  }
  return r;
}

// Bag unit: a bag lies in one group and (regression, survival) has one outcome.
void check_bag(Matches& m, const Labels& labels, const LabelRecord& rec, const std::string& bag,
               const BagSeen& now, const OutcomeIds& ids, PackTask task) {
  const auto [it, inserted] = m.bag_seen.emplace(bag, now);
  if (inserted) return;
  const BagSeen& first = it->second;
  const std::string at = "line " + std::to_string(rec.line) + ": bag " + in_quotes(bag);
  const std::string then = ", but line " + std::to_string(first.line);
  if (first.group != now.group)
    throw InputError(at_file(labels.path, at + " is in group " + in_quotes(rec.group) + then +
                                              " put it in another group; a bag must lie in "
                                              "one group (--group-by)"));
  if (!has_label_map(task) && first.label != now.label)
    throw InputError(at_file(labels.path, at + " has " + ids.describe(now.label) + then +
                                              " gave it " + ids.describe(first.label) +
                                              "; a bag has one outcome"));
}

// Resolves each labels row to the rows it reaches (one tile, or every tile of a slide),
// dropping invalid rows; a bag must keep one group (and outcome) throughout.
Matches match_labels(const io::FeatureStore& store, const Labels& labels, const PackJob& job,
                     OutcomeIds& ids, Interner& groups, PackReport& report) {
  std::vector<bool> invalid(store.rows(), false);
  for (const auto row : store.invalid_rows()) invalid[row] = true;
  SlideRows slide_rows(store);
  Matches m;
  const bool bag = job.unit == PackUnit::bag;
  const bool bagged = !job.columns.bag.empty();
  for (const LabelRecord& rec : labels.records) {
    const Reach r = reach_of(store, slide_rows, rec.key);
    if (!r.rows) {
      if (m.missing.size() < 5)
        m.missing.push_back(in_quotes(rec.key) + " (line " + std::to_string(rec.line) +
                            (bagged ? ", bag " + in_quotes(rec.bag) : "") + ")");
      ++report.missing_keys;
      if (bagged) m.incomplete.insert(rec.bag);
      continue;
    }
    const std::uint32_t label = ids.id(rec);
    const std::string_view own =
        job.columns.group.empty() ? (bagged ? rec.bag : r.slide) : rec.group;
    const std::uint32_t group = groups.id(own);
    const std::string bag_id(bagged ? std::string_view(rec.bag) : r.slide);
    if (bag) check_bag(m, labels, rec, bag_id, {group, label, rec.line}, ids, job.task);
    auto* members = bag ? &m.bags[{bag_id, label}] : nullptr;
    for (const std::uint64_t* it = r.rows; it != r.rows + r.count; ++it) {
      const std::uint64_t row = *it;
      if (invalid[row]) {
        ++report.invalid_rows;
      } else if (bag) {
        members->push_back(row);
      } else {
        m.pairs.emplace_back(row, label, group);
      }
    }
  }
  return m;
}

// Refuses labels rows whose keys the store lacks, unless --skip-missing.
void check_missing(const io::FeatureStore& store, const Labels& labels, const PackJob& job,
                   const std::vector<std::string>& missing, const PackReport& report) {
  if (report.missing_keys == 0 || job.skip_missing) return;
  std::string list;
  for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
  const bool bagged = !job.columns.bag.empty();
  throw InputError(at_file(labels.path, std::to_string(report.missing_keys) +
                                            " labels rows name keys that are neither tile keys "
                                            "nor slides of the feature store " +
                                            store.dir() + ": " + list +
                                            (report.missing_keys > missing.size() ? ", ..." : "") +
                                            (bagged ? " (their bags are incomplete; drop those "
                                                      "bags with --skip-missing)"
                                                    : " (skip them with --skip-missing)")));
}

// --bag-by under --skip-missing: a bag with a key missing from the store is dropped whole.
void drop_incomplete(Matches& m, PackReport& report) {
  report.incomplete_bags = m.incomplete.size();
  for (auto it = m.bags.begin(); it != m.bags.end();)
    it = m.incomplete.count(it->first.first) ? m.bags.erase(it) : std::next(it);
}

// Bag unit: one record per (bag, label), its rows sorted, repeats dropped.
void plan_bags(Matches& m, Interner& slides, PackPlan& plan, PackReport& report) {
  for (auto& [slide_label, members] : m.bags) {
    const auto before = members.size();
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    report.duplicate_labels += before - members.size();
    if (members.empty()) {
      ++report.empty_bags;
      continue;
    }
    PlannedRecord r;
    r.first = plan.rows.size();
    r.count = members.size();
    r.label = slide_label.second;
    r.slide = slides.id(slide_label.first);
    r.group = m.bag_seen.at(slide_label.first).group;
    plan.rows.insert(plan.rows.end(), members.begin(), members.end());
    plan.records.push_back(r);
  }
}

// Tile and image units: one record per (row, label).
void plan_pairs(const io::FeatureStore& store, Matches& m, Interner& slides, PackPlan& plan,
                PackReport& report) {
  auto& pairs = m.pairs;
  // Sorted by (row, label): a deterministic record order; a repeated pair is dropped.
  std::stable_sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
  });
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto [row, label, group] = pairs[i];
    if (i > 0 && std::get<0>(pairs[i - 1]) == row && std::get<1>(pairs[i - 1]) == label) {
      ++report.duplicate_labels;
      continue;
    }
    PlannedRecord r;
    r.first = plan.rows.size();
    r.count = 1;
    r.label = label;
    r.slide = slides.id(slide_of(store.key(row)));
    r.group = group;
    plan.rows.push_back(row);
    plan.records.push_back(r);
  }
}

}  // namespace

PackPlan plan_records(const io::FeatureStore& store, const Labels& labels, const PackJob& job,
                      PackReport& report) {
  PackPlan plan;
  if (has_label_map(job.task)) plan.labels = label_map(labels);
  Interner slides, groups;
  OutcomeIds ids(job.task, plan);
  Matches matches = match_labels(store, labels, job, ids, groups, report);
  check_missing(store, labels, job, matches.missing, report);
  drop_incomplete(matches, report);
  if (job.unit == PackUnit::bag) {
    plan_bags(matches, slides, plan, report);
  } else {
    plan_pairs(store, matches, slides, plan, report);
  }
  plan.slides = slides.take();
  plan.groups = groups.take();
  plan.index = plan.rows;
  return plan;
}

std::uint64_t dedupe_rows(const io::FeatureStore& store, PackPlan& plan) {
  std::vector<std::uint64_t> used = plan.rows;
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  const std::size_t width = store.row_bytes();
  const auto* base = static_cast<const std::uint8_t*>(store.data());
  auto bytes = [&](std::uint64_t row) {
    return std::string_view(reinterpret_cast<const char*>(base + row * width), width);
  };

  // CRC-32C (hardware) -> first rows with that checksum (more than one only on a collision
  // of different bytes, which the byte compare below tells apart).
  std::unordered_map<std::uint32_t, std::vector<std::uint64_t>> seen;
  std::unordered_map<std::uint64_t, std::uint64_t> canonical;
  std::uint64_t duplicates = 0;
  for (const auto row : used) {  // ascending: the first occurrence wins
    const std::string_view b = bytes(row);
    auto& candidates = seen[io::crc32c(b.data(), b.size())];
    std::uint64_t target = row;
    for (const auto c : candidates) {
      if (bytes(c) == b) {
        target = c;
        break;
      }
    }
    if (target == row) {
      candidates.push_back(row);
    } else {
      canonical.emplace(row, target);
      ++duplicates;
    }
  }
  for (auto& row : plan.index) {
    const auto it = canonical.find(row);
    if (it != canonical.end()) row = it->second;
  }
  return duplicates;
}

namespace {

/// "<row:06d>_<col:06d>" → (row, col), or nothing.
std::optional<std::pair<std::int64_t, std::int64_t>> parse_grid(std::string_view name) {
  if (name.size() < 3) return std::nullopt;
  const auto sep = name.find('_');
  if (sep == std::string_view::npos || sep == 0 || sep + 1 == name.size()) return std::nullopt;
  std::int64_t v[2] = {0, 0};
  const std::string_view parts[2] = {name.substr(0, sep), name.substr(sep + 1)};
  for (int i = 0; i < 2; ++i) {
    if (parts[i].size() > 12) return std::nullopt;
    for (const char c : parts[i]) {
      if (c < '0' || c > '9') return std::nullopt;
      v[i] = v[i] * 10 + (c - '0');
    }
  }
  return std::make_pair(v[0], v[1]);
}

}  // namespace

void find_coordinates(const io::FeatureStore& store, PackPlan& plan) {
  const std::string path = store.tile_store();
  if (path.empty()) return;
  if (!io::TileStore::is_store(path)) {
    log::info(path + ": the tile store named by " + store.dir() +
              "/features.json is not there; records get no x, y");
    return;
  }
  const auto tiles = io::TileStore::open(path, false);
  // slide -> (row, col) -> (x, y), loaded per slide on first use.
  std::unordered_map<std::string, std::map<std::pair<std::int64_t, std::int64_t>,
                                           std::pair<std::int64_t, std::int64_t>>>
      grids;
  std::vector<std::pair<std::int64_t, std::int64_t>> coords;
  coords.reserve(plan.rows.size());
  for (const auto row : plan.rows) {
    const std::string_view key = store.key(row);
    const auto slash = key.rfind('/');
    const auto cell =
        slash == std::string_view::npos ? std::nullopt : parse_grid(key.substr(slash + 1));
    if (!cell) {
      log::info("tile key " + in_quotes(key) + " is not <slide>/<row>_<col>; records get no x, y");
      return;
    }
    const std::string slide(key.substr(0, slash));
    auto it = grids.find(slide);
    if (it == grids.end()) {
      auto& grid = grids[slide];
      if (const auto doc = tiles.record("tiles", slide)) {
        try {
          const auto& r = doc->at("row");
          const auto& c = doc->at("col");
          const auto& x = doc->at("x");
          const auto& y = doc->at("y");
          for (std::size_t i = 0; i < r.size(); ++i) {
            grid[{r.at(i).get<std::int64_t>(), c.at(i).get<std::int64_t>()}] = {
                x.at(i).get<std::int64_t>(), y.at(i).get<std::int64_t>()};
          }
        } catch (const nlohmann::json::exception& e) {
          throw FormatError(path + ": meta 'tiles/" + slide + "': " + e.what());
        }
      }
      it = grids.find(slide);
    }
    const auto found = it->second.find(*cell);
    if (found == it->second.end()) {
      log::info("tile " + in_quotes(key) + " is not in the tile store " + path +
                "; records get no x, y");
      return;
    }
    coords.push_back(found->second);
  }
  plan.coordinates = std::move(coords);
  plan.tile_store = path;
}

}  // namespace mltool::records::detail
