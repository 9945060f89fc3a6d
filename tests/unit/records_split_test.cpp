#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "mltool/records/split.hpp"
#include "mltool/util/error.hpp"
#include "support/errors.hpp"

namespace {

using mltool::UsageError;
using mltool::records::assign_splits;
using mltool::records::parse_splits;
using mltool::records::SplitAssignment;
using mltool::records::SplitItem;
using mltool::records::SplitSpec;
using mltool::records::validate_splits;
using mltool::testing::error_or_empty;

// A random table: group names own their strings, items view them.
struct Table {
  std::vector<std::string> names;       // one per group
  std::vector<std::size_t> group_of;    // per record
  std::vector<std::uint32_t> label_of;  // per record
  std::vector<SplitSpec> splits;

  std::vector<SplitItem> items() const {
    std::vector<SplitItem> v;
    for (std::size_t i = 0; i < group_of.size(); ++i)
      v.push_back({names[group_of[i]], label_of[i]});
    return v;
  }
};

std::vector<SplitSpec> random_fractions(std::mt19937_64& rng) {
  const int count = std::uniform_int_distribution<int>(1, 4)(rng);
  std::vector<double> w(count);
  double sum = 0;
  for (double& x : w) sum += (x = std::uniform_real_distribution<double>(0.05, 1.0)(rng));
  std::vector<SplitSpec> splits;
  for (int s = 0; s < count; ++s) splits.push_back({"s" + std::to_string(s), w[s] / sum});
  return splits;
}

// Groups of random sizes (mostly small, sometimes one bigger than a split's target), each
// with a dominant label, as patients with one diagnosis and a few odd tiles.
Table random_table(std::mt19937_64& rng) {
  Table t;
  t.splits = random_fractions(rng);
  const int groups = std::uniform_int_distribution<int>(1, 120)(rng);
  const std::uint32_t labels = std::uniform_int_distribution<std::uint32_t>(1, 5)(rng);
  const bool giant = std::bernoulli_distribution(0.3)(rng);
  for (int g = 0; g < groups; ++g) {
    t.names.push_back("patient-" + std::to_string(rng() % 100000) + "-" + std::to_string(g));
    int size = std::uniform_int_distribution<int>(1, 12)(rng);
    if (giant && g == 0) size = 300;  // more than any split's share of the rest
    const std::uint32_t main = std::uniform_int_distribution<std::uint32_t>(0, labels - 1)(rng);
    for (int r = 0; r < size; ++r) {
      t.group_of.push_back(static_cast<std::size_t>(g));
      t.label_of.push_back(std::bernoulli_distribution(0.8)(rng) ? main : rng() % labels);
    }
  }
  // Records of a group need not be contiguous.
  std::vector<std::size_t> perm(t.group_of.size());
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  Table shuffled = t;
  for (std::size_t i = 0; i < perm.size(); ++i) {
    shuffled.group_of[i] = t.group_of[perm[i]];
    shuffled.label_of[i] = t.label_of[perm[i]];
  }
  return shuffled;
}

// Every structural guarantee of assign_splits.
void check_assignment(const Table& t, const SplitAssignment& a) {
  const std::size_t S = t.splits.size();
  ASSERT_EQ(a.record_split.size(), t.group_of.size());
  ASSERT_EQ(a.split_records.size(), S);
  std::vector<std::string> sorted = t.names;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_EQ(a.groups, sorted);
  ASSERT_EQ(a.group_split.size(), a.groups.size());
  std::map<std::string, std::uint32_t> split_of_group;
  for (std::size_t g = 0; g < a.groups.size(); ++g) {
    ASSERT_LT(a.group_split[g], S);
    split_of_group[a.groups[g]] = a.group_split[g];
  }
  std::vector<std::uint64_t> counts(S, 0);
  for (std::size_t i = 0; i < t.group_of.size(); ++i) {
    ASSERT_LT(a.record_split[i], S);
    // No group in two splits: each record is where its group is.
    ASSERT_EQ(a.record_split[i], split_of_group.at(t.names[t.group_of[i]])) << "record " << i;
    ++counts[a.record_split[i]];
  }
  EXPECT_EQ(counts, a.split_records);
}

TEST(SplitProperty, NoGroupCrossesSplitsOverRandomTables) {
  std::mt19937_64 rng(20240607);
  int differ_across_seeds = 0;
  int with_ties = 0;
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const Table t = random_table(rng);
    const std::vector<SplitItem> items = t.items();
    const std::uint64_t seed = rng();
    const SplitAssignment a = assign_splits(items, t.splits, seed);
    check_assignment(t, a);
    if (HasFatalFailure()) return;

    // Deterministic, and independent of the order of the items.
    const SplitAssignment again = assign_splits(items, t.splits, seed);
    EXPECT_EQ(again.record_split, a.record_split);
    std::vector<SplitItem> reversed(items.rbegin(), items.rend());
    EXPECT_EQ(assign_splits(reversed, t.splits, seed).group_split, a.group_split);

    // Another seed usually gives another split when there are groups to permute.
    if (t.splits.size() > 1 && t.names.size() >= 20) {
      ++with_ties;
      if (assign_splits(items, t.splits, seed + 1).group_split != a.group_split)
        ++differ_across_seeds;
    }
  }
  EXPECT_GE(differ_across_seeds, with_ties * 8 / 10) << "of " << with_ties;
}

