// NNLS and Levenberg–Marquardt on problems with known answers.
#include "hwmodel/fit/solvers.h"

#include <gtest/gtest.h>

#include <cmath>

namespace batchsim::fit {
namespace {

TEST(Nnls, MatchesLeastSquaresWhenTheOptimumIsPositive) {
  // y = 2 + 3x exactly.
  Eigen::MatrixXd a(4, 2);
  a << 1, 0, 1, 1, 1, 2, 1, 3;
  Eigen::VectorXd b(4);
  b << 2, 5, 8, 11;
  const Eigen::VectorXd x = nnls(a, b);
  EXPECT_NEAR(x(0), 2, 1e-12);
  EXPECT_NEAR(x(1), 3, 1e-12);
}

TEST(Nnls, ClampsANegativeCoefficientAndRefitsTheRest) {
  // Unconstrained least squares gives y = 4 - 1x; with x >= 0 the slope is 0 and the
  // intercept is the mean of b (3).
  Eigen::MatrixXd a(3, 2);
  a << 1, 0, 1, 1, 1, 2;
  Eigen::VectorXd b(3);
  b << 4, 3, 2;
  const Eigen::VectorXd x = nnls(a, b);
  EXPECT_NEAR(x(0), 3, 1e-12);
  EXPECT_EQ(x(1), 0);
}

TEST(LevenbergMarquardt, RecoversAnExponentialDecay) {
  // y = 5 exp(-0.7 t) + 1, sampled without noise; start far away.
  std::vector<double> t, y;
  for (int i = 0; i < 30; ++i) {
    t.push_back(0.2 * i);
    y.push_back(5 * std::exp(-0.7 * t.back()) + 1);
  }
  Eigen::VectorXd x0(3);
  x0 << 1, 0.1, 0;
  const LmResult r = levenberg_marquardt(
      [&](const Eigen::VectorXd& x, Eigen::VectorXd& res) {
        for (size_t i = 0; i < t.size(); ++i) {
          res(static_cast<Eigen::Index>(i)) = x(0) * std::exp(-x(1) * t[i]) + x(2) - y[i];
        }
      },
      x0, static_cast<int>(t.size()));
  EXPECT_NEAR(r.x(0), 5, 1e-5);
  EXPECT_NEAR(r.x(1), 0.7, 1e-6);
  EXPECT_NEAR(r.x(2), 1, 1e-5);
  EXPECT_LT(r.cost, 1e-12);
}

}  // namespace
}  // namespace batchsim::fit
