// records::inspect: statistics against closed forms and table values, the round-robin schedule
// against a hand-worked case and a brute-force simulation, and inspect() end to end on small
// TFRecord files (labels, decile drift, corrupt frames, stale indexes, thresholds, outputs).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <set>

#include "mltool/io/example.hpp"
#include "mltool/io/image_codec.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/records/inspect.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"

namespace mltool::records {
namespace {

using mltool::testing::contains;
using mltool::testing::error_of;
using mltool::testing::TempDir;
using mltool::testing::thrown_message;

// ---------------------------------------------------------------- statistics

TEST(InspectStats, RatioAndCoefficientOfVariation) {
  EXPECT_DOUBLE_EQ(max_min_ratio({10, 10, 2}), 5.0);
  EXPECT_TRUE(std::isinf(max_min_ratio({3, 0})));
  EXPECT_TRUE(std::isnan(max_min_ratio({0, 0})));
  EXPECT_TRUE(std::isnan(max_min_ratio({})));
  // mean 22/3, population variance ((8/3)^2 * 2 + (16/3)^2) / 3 = 128/9
  EXPECT_NEAR(coefficient_of_variation({10, 10, 2}), std::sqrt(128.0 / 9.0) / (22.0 / 3.0), 1e-12);
  EXPECT_DOUBLE_EQ(coefficient_of_variation({7, 7, 7}), 0.0);
  EXPECT_TRUE(std::isnan(coefficient_of_variation({0, 0})));
}

// Q(n, x) = e^-x sum_{k<n} x^k / k! for whole n; Q(1/2, x) = erfc(sqrt x).
long double q_whole(int n, long double x) {
  long double term = 1, sum = 0;
  for (int k = 0; k < n; ++k) {
    sum += term;
    term *= x / (k + 1);
  }
  return std::exp(-x) * sum;
}

TEST(InspectStats, IncompleteGammaMatchesClosedForms) {
  for (int n : {1, 2, 3, 5, 10, 30, 60}) {
    for (double x : {0.01, 0.5, 1.0, 2.5, 7.0, 15.0, 40.0, 90.0}) {
      const double want = static_cast<double>(q_whole(n, x));
      EXPECT_NEAR(gamma_q(n, x), want, 1e-12 + 1e-10 * want) << "Q(" << n << ", " << x << ")";
    }
  }
  for (double x : {0.001, 0.3, 1.0, 4.0, 20.0})
    EXPECT_NEAR(gamma_q(0.5, x), std::erfc(std::sqrt(x)), 1e-13);
  EXPECT_EQ(gamma_q(3, 0), 1.0);
  // the far tail keeps its relative precision: Q(1, 500) = e^-500
  EXPECT_NEAR(gamma_q(1, 500) / std::exp(-500.0), 1.0, 1e-10);
  EXPECT_THROW(gamma_q(0, 1), UsageError);
}

// The mean of n draws without replacement: z = (x̄ − μ) / sqrt(σ²/n · (N − n)/(N − 1)), p two-sided.
TEST(InspectStats, MeanShiftPIsTheTwoSidedNormalTailWithFinitePopulationCorrection) {
  using mltool::records::mean_shift_p;
  // N huge: the plain z-test. σ² = 4, n = 100: se 0.2; x̄ − μ = 0.392 → z = 1.96, p = 0.05.
  EXPECT_NEAR(mean_shift_p(1'000'000'000, 10, 4, 100, 10.392), 0.0499958, 1e-6);
  EXPECT_NEAR(mean_shift_p(1'000'000'000, 10, 4, 100, 9.608), 0.0499958, 1e-6);
  // N = 201, n = 100: the variance shrinks by (N − n)/(N − 1) = 0.505 → z = 1.96/sqrt(0.505).
  EXPECT_NEAR(mean_shift_p(201, 10, 4, 100, 10.392),
              std::erfc(1.96 / std::sqrt(0.505) / std::sqrt(2.0)), 1e-12);
  EXPECT_EQ(mean_shift_p(50, 3, 0, 10, 3), 1.0);    // all values equal
  EXPECT_EQ(mean_shift_p(50, 3, 2, 50, 3.5), 1.0);  // the whole population drawn
  EXPECT_EQ(mean_shift_p(50, 3, 2, 10, 3), 1.0);
  EXPECT_THROW(mean_shift_p(5, 0, 1, 0, 0), mltool::UsageError);
}

TEST(InspectStats, ChiSquarePValuesMatchTables) {
  // critical values of the chi-square distribution at p = 0.05 and 0.01 (standard tables)
  EXPECT_NEAR(chi_square_p(3.841458820694124, 1), 0.05, 1e-12);
  EXPECT_NEAR(chi_square_p(5.991464547107979, 2), 0.05, 1e-12);
  EXPECT_NEAR(chi_square_p(18.307038053275146, 10), 0.05, 1e-12);
  EXPECT_NEAR(chi_square_p(124.34211340400407, 100), 0.05, 1e-11);
  EXPECT_NEAR(chi_square_p(6.6348966010212145, 1), 0.01, 1e-12);
  EXPECT_NEAR(chi_square_p(1.0, 4), std::exp(-0.5) * 1.5, 1e-14);  // dof 4: e^-x/2 (1 + x/2)
  EXPECT_EQ(chi_square_p(5, 0), 1.0);
}

TEST(InspectStats, ChiSquareIndependence) {
  // rows 30, 70; columns 40, 60; expected 12 18 28 42: statistic 4/12 + 4/18 + 4/28 + 4/42
  const ChiSquare c = chi_square_independence({{10, 20}, {30, 40}});
  const double want = 4.0 / 12 + 4.0 / 18 + 4.0 / 28 + 4.0 / 42;
  EXPECT_NEAR(c.statistic, want, 1e-12);
  EXPECT_EQ(c.dof, 1u);
  EXPECT_NEAR(c.p_value, std::erfc(std::sqrt(want / 2)), 1e-12);
  // empty rows and columns do not count; proportional rows are independent
  const ChiSquare d = chi_square_independence({{5, 0, 10}, {0, 0, 0}, {10, 0, 20}});
  EXPECT_NEAR(d.statistic, 0.0, 1e-12);
  EXPECT_EQ(d.dof, 1u);
  EXPECT_NEAR(d.p_value, 1.0, 1e-12);
  EXPECT_EQ(chi_square_independence({{4, 5}}).dof, 0u);  // one shard: nothing to test
}

// Binomial coefficients up to 60, exact in long double (C(60, 30) < 2^64).
long double choose(int n, int k) {
  static const auto table = [] {
    std::vector<std::vector<long double>> t(61, std::vector<long double>(61, 0));
    for (int i = 0; i <= 60; ++i) {
      t[i][0] = 1;
      for (int j = 1; j <= i; ++j) t[i][j] = t[i - 1][j - 1] + t[i - 1][j];
    }
    return t;
  }();
  return k < 0 || k > n ? 0 : table[n][k];
}

TEST(InspectStats, HypergeometricPMatchesExactSums) {
  for (int n = 1; n <= 40; n += 3) {
    for (int k = 0; k <= n; ++k) {
      for (int m = 0; m <= n; m += 2) {
        const int lo = std::max(0, m - (n - k)), hi = std::min(m, k);
        for (int x = lo; x <= hi; ++x) {
          long double lower = 0, upper = 0;
          for (int j = lo; j <= hi; ++j) {
            const long double t = choose(k, j) * choose(n - k, m - j);
            if (j <= x) lower += t;
            if (j >= x) upper += t;
          }
          const double want = lo == hi ? 1.0
                                       : static_cast<double>(std::min<long double>(
                                             1, 2 * std::min(lower, upper) / choose(n, m)));
          ASSERT_NEAR(hypergeometric_p(n, k, m, x), want, 1e-12 + 1e-9 * want)
              << "N " << n << " K " << k << " m " << m << " x " << x;
        }
      }
    }
  }
  EXPECT_NEAR(hypergeometric_p(3, 1, 1, 1), 2.0 / 3, 1e-15);
  // all 100 draws from the 100 successes of 200: 2 / C(200, 100), relative precision kept
  EXPECT_NEAR(hypergeometric_p(200, 100, 100, 100) * 9.054851465610328e58 / 2, 1.0, 1e-9);
  EXPECT_THROW(hypergeometric_p(10, 3, 5, 4), UsageError);
}

TEST(InspectStats, HypergeometricPIsCheapForHugePopulations) {
  // 10^9 records, a decile of 10^8: the standard deviation is 4,743 records; the sums stop
  // after some tens of them.
  const std::uint64_t n = 1000000000, k = n / 2, m = n / 10;
  EXPECT_NEAR(hypergeometric_p(n, k, m, m / 2), 1.0, 1e-9);
  const double far = hypergeometric_p(n, k, m, m / 2 + 10 * 4743);  // 10 sd: about 1.5e-23
  EXPECT_GT(far, 1e-24);
  EXPECT_LT(far, 1e-22);
  EXPECT_NEAR(hypergeometric_p(n, n - k, m, m / 2 - 10 * 4743) / far, 1.0, 1e-9);  // symmetry
}

TEST(InspectStats, DecileDriftPIsBonferroniOverCells) {
  // 10 records of each label, all of label 0 in decile 0 and of label 1 in decile 1: each of
  // the 4 cells (2 deciles with records x 2 labels with records) has p = 2 / C(20, 10).
  std::array<std::vector<std::uint64_t>, kDeciles> deciles;
  for (auto& d : deciles) d = {0, 0, 0};
  deciles[0] = {10, 0, 0};
  deciles[1] = {0, 10, 0};
  EXPECT_NEAR(decile_drift_p({10, 10, 0}, deciles), 4 * 2 / 184756.0, 1e-18);
  deciles[1] = {0, 0, 0};  // decile 1 without records is no cell: 2 cells left
  EXPECT_NEAR(decile_drift_p({10, 10, 0}, deciles), 2 * 2 / 184756.0, 1e-18);
  for (auto& d : deciles) d = {0, 0, 0};
  EXPECT_TRUE(std::isnan(decile_drift_p({10, 10, 0}, deciles)));  // no decile with records
}

// ---------------------------------------------------------------- round robin

TEST(RoundRobin, HandWorkedTenTenTwo) {
  // Order: A0 B0 C0 A1 B1 C1 A2 B2 ... A9 B9 (22 records). Deciles start at floor(22 d / 10):
  // 0 2 4 6 8 11 13 15 17 19, so decile 0 = A0 B0, decile 1 = C0 A1, decile 2 = B1 C1.
  const RoundRobin rr({10, 10, 2});
  EXPECT_EQ(rr.total(), 22u);
  EXPECT_EQ(rr.position(2, 0), 2u);
  EXPECT_EQ(rr.position(2, 1), 5u);
  EXPECT_EQ(rr.position(0, 9), 20u);
  EXPECT_EQ(rr.decile(2, 0), 1);
  EXPECT_EQ(rr.decile(2, 1), 2);
  EXPECT_EQ(rr.decile(1, 1), 2);
  EXPECT_EQ(rr.records_in(2, 0), 0u);
  EXPECT_EQ(rr.records_in(0, 0), 1u);
  // factor = (records in the decile / 2) / (count / 22)
  EXPECT_NEAR(rr.factor(0, 0), 0.5 / (10.0 / 22), 1e-12);  // 1.1
  EXPECT_NEAR(rr.factor(2, 0), 0.0, 1e-12);
  EXPECT_NEAR(rr.factor(2, 1), 0.5 / (2.0 / 22), 1e-12);  // 5.5
  EXPECT_NEAR(rr.factor(1, 1), 0.0, 1e-12);
  EXPECT_NEAR(rr.exhausted_at(2), 6.0 / 22, 1e-12);
  EXPECT_NEAR(rr.exhausted_at(0), 21.0 / 22, 1e-12);
  EXPECT_NEAR(rr.exhausted_at(1), 1.0, 1e-12);
}

TEST(RoundRobin, AgreesWithAnExplicitSimulation) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::uint64_t> counts(1 + rng() % 7);
    for (auto& c : counts) c = rng() % 4 == 0 ? 0 : rng() % (trial < 150 ? 6 : 60);
    const RoundRobin rr(counts);
    std::vector<std::pair<std::size_t, std::uint64_t>> order;  // (shard, record) in read order
    for (std::uint64_t round = 0;; ++round) {
      bool any = false;
      for (std::size_t i = 0; i < counts.size(); ++i)
        if (round < counts[i]) order.emplace_back(i, round), any = true;
      if (!any) break;
    }
    ASSERT_EQ(order.size(), rr.total());
    const std::uint64_t n = order.size();
    std::vector<std::array<std::uint64_t, kDeciles>> in(counts.size());
    std::vector<std::uint64_t> last(counts.size(), 0);
    for (std::uint64_t p = 0; p < n; ++p) {
      const auto [shard, record] = order[p];
      ASSERT_EQ(rr.position(shard, record), p);
      int d = 0;
      while (d + 1 < kDeciles && (d + 1) * n / kDeciles <= p) ++d;
      ASSERT_EQ(rr.decile_of_position(p), d);
      ASSERT_EQ(rr.decile(shard, record), d)
          << "trial " << trial << " shard " << shard << " record " << record;
      ++in[shard][d];
      last[shard] = p;
    }
    for (std::size_t i = 0; i < counts.size(); ++i) {
      for (int d = 0; d < kDeciles; ++d) ASSERT_EQ(rr.records_in(i, d), in[i][d]);
      if (counts[i]) {
        ASSERT_NEAR(rr.exhausted_at(i), double(last[i] + 1) / double(n), 1e-12);
      } else {
        ASSERT_TRUE(std::isnan(rr.exhausted_at(i)));
      }
    }
  }
}

// ---------------------------------------------------------------- inspect()

// A TFRecord file of records with an int64 "label" per entry of `labels` (-1: no label).
void write_shard(const std::string& path, const std::vector<int>& labels,
                 bool bytes_labels = false) {
  io::TFRecordWriter writer(path);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    io::ExampleBuilder b;
    b.add_int64("index", static_cast<std::int64_t>(i)).add_bytes("slide", "s");
    if (labels[i] >= 0 && bytes_labels) b.add_bytes("label", labels[i] ? "tumor" : "normal");
    if (labels[i] >= 0 && !bytes_labels) b.add_int64("label", labels[i]);
    writer.write(b.serialize());
  }
  writer.commit();
}

class InspectFiles : public ::testing::Test {
 protected:
  TempDir tmp;
  std::vector<std::string> files = {tmp / "a.tfrecord", tmp / "b.tfrecord", tmp / "c.tfrecord"};
  void SetUp() override {
    write_shard(files[0], std::vector<int>(10, 0));
    write_shard(files[1], std::vector<int>(10, 0));
    write_shard(files[2], {1, 1});
  }
  InspectReport run(bool deep = false) {
    InspectOptions o;
    o.inputs = files;
    o.deep = deep;
    return inspect(o);
  }
};

TEST_F(InspectFiles, CountsLabelsAndTheLabelMixOfEachDecile) {
  const InspectReport r = run();
  ASSERT_EQ(r.groups.size(), 1u);
  const GroupReport& g = r.groups[0];
  EXPECT_EQ(r.labels, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(g.records, 22u);
  EXPECT_EQ(g.shards[2].label_histogram, (std::vector<std::uint64_t>{0, 2}));
  EXPECT_EQ(g.shards[0].bytes, util::file_size(files[0]));
  EXPECT_DOUBLE_EQ(g.max_min_ratio, 5.0);
  EXPECT_NEAR(g.max_oversample, 5.5, 1e-12);  // C: half of deciles 1 and 2, 1/11 of the records
  EXPECT_EQ(g.oversampled_shard, 2);
  EXPECT_EQ(g.shards[2].oversample_decile, 1);
  EXPECT_NEAR(g.shards[0].oversample, (2.0 / 3) / (10.0 / 22), 1e-12);  // decile 4: A4 B4 A5
  ASSERT_TRUE(g.chi_square);
  EXPECT_EQ(g.chi_square->dof, 2u);
  EXPECT_NEAR(g.chi_square->statistic, 22.0, 1e-9);  // a perfectly dependent table: N (k - 1)
  // label 1 is 2/22 overall; decile 1 (C0 A1) and decile 2 (B1 C1) are half label 1
  EXPECT_EQ(g.decile_labels[1], (std::vector<std::uint64_t>{1, 1}));
  EXPECT_NEAR(g.decile_deviation[0], 2.0 / 22, 1e-12);
  EXPECT_NEAR(g.decile_drift, 0.5 - 2.0 / 22, 1e-12);
  EXPECT_EQ(g.worst_decile, 1);
  // but 1 of 2 records of label 1 (2 of 22) is p 2 (1 - C(20, 2) / C(22, 2)) = 0.355 for a
  // random order, times 20 cells: sampling noise explains it
  EXPECT_EQ(g.decile_p, 1.0);
  EXPECT_NEAR(g.shards[2].exhausted_at, 6.0 / 22, 1e-12);
}

TEST_F(InspectFiles, BytesLabelsUnlabeledRecordsAndMissingLabels) {
  write_shard(files[0], {1, 0, -1, 1}, true);
  write_shard(files[1], {-1}, true);
  InspectOptions o;
  o.inputs = {files[0], files[1]};
  InspectReport r = inspect(o);
  EXPECT_EQ(r.labels, (std::vector<std::string>{"normal", "tumor"}));
  EXPECT_EQ(r.groups[0].shards[0].label_histogram, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(r.groups[0].unlabeled, 2u);
  o.label_feature = "absent";
  r = inspect(o);
  EXPECT_TRUE(r.labels.empty());
  EXPECT_FALSE(r.groups[0].chi_square);
  EXPECT_EQ(r.groups[0].unlabeled, 5u);
  o.label_feature = "index";  // int64 values, sorted numerically
  r = inspect(o);
  EXPECT_EQ(r.labels, (std::vector<std::string>{"0", "1", "2", "3"}));
}

TEST_F(InspectFiles, ACorruptFrameIsNamedByFileAndByteOffset) {
  // Frame k of b.tfrecord starts at k * frame size; damage a data byte of record 6.
  const std::uint64_t frame = util::file_size(files[1]) / 10;
  std::string bytes = util::read_file(files[1]);
  bytes[6 * frame + 20] ^= 0x10;
  std::ofstream(files[1], std::ios::binary | std::ios::trunc) << bytes;
  const std::string message = error_of<FormatError>([&] { run(true); });
  EXPECT_TRUE(
      contains(message, files[1] + ": byte " + std::to_string(6 * frame) + ": data CRC mismatch"))
      << message;
  // Without --deep data CRCs are not checked, but the record must still parse.
  const auto plain = thrown_message<FormatError>([&] { run(false); });
  if (plain) {
    EXPECT_TRUE(contains(*plain, "record 6 (byte " + std::to_string(6 * frame) + ")")) << *plain;
  }
  // A damaged length is found by both, at its frame.
  bytes = util::read_file(files[1]);
  bytes[3 * frame + 2] ^= 0x01;
  std::ofstream(files[1], std::ios::binary | std::ios::trunc) << bytes;
  const std::string framing = error_of<FormatError>([&] { run(false); });
  EXPECT_TRUE(contains(framing, files[1] + ": byte " + std::to_string(3 * frame) + ":")) << framing;
}

TEST_F(InspectFiles, DeepComparesTheDaliIndexWithTheFrames) {
  EXPECT_NO_THROW(run(true));
  const std::string index = io::index_path_for(files[2]);
  std::string text = util::read_file(index);
  text.replace(text.find(' '), 1, " 1");  // the first frame's size, one digit longer
  util::write_file_atomic(index, text);
  EXPECT_NO_THROW(run(false));  // indexes are only read under deep
  const std::string message = error_of<FormatError>([&] { run(true); });
  EXPECT_TRUE(contains(message, index + ":1: says record 0 is at byte 0")) << message;
  util::write_file_atomic(index, util::read_file(index).substr(0, text.find('\n') + 1));
  EXPECT_TRUE(contains(error_of<FormatError>([&] { run(true); }), "stale index"));
}

TEST_F(InspectFiles, BadInputs) {
  files.push_back(tmp / "missing.tfrecord");
  EXPECT_TRUE(contains(error_of<InputError>([&] { run(); }), "missing.tfrecord: cannot open"));
  files.back() = tmp / "text.tfrecord";
  util::write_file_atomic(files.back(), "this is not a TFRecord file at all");
  EXPECT_TRUE(contains(error_of<FormatError>([&] { run(); }), "text.tfrecord: byte 0:"));
  files.back() = tmp / "empty.tfrecord";
  util::write_file_atomic(files.back(), "");
  EXPECT_EQ(run().groups[0].shards.back().records, 0u);
  EXPECT_TRUE(std::isinf(run().groups[0].max_min_ratio));
  InspectOptions o;
  EXPECT_THROW(inspect(o), UsageError);
  o.inputs = {tmp.path()};
  EXPECT_TRUE(contains(error_of<InputError>([&] { inspect(o); }), "no dataset.json"));
  o.inputs = {tmp.path(), files[0]};
  EXPECT_THROW(inspect(o), UsageError);
}

TEST_F(InspectFiles, SizeChecksPassShardsWithinOneRecordOfEachOther) {
  // 3 records in 4 shards: 1, 1, 1, 0 is the best any writer can do; max/min is infinite
  write_shard(files[0], {0});
  write_shard(files[1], {1});
  write_shard(files[2], {0});
  files.push_back(tmp / "d.tfrecord");
  write_shard(files[3], {});
  InspectReport r = run();
  EXPECT_TRUE(std::isinf(r.groups[0].max_min_ratio));
  EXPECT_TRUE(check_thresholds(r, parse_thresholds("")).empty());
  write_shard(files[0], {0, 1});  // 2, 1, 1, 0: a writer could have done better
  r = run();
  std::set<std::string> names;
  for (const auto& v : check_thresholds(r, parse_thresholds(""))) names.insert(v.check);
  EXPECT_EQ(names, (std::set<std::string>{"max-ratio", "cv", "oversample"}));
}

// ---------------------------------------------------------------- thresholds and outputs

TEST(InspectThresholds, ParseDefaultsOverridesAndOff) {
  const Thresholds d = parse_thresholds("");
  EXPECT_EQ(d.max_ratio, 1.1);
  EXPECT_EQ(d.chi2_p, 0.01);
  const Thresholds t = parse_thresholds("max-ratio=1.5,chi2-p=off,decile-drift=0.2");
  EXPECT_EQ(t.max_ratio, 1.5);
  EXPECT_FALSE(t.chi2_p);
  EXPECT_EQ(t.decile_drift, 0.2);
  EXPECT_EQ(t.cv, 0.05);
  EXPECT_TRUE(contains(error_of<UsageError>([] { parse_thresholds("ratio=2"); }),
                       "unknown threshold 'ratio'"));
  EXPECT_THROW(parse_thresholds("cv=x"), UsageError);
  EXPECT_THROW(parse_thresholds("chi2-p=2"), UsageError);
  EXPECT_THROW(parse_thresholds("decile-p=1.5"), UsageError);
  EXPECT_EQ(d.decile_p, 1e-6);
  EXPECT_FALSE(parse_thresholds("decile-p=off").decile_p);
  EXPECT_EQ(format_thresholds(d),
            "max-ratio=1.1,cv=0.05,oversample=1.1,decile-drift=0.05,decile-p=1e-06,chi2-p=0.01,"
            "outcome-p=0.01");
  EXPECT_EQ(format_thresholds(parse_thresholds("cv=off,decile-p=1e-4,outcome-p=off")),
            "max-ratio=1.1,cv=off,oversample=1.1,decile-drift=0.05,decile-p=0.0001,chi2-p=0.01,"
            "outcome-p=off");
  EXPECT_THROW(parse_thresholds("outcome-p=2"), UsageError);
  EXPECT_THROW(parse_thresholds("dataset/"), UsageError);
}

TEST_F(InspectFiles, ChecksJsonTextAndPlot) {
  const InspectReport r = run();
  const auto names_of = [](const std::vector<Violation>& violations) {
    std::set<std::string> names;
    for (const auto& v : violations) names.insert(v.check);
    return names;
  };
  // The drift of 0.41 is large, but 22 records drift as far by chance (decile_p 1): it fails
  // only as a bare effect size, with decile-p off.
  const auto violations = check_thresholds(r, parse_thresholds(""));
  EXPECT_EQ(names_of(violations),
            (std::set<std::string>{"max-ratio", "cv", "oversample", "chi2-p"}));
  EXPECT_EQ(names_of(check_thresholds(r, parse_thresholds("decile-p=off"))),
            (std::set<std::string>{"max-ratio", "cv", "oversample", "decile-drift", "chi2-p"}));
  EXPECT_TRUE(
      check_thresholds(
          r, parse_thresholds("max-ratio=5,cv=off,oversample=off,decile-drift=off,chi2-p=0"))
          .empty());
  const Thresholds limits;
  const auto doc = to_json(r, &limits, &violations);
  EXPECT_EQ(doc["groups"][0]["shards"][2]["decile_factors"][0], 0.0);
  EXPECT_EQ(doc["groups"][0]["worst_decile"], 1);
  EXPECT_EQ(doc["groups"][0]["decile_p"], 1.0);
  EXPECT_EQ(doc["checks"]["thresholds"]["decile-p"], 1e-6);
  EXPECT_EQ(doc["checks"]["violations"].size(), violations.size());
  EXPECT_TRUE(to_json(run()).dump().find("NaN") == std::string::npos);
  EXPECT_TRUE(contains(format_text(r), "c.tfrecord"));
#ifdef MLTOOL_HAVE_SLIDE  // the PNG is libvips' rendering of the SVG
  write_plot(tmp / "plot.png", r);
  const std::string png = util::read_file(tmp / "plot.png");
  io::RgbImage image;
  io::decode_image(png.data(), png.size(), image, "plot.png");
  EXPECT_EQ(image.width, 1000);
  EXPECT_GT(image.height, 200);
  EXPECT_NE(util::read_file(tmp / "plot.svg").find("<svg "), std::string::npos);
#endif
}

}  // namespace
}  // namespace mltool::records
