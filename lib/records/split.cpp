#include "mltool/records/split.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <unordered_map>
#include <utility>

#include "mltool/util/error.hpp"
#include "random.hpp"

namespace mltool::records {
namespace {

bool valid_name(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

// floor(log2(size)) for size >= 1: groups within a factor of two share a class.
int size_class(std::uint64_t size) {
  int c = 0;
  while (size >>= 1) ++c;
  return c;
}

// The groups of the items with their per-label record counts, in CSR form:
// group g has labels[offsets[g] .. offsets[g+1]) with counts[...] records each.
struct Groups {
  std::vector<std::string> names;  // sorted
  std::vector<std::uint32_t> of_item;
  std::vector<std::uint64_t> size;
  std::vector<std::size_t> offsets;
  std::vector<std::uint32_t> labels;
  std::vector<std::uint64_t> counts;
};

Groups collect_groups(const std::vector<SplitItem>& items) {
  Groups g;
  std::unordered_map<std::string_view, std::uint32_t> index;
  for (const SplitItem& item : items) index.emplace(item.group, 0);
  g.names.reserve(index.size());
  for (const auto& [name, unused] : index) g.names.emplace_back(name);
  std::sort(g.names.begin(), g.names.end());
  for (std::size_t i = 0; i < g.names.size(); ++i) {
    index[g.names[i]] = static_cast<std::uint32_t>(i);
  }

  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;  // (group, label) per item
  pairs.reserve(items.size());
  g.of_item.reserve(items.size());
  for (const SplitItem& item : items) {
    const std::uint32_t group = index.at(item.group);
    g.of_item.push_back(group);
    pairs.emplace_back(group, item.label);
  }
  std::sort(pairs.begin(), pairs.end());
  g.size.assign(g.names.size(), 0);
  g.offsets.assign(g.names.size() + 1, 0);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    ++g.size[pairs[i].first];
    if (i > 0 && pairs[i] == pairs[i - 1]) {
      ++g.counts.back();
      continue;
    }
    ++g.offsets[pairs[i].first + 1];
    g.labels.push_back(pairs[i].second);
    g.counts.push_back(1);
  }
  for (std::size_t i = 0; i < g.names.size(); ++i) g.offsets[i + 1] += g.offsets[i];
  return g;
}

}  // namespace

void validate_splits(const std::vector<SplitSpec>& splits, bool check_sum) {
  if (splits.empty()) throw UsageError("no splits given");
  double sum = 0.0;
  for (std::size_t i = 0; i < splits.size(); ++i) {
    const SplitSpec& s = splits[i];
    if (!valid_name(s.name)) {
      throw UsageError("split name '" + s.name +
                       "' is not allowed: use letters, digits, '_' and '-' (it names files)");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (splits[j].name == s.name) throw UsageError("split '" + s.name + "' is given twice");
    }
    if (!std::isfinite(s.fraction) || s.fraction <= 0.0) {
      throw UsageError("split '" + s.name + "': the fraction must be a number > 0, got " +
                       std::to_string(s.fraction));
    }
    sum += s.fraction;
  }
  if (check_sum && std::abs(sum - 1.0) > 1e-6) {
    throw UsageError("the split fractions must sum to 1, they sum to " + std::to_string(sum));
  }
}

std::vector<SplitSpec> parse_splits(std::string_view text, bool check_sum) {
  std::vector<SplitSpec> splits;
  for (std::size_t from = 0;;) {
    const std::size_t comma = text.find(',', from);
    const std::string item(
        text.substr(from, comma == std::string_view::npos ? comma : comma - from));
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) {
      throw UsageError("split '" + item + "': expected NAME=FRACTION, e.g. train=0.8");
    }
    SplitSpec s{item.substr(0, eq), 0.0};
    const std::string number = item.substr(eq + 1);
    char* end = nullptr;
    s.fraction = number.empty() ? 0.0 : std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size()) {
      throw UsageError("split '" + item + "': '" + number + "' is not a number");
    }
    splits.push_back(std::move(s));
    if (comma == std::string_view::npos) break;
    from = comma + 1;
  }
  validate_splits(splits, check_sum);
  return splits;
}

std::string fold_name(std::uint32_t i) { return "fold-" + std::to_string(i); }

std::vector<SplitSpec> fold_splits(const std::vector<SplitSpec>& held_out, std::uint32_t k) {
  if (k < 2) throw UsageError("--folds must be at least 2, got " + std::to_string(k));
  double sum = 0.0;
  if (!held_out.empty()) validate_splits(held_out, false);
  for (const SplitSpec& s : held_out) {
    sum += s.fraction;
    if (s.name.rfind("fold-", 0) == 0)
      throw UsageError("split '" + s.name + "': with --folds the names fold-I are the folds'; " +
                       "name held-out splits otherwise (e.g. --split test=0.2)");
  }
  if (sum >= 1.0 - 1e-6)
    throw UsageError(
        "with --folds, --split names held-out splits only, and they must leave "
        "records for the folds: their fractions sum to " +
        std::to_string(sum) + " (e.g. --split test=0.2)");
  std::vector<SplitSpec> out = held_out;
  for (std::uint32_t i = 0; i < k; ++i)
    out.push_back({fold_name(i), (1.0 - sum) / static_cast<double>(k)});
  return out;
}