// Many small groups: sizes and label shares close to the fractions.
TEST(SplitQuality, ManySmallGroupsHitTheFractions) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    Table t;
    t.splits = trial % 2 ? std::vector<SplitSpec>{{"train", 0.8}, {"val", 0.1}, {"test", 0.1}}
                         : random_fractions(rng);
    const std::uint32_t K = 4;
    const double label_weight[K] = {0.55, 0.3, 0.1, 0.05};  // one rare label
    std::discrete_distribution<std::uint32_t> pick(label_weight, label_weight + K);
    for (int g = 0; g < 2000; ++g) {
      t.names.push_back("g" + std::to_string(g));
      const int size = std::uniform_int_distribution<int>(1, 5)(rng);
      const std::uint32_t main = pick(rng);
      for (int r = 0; r < size; ++r) {
        t.group_of.push_back(static_cast<std::size_t>(g));
        t.label_of.push_back(std::bernoulli_distribution(0.7)(rng) ? main : pick(rng));
      }
    }
    const SplitAssignment a = assign_splits(t.items(), t.splits, rng());
    check_assignment(t, a);

    const double N = static_cast<double>(t.group_of.size());
    std::vector<double> label_total(K, 0);
    for (std::uint32_t l : t.label_of) label_total[l] += 1;
    std::vector<std::vector<double>> per(t.splits.size(), std::vector<double>(K, 0));
    for (std::size_t i = 0; i < t.label_of.size(); ++i) per[a.record_split[i]][t.label_of[i]] += 1;
    for (std::size_t s = 0; s < t.splits.size(); ++s) {
      const double f = t.splits[s].fraction;
      // Within a few records of the target (a group has at most 5; measured: within 1).
      EXPECT_NEAR(static_cast<double>(a.split_records[s]), f * N, 3.0) << t.splits[s].name;
      for (std::uint32_t l = 0; l < K; ++l) {
        EXPECT_NEAR(per[s][l], f * label_total[l], 3.0) << t.splits[s].name << " label " << l;
      }
    }
  }
}

TEST(SplitQuality, AGroupBiggerThanASplitStaysWhole) {
  Table t;
  t.splits = {{"train", 0.8}, {"val", 0.1}, {"test", 0.1}};
  t.names = {"big"};
  for (int r = 0; r < 900; ++r) {
    t.group_of.push_back(0);
    t.label_of.push_back(r % 2);
  }
  for (int g = 1; g <= 100; ++g) {
    t.names.push_back("small" + std::to_string(g));
    t.group_of.push_back(static_cast<std::size_t>(g));
    t.label_of.push_back(g % 2);
  }
  const SplitAssignment a = assign_splits(t.items(), t.splits, 1);
  check_assignment(t, a);
  // The big group overfills train; val and test share the rest evenly.
  EXPECT_EQ(a.group_split[0], 0u);  // "big" sorts first
  EXPECT_EQ(a.split_records[0], 900u);
  EXPECT_EQ(a.split_records[1], 50u);
  EXPECT_EQ(a.split_records[2], 50u);
}

TEST(SplitQuality, OneSplitTakesEverything) {
  const std::vector<std::string> names = {"a", "b", "c"};
  const std::vector<SplitItem> items = {{names[0], 0}, {names[1], 1}, {names[2], 0}, {names[0], 2}};
  const SplitAssignment a = assign_splits(items, {{"all", 1.0}}, 3);
  EXPECT_EQ(a.record_split, (std::vector<std::uint32_t>{0, 0, 0, 0}));
  EXPECT_EQ(a.split_records, (std::vector<std::uint64_t>{4}));
  const SplitAssignment none = assign_splits({}, {{"train", 0.5}, {"val", 0.5}}, 3);
  EXPECT_TRUE(none.groups.empty());
  EXPECT_EQ(none.split_records, (std::vector<std::uint64_t>{0, 0}));
}

