// Validation metrics (lib/train/metrics.cpp) and the bootstrap (lib/train/bootstrap.cpp)
// against values computed by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "mltool/train/bootstrap.hpp"
#include "mltool/train/metrics.hpp"
#include "mltool/util/error.hpp"

namespace mltool::train {
namespace {

TEST(Metrics, AccuracyAndBalancedAccuracy) {
  // Labels 0,0,0,0,1,1,2 ; predictions 0,0,0,1,1,0,2: 5 of 7 right; recalls 3/4, 1/2, 1/1.
  const std::vector<std::int64_t> y{0, 0, 0, 0, 1, 1, 2}, p{0, 0, 0, 1, 1, 0, 2};
  const auto m = classification_metrics(y, p, {}, 3);
  EXPECT_DOUBLE_EQ(m.accuracy, 5.0 / 7.0);
  EXPECT_DOUBLE_EQ(m.balanced_accuracy, (0.75 + 0.5 + 1.0) / 3.0);
  EXPECT_TRUE(std::isnan(m.auc));  // three classes
  // A label absent from the labels does not count in the balanced mean.
  const auto absent = classification_metrics({0, 0, 1}, {0, 2, 1}, {}, 3);
  EXPECT_DOUBLE_EQ(absent.balanced_accuracy, (0.5 + 1.0) / 2.0);
}

TEST(Metrics, AucByHand) {
  // Positives score 0.9, 0.4, 0.35; negatives 0.8, 0.4, 0.1. Pairs (pos > neg): 0.9 beats all
  // three (3); 0.4 beats 0.1 and ties 0.4 (1.5); 0.35 beats 0.1 (1). AUC = 5.5 / 9.
  const std::vector<std::int64_t> y{1, 1, 1, 0, 0, 0};
  const std::vector<double> s{0.9, 0.4, 0.35, 0.8, 0.4, 0.1};
  EXPECT_DOUBLE_EQ(binary_auc(y, s), 5.5 / 9.0);
  EXPECT_DOUBLE_EQ(binary_auc({0, 1}, {0.2, 0.7}), 1.0);
  EXPECT_DOUBLE_EQ(binary_auc({1, 0}, {0.2, 0.7}), 0.0);
  EXPECT_DOUBLE_EQ(binary_auc({1, 0, 1, 0}, {0.5, 0.5, 0.5, 0.5}), 0.5);
  EXPECT_TRUE(std::isnan(binary_auc({1, 1}, {0.2, 0.7})));
  EXPECT_TRUE(std::isnan(binary_auc({1, 0}, {NAN, 0.7})));
  const auto m = classification_metrics(y, {1, 0, 0, 1, 0, 0}, s, 2);
  EXPECT_DOUBLE_EQ(m.auc, 5.5 / 9.0);
  EXPECT_DOUBLE_EQ(m.accuracy, 3.0 / 6.0);
  EXPECT_DOUBLE_EQ(m.balanced_accuracy, (1.0 / 3.0 + 2.0 / 3.0) / 2.0);
}

TEST(Metrics, AveragePrecisionByHand) {
  // Scores from the top: 0.9 (pos: R 1/3, P 1), 0.8 (neg), 0.4 (a pos and a neg tied: R 2/3,
  // P 2/4), 0.35 (pos: R 1, P 3/5), 0.1 (neg). AP = 1/3 + 1/3 * 1/2 + 1/3 * 3/5 = 0.7, as
  // scikit-learn's average_precision_score.
  const std::vector<std::int64_t> y{1, 1, 1, 0, 0, 0};
  const std::vector<double> s{0.9, 0.4, 0.35, 0.8, 0.4, 0.1};
  EXPECT_DOUBLE_EQ(average_precision(y, s), 0.7);
  EXPECT_TRUE(std::isnan(average_precision({0, 0}, {0.1, 0.2})));  // no positives
  EXPECT_DOUBLE_EQ(average_precision({1, 0}, {0.3, 0.3}), 0.5);    // one threshold
}

TEST(Bootstrap, PercentilesAreNumpys) {
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0.25), 1.75);  // np.percentile([1,2,3,4], 25)
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 0.975), 3.925);
  EXPECT_DOUBLE_EQ(percentile({7}, 0.025), 7);
  EXPECT_TRUE(std::isnan(percentile({}, 0.5)));
}

TEST(Bootstrap, DrawsWholeGroupsDeterministically) {
  const std::vector<std::string> groups{"a", "a", "b", "c"};
  // Samples 0 and 1 share a group: every resample holds them equally often.
  const Statistic together = [](const std::vector<std::size_t>& idx) {
    double zeros = 0, ones = 0;
    for (const auto i : idx) zeros += i == 0, ones += i == 1;
    return zeros - ones;
  };
  // Three groups drawn per resample: the resample holds 3 to 6 samples.
  const Statistic size = [](const std::vector<std::size_t>& idx) {
    return static_cast<double>(idx.size());
  };
  // Undefined without sample 3: left out.
  const Statistic needs_c = [](const std::vector<std::size_t>& idx) {
    for (const auto i : idx)
      if (i == 3) return 1.0;
    return std::nan("");
  };
  const auto a = bootstrap_intervals(groups, {together, size, needs_c}, 1000, 7);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].low, 0);
  EXPECT_EQ(a[0].high, 0);
  EXPECT_EQ(a[0].resamples, 1000);
  EXPECT_GE(a[1].low, 3);
  EXPECT_LE(a[1].high, 6);
  EXPECT_LT(a[1].low, a[1].high);
  // P(c drawn at least once in 3 draws) = 1 - (2/3)^3 = 0.704.
  EXPECT_NEAR(static_cast<double>(a[2].resamples) / 1000, 0.704, 0.05);
  const auto again = bootstrap_intervals(groups, {together, size, needs_c}, 1000, 7);
  EXPECT_EQ(again[1].low, a[1].low);
  EXPECT_EQ(again[1].high, a[1].high);
  EXPECT_EQ(again[2].resamples, a[2].resamples);
  EXPECT_NE(bootstrap_intervals(groups, {needs_c}, 1000, 8)[0].resamples, a[2].resamples);
  // Fewer than 10 resamples with a number: no interval.
  const auto few = bootstrap_intervals(groups, {size}, 5, 7);
  EXPECT_TRUE(std::isnan(few[0].low) && std::isnan(few[0].high));
  EXPECT_EQ(few[0].resamples, 5);
}