namespace {

// One term of the cost: records per (split, category) against their targets f_s · total_k.
class Layer {
 public:
  Layer(const std::vector<SplitSpec>& splits, const std::vector<double>& totals)
      : K_(totals.size()), target_(splits.size() * K_), placed_(splits.size() * K_, 0.0) {
    for (std::size_t s = 0; s < splits.size(); ++s)
      for (std::size_t k = 0; k < K_; ++k) target_[s * K_ + k] = splits[s].fraction * totals[k];
  }
  // The change of the term if c records of category k went to split s: (d + c)² − d² =
  // 2dc + c², scaled by max(T, 1): by T, so a small split or a rare label weighs as much as
  // a large one, but never by less than one record, or the overshoot of a target below one
  // record (a 10% split of 8 slides) would outweigh everything else and small splits would
  // stay empty.
  double delta(std::size_t s, std::size_t k, double c) const {
    const std::size_t i = s * K_ + k;
    return (2.0 * (placed_[i] - target_[i]) * c + c * c) / std::max(target_[i], 1.0);
  }
  void add(std::size_t s, std::size_t k, double c) { placed_[s * K_ + k] += c; }

 private:
  std::size_t K_;
  std::vector<double> target_, placed_;
};

// Dense label ids (in place) and the records per dense label.
std::vector<double> densify_labels(Groups& g, std::vector<std::uint32_t>& distinct) {
  distinct = g.labels;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<double> total(distinct.size(), 0.0);
  for (std::size_t k = 0; k < g.labels.size(); ++k) {
    g.labels[k] = static_cast<std::uint32_t>(
        std::lower_bound(distinct.begin(), distinct.end(), g.labels[k]) - distinct.begin());
    total[g.labels[k]] += static_cast<double>(g.counts[k]);
  }
  return total;
}

// Placement order: size class descending, then a seeded hash, then the name (only for hash
// collisions) — a total order, so the result never depends on item order.
std::vector<std::uint32_t> placement_order(const Groups& g, std::uint64_t seed) {
  std::vector<std::uint32_t> order(g.names.size());
  std::vector<std::uint64_t> hash(g.names.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) {
    order[i] = i;
    hash[i] = detail::seeded_hash(g.names[i], seed);
  }
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const int ca = size_class(g.size[a]);
    const int cb = size_class(g.size[b]);
    if (ca != cb) return ca > cb;
    if (hash[a] != hash[b]) return hash[a] < hash[b];
    return g.names[a] < g.names[b];
  });
  return order;
}

// The class term's change if `group` went to split s: its records summed per class first.
double class_delta(const Groups& g, std::uint32_t group, const std::vector<std::uint32_t>& class_of,
                   const Layer& classes, std::size_t s) {
  std::vector<std::pair<std::uint32_t, double>> per_class;  // a group holds few labels
  for (std::size_t k = g.offsets[group]; k < g.offsets[group + 1]; ++k) {
    const std::uint32_t c = class_of[g.labels[k]];
    auto it = std::find_if(per_class.begin(), per_class.end(),
                           [c](const auto& p) { return p.first == c; });
    if (it == per_class.end()) it = per_class.insert(per_class.end(), {c, 0.0});
    it->second += static_cast<double>(g.counts[k]);
  }
  double delta = 0;
  for (const auto& [c, n] : per_class) delta += classes.delta(s, c, n);
  return delta;
}

}  // namespace

SplitAssignment assign_splits(const std::vector<SplitItem>& items,
                              const std::vector<SplitSpec>& splits, std::uint64_t seed,
                              const std::vector<std::uint32_t>& label_class) {
  validate_splits(splits);
  const std::size_t S = splits.size();
  Groups g = collect_groups(items);
  // Label ids as given may be sparse (a subset of a LabelMap); g.labels holds dense ones.
  std::vector<std::uint32_t> distinct;
  const std::vector<double> label_total = densify_labels(g, distinct);
  // The coarse classes of the dense labels, when given.
  std::vector<std::uint32_t> class_of(distinct.size(), 0);
  std::vector<double> class_total;
  for (std::size_t l = 0; l < distinct.size() && !label_class.empty(); ++l) {
    class_of[l] = label_class.at(distinct[l]);
    if (class_total.size() <= class_of[l]) class_total.resize(class_of[l] + 1, 0.0);
    class_total[class_of[l]] += label_total[l];
  }
  Layer sizes(splits, {static_cast<double>(items.size())}), labels(splits, label_total),
      classes(splits, class_total);

  SplitAssignment out;
  out.group_split.assign(g.names.size(), 0);
  out.split_records.assign(S, 0);
  for (const std::uint32_t group : placement_order(g, seed)) {
    const double m = static_cast<double>(g.size[group]);
    std::size_t best = 0;
    double best_delta = std::numeric_limits<double>::infinity();
    for (std::size_t s = 0; s < S; ++s) {
      double delta = sizes.delta(s, 0, m);
      for (std::size_t k = g.offsets[group]; k < g.offsets[group + 1]; ++k)
        delta += labels.delta(s, g.labels[k], static_cast<double>(g.counts[k]));
      if (!class_total.empty()) delta += class_delta(g, group, class_of, classes, s);
      if (delta < best_delta) {
        best_delta = delta;
        best = s;
      }
    }
    out.group_split[group] = static_cast<std::uint32_t>(best);
    out.split_records[best] += g.size[group];
    sizes.add(best, 0, m);
    for (std::size_t k = g.offsets[group]; k < g.offsets[group + 1]; ++k) {
      labels.add(best, g.labels[k], static_cast<double>(g.counts[k]));
      if (!class_total.empty())
        classes.add(best, class_of[g.labels[k]], static_cast<double>(g.counts[k]));
    }
  }

  out.record_split.reserve(items.size());
  for (const std::uint32_t group : g.of_item) out.record_split.push_back(out.group_split[group]);
  out.groups = std::move(g.names);
  return out;
}

}  // namespace mltool::records