TEST(SplitQuality, SparseLabelIdsAreFine) {
  std::vector<std::string> names;
  for (int g = 0; g < 100; ++g) names.push_back(std::to_string(g));
  std::vector<SplitItem> items;
  for (int g = 0; g < 100; ++g) items.push_back({names[g], g % 2 ? 4000000000u : 7u});
  const SplitAssignment a = assign_splits(items, {{"a", 0.5}, {"b", 0.5}}, 9);
  EXPECT_EQ(a.split_records, (std::vector<std::uint64_t>{50, 50}));
}

std::string usage_error(const std::vector<SplitSpec>& splits) {
  return error_or_empty<UsageError>([&] { validate_splits(splits); });
}

TEST(SplitSpecs, Validation) {
  EXPECT_EQ(usage_error({{"train", 0.8}, {"val", 0.1}, {"test", 0.1}}), "");
  EXPECT_EQ(usage_error({{"a", 1.0 / 3}, {"b", 1.0 / 3}, {"c", 1.0 / 3}}), "");
  EXPECT_EQ(usage_error({}), "no splits given");
  EXPECT_EQ(usage_error({{"train", 0.8}, {"val", 0.1}}),
            "the split fractions must sum to 1, they sum to 0.900000");
  EXPECT_EQ(usage_error({{"train", 1.0}, {"val", 0.0}}),
            "split 'val': the fraction must be a number > 0, got 0.000000");
  EXPECT_EQ(usage_error({{"train", 1.5}, {"val", -0.5}}),
            "split 'val': the fraction must be a number > 0, got -0.500000");
  EXPECT_NE(usage_error({{"train", std::nan("")}}), "");
  EXPECT_EQ(usage_error({{"train", 0.5}, {"train", 0.5}}), "split 'train' is given twice");
  EXPECT_EQ(usage_error({{"", 1.0}}),
            "split name '' is not allowed: use letters, digits, '_' and '-' (it names files)");
  EXPECT_NE(usage_error({{"../x", 1.0}}), "");
  EXPECT_NE(usage_error({{"a b", 1.0}}), "");
}

TEST(SplitSpecs, Parse) {
  const std::vector<SplitSpec> s = parse_splits("train=0.8,val=0.1,test=0.1");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].name, "val");
  EXPECT_DOUBLE_EQ(s[1].fraction, 0.1);
  EXPECT_EQ(parse_splits("all=1").size(), 1u);
  EXPECT_THROW(parse_splits(""), UsageError);
  EXPECT_THROW(parse_splits("train=0.8,val"), UsageError);
  EXPECT_THROW(parse_splits("train=0.8,val=0.2,"), UsageError);
  EXPECT_THROW(parse_splits("train=0.8x,val=0.2"), UsageError);
  EXPECT_THROW(parse_splits("train=,val=1"), UsageError);
  EXPECT_THROW(parse_splits("train=0.5,val=0.6"), UsageError);
}

namespace folds {

using mltool::records::fold_name;
using mltool::records::fold_splits;

TEST(Folds, SplitsAreHeldOutThenEqualFolds) {
  const auto s = fold_splits({{"test", 0.2}}, 4);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0].name, "test");
  for (std::uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(s[i + 1].name, fold_name(i));
    EXPECT_DOUBLE_EQ(s[i + 1].fraction, 0.2);
  }
  EXPECT_EQ(fold_splits({}, 2).size(), 2u);
  EXPECT_DOUBLE_EQ(fold_splits({}, 3)[2].fraction, 1.0 / 3);
}

TEST(Folds, RefusesBadFoldsAndHeldOutSplits) {
  const auto err = [](std::vector<SplitSpec> held, std::uint32_t k) {
    return error_or_empty<UsageError>([&] { fold_splits(held, k); });
  };
  EXPECT_NE(err({}, 1).find("at least 2"), std::string::npos);
  EXPECT_NE(err({{"test", 1.0}}, 3).find("leave records for the folds"), std::string::npos);
  EXPECT_NE(err({{"test", 0.5}, {"val", 0.6}}, 3).find("sum to 1.1"), std::string::npos);
  EXPECT_NE(err({{"fold-1", 0.2}}, 3).find("fold-I are the folds'"), std::string::npos);
  EXPECT_EQ(err({{"test", 0.2}, {"val", 0.1}}, 5), "");
}