TEST(Metrics, RefusesBadInput) {
  EXPECT_THROW(classification_metrics({}, {}, {}, 2), UsageError);
  EXPECT_THROW(classification_metrics({0, 1}, {0}, {}, 3), UsageError);
  EXPECT_THROW(classification_metrics({0, 3}, {0, 1}, {}, 3), UsageError);
  EXPECT_THROW(classification_metrics({0, 1}, {0, 1}, {0.5}, 2), UsageError);
}

TEST(Metrics, RegressionByHand) {
  // y 1, 2, 3, 4; p 2, 2, 2, 6: errors 1, 0, -1, 2; SS_res 6, SS_tot 5.
  const auto m = regression_metrics({1, 2, 3, 4}, {2, 2, 2, 6});
  EXPECT_DOUBLE_EQ(m.mae, 1.0);
  EXPECT_DOUBLE_EQ(m.rmse, std::sqrt(1.5));
  EXPECT_DOUBLE_EQ(m.r2, 1.0 - 6.0 / 5.0);
  // Spearman: ranks of p are 2, 2, 2, 4 (ties averaged) against 1, 2, 3, 4.
  EXPECT_NEAR(m.spearman, pearson({1, 2, 3, 4}, {2, 2, 2, 4}), 1e-15);
  EXPECT_TRUE(std::isnan(regression_metrics({3, 3}, {1, 2}).r2));  // constant targets
  EXPECT_TRUE(std::isnan(pearson({1, 2}, {5, 5})));
}

TEST(Metrics, ConcordanceCountsPairsAsLifelines) {
  // Times 1 (event), 2 (censored), 2 (event), 3 (event); risks 4, 1, 3, 3.
  // Comparable pairs (earlier time an event, or an event and a censoring at one time):
  // (0,1) (0,2) (0,3): risk 4 beats 1, 3, 3 -> 3; (2,1): event at 2 vs censored at 2 ->
  // comparable, 3 > 1 -> 1; (2,3): 3 = 3 -> 1/2. Two events at one time are not comparable.
  EXPECT_DOUBLE_EQ(concordance_index({1, 2, 2, 3}, {1, 0, 1, 1}, {4, 1, 3, 3}), 4.5 / 5.0);
  EXPECT_TRUE(std::isnan(concordance_index({1, 2}, {0, 0}, {1, 2})));  // no event
}

TEST(Metrics, KaplanMeierAndLogRankByHand) {
  // Times 1, 2+, 3, 3, 4+ (+ censored): S = 4/5 after 1, then 3 at risk at 3 with 2 events.
  const auto km = kaplan_meier({1, 2, 3, 3, 4}, {1, 0, 1, 1, 0});
  EXPECT_EQ(km.times, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(km.at_risk, (std::vector<std::int64_t>{5, 4, 3, 1}));
  EXPECT_DOUBLE_EQ(km.at(3.5), 0.8 * (1.0 / 3.0));
  EXPECT_DOUBLE_EQ(km.at(0.5), 1.0);
  // Two groups, one event each at distinct times, all at risk: at t=1 the expected events of
  // group 0 are 2/4 with variance 1/4; at t=2, 1/3 with variance 2/9. O - E = 1 - 5/6.
  const double chi2 = (1.0 / 6.0) * (1.0 / 6.0) / (0.25 + 2.0 / 9.0);
  EXPECT_NEAR(logrank_p({1, 5, 2, 6}, {1, 0, 1, 0}, {0, 0, 1, 1}), std::erfc(std::sqrt(chi2 / 2)),
              1e-15);
  EXPECT_TRUE(std::isnan(logrank_p({1, 2}, {1, 1}, {0, 0})));  // one group
}

TEST(Metrics, IntegratedBrierScoreByHand) {
  // No censoring: the weights are 1. Test times 1, 2, 3 (events); grid 1, 2; estimates S = 0.5
  // everywhere. At t=1: case 1 -> 0.25, controls 2 and 3 -> 0.25 each: mean 0.25. At t=2 the
  // same. The integral over [1, 2] divided by its length: 0.25.
  EXPECT_DOUBLE_EQ(integrated_brier_score({1, 2, 3}, {1, 1, 1}, {1, 2, 3}, {1, 1, 1}, {1, 2},
                                          std::vector<double>(6, 0.5)),
                   0.25);
  // A test time past the training sample's last while the censoring estimate is above zero:
  // scikit-survival refuses; NaN here.
  EXPECT_TRUE(std::isnan(integrated_brier_score({1, 2}, {1, 1}, {1, 5, 6}, {1, 1, 1}, {1, 2},
                                                std::vector<double>(6, 0.5))));
}

}  // namespace
}  // namespace mltool::train
