// Validation metrics (lib/train/metrics.cpp) against values computed by hand.
#include <gtest/gtest.h>

#include <cmath>

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

TEST(Metrics, RefusesBadInput) {
  EXPECT_THROW(classification_metrics({}, {}, {}, 2), UsageError);
  EXPECT_THROW(classification_metrics({0, 1}, {0}, {}, 3), UsageError);
  EXPECT_THROW(classification_metrics({0, 3}, {0, 1}, {}, 3), UsageError);
  EXPECT_THROW(classification_metrics({0, 1}, {0, 1}, {0.5}, 2), UsageError);
}

}  // namespace
}  // namespace mltool::train