// Many small groups, each with one stratum (a patient's outcome), as pack gives them; strata of
// random frequencies, some rare.
struct Cohort {
  std::vector<std::string> names;
  std::vector<std::uint32_t> size, stratum;  // per group
  std::vector<SplitItem> items() const {
    std::vector<SplitItem> v;
    for (std::size_t g = 0; g < names.size(); ++g)
      for (std::uint32_t r = 0; r < size[g]; ++r) v.push_back({names[g], stratum[g]});
    return v;
  }
};

Cohort random_cohort(std::mt19937_64& rng, std::uint32_t max_size) {
  Cohort c;
  const int groups = std::uniform_int_distribution<int>(100, 600)(rng);
  const int strata = std::uniform_int_distribution<int>(1, 6)(rng);
  std::vector<double> weight(strata);
  for (double& w : weight) w = std::uniform_real_distribution<double>(0.1, 1.0)(rng);
  std::discrete_distribution<std::uint32_t> pick(weight.begin(), weight.end());
  for (int g = 0; g < groups; ++g) {
    c.names.push_back("p" + std::to_string(rng() % 1000000) + "-" + std::to_string(g));
    c.size.push_back(std::uniform_int_distribution<std::uint32_t>(1, max_size)(rng));
    c.stratum.push_back(pick(rng));
  }
  return c;
}

// The property: every group in exactly one fold (none in two), and each fold's count
// of each stratum within one group's worth of records of its exact share.
TEST(Folds, EveryGroupInOneFoldStrataWithinOneGroupOfTheirShare) {
  std::mt19937_64 rng(2027);
  for (int trial = 0; trial < 300; ++trial) {
    const std::uint32_t max_size = trial % 3 == 0 ? 1 : 3;  // patient bags: one record each
    const Cohort c = random_cohort(rng, max_size);
    const std::uint32_t k = std::uniform_int_distribution<std::uint32_t>(2, 10)(rng);
    const auto splits = fold_splits({}, k);
    const auto items = c.items();
    const SplitAssignment a = assign_splits(items, splits, rng());
    ASSERT_EQ(a.groups.size(), c.names.size());
    std::map<std::string, std::uint32_t> fold_of;  // every record of a group in one fold
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto [it, added] = fold_of.emplace(std::string(items[i].group), a.record_split[i]);
      ASSERT_EQ(it->second, a.record_split[i]) << "group " << items[i].group << " in two folds";
      ASSERT_LT(a.record_split[i], k);
    }
    ASSERT_EQ(fold_of.size(), c.names.size());
    std::map<std::uint32_t, double> total;
    std::map<std::pair<std::uint32_t, std::uint32_t>, double> in_fold;
    for (std::size_t i = 0; i < items.size(); ++i) {
      total[items[i].label] += 1;
      in_fold[{a.record_split[i], items[i].label}] += 1;
    }
    for (const auto& [stratum, n] : total)
      for (std::uint32_t f = 0; f < k; ++f)
        EXPECT_LE(std::abs(in_fold[{f, stratum}] - n / k), max_size)
            << "trial " << trial << ": fold " << f << " holds " << in_fold[{f, stratum}]
            << " records of stratum " << stratum << ", its share is " << n / k;
  }
}

// The coarse classes (survival: the event) are balanced too where the fine strata cannot be:
// six patients, one per stratum, three with an event, in three folds: one event each.
TEST(Folds, CoarseClassesSpreadEventsOfTinyCohorts) {
  const std::vector<std::string> names = {"P0", "P1", "P2", "P3", "P4", "P5"};
  std::vector<SplitItem> items;
  for (std::uint32_t g = 0; g < 6; ++g) items.push_back({names[g], g});  // strata 0..5
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const auto a = assign_splits(items, fold_splits({}, 3), seed, {0, 0, 0, 1, 1, 1});
    std::vector<int> events(3, 0), sizes(3, 0);
    for (std::uint32_t g = 0; g < 6; ++g) {
      ++sizes[a.record_split[g]];
      events[a.record_split[g]] += g >= 3;
    }
    EXPECT_EQ(events, (std::vector<int>{1, 1, 1})) << "seed " << seed;
    EXPECT_EQ(sizes, (std::vector<int>{2, 2, 2})) << "seed " << seed;
  }
}

}  // namespace folds

}  // namespace
