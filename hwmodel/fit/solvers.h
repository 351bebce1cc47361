// batchsim — the small numerical solvers the profile fit needs: non-negative least squares and
// Levenberg–Marquardt. Plain Eigen, no CUDA: calibration/ and `batchsim validate` share them.
#pragma once

#include <Eigen/Dense>
#include <functional>

namespace batchsim::fit {

// min ||A x - b||_2 subject to x >= 0, by Lawson and Hanson's active-set algorithm
// ("Solving Least Squares Problems", 1974, chapter 23). Exact for the small dense systems of
// the fit (a handful of columns).
Eigen::VectorXd nnls(const Eigen::MatrixXd& a, const Eigen::VectorXd& b, int max_iterations = 500);

// Residuals r(x) of `num_residuals` rows; LM minimises sum r_i^2.
using ResidualFunction = std::function<void(const Eigen::VectorXd& x, Eigen::VectorXd& r)>;

struct LmOptions {
  int max_iterations = 200;
  double initial_lambda = 1e-3;
  double tolerance = 1e-10;  // stop when the relative cost decrease falls below this
};

struct LmResult {
  Eigen::VectorXd x;
  double cost = 0;  // sum of squared residuals at x
  int iterations = 0;
};

// Levenberg–Marquardt with a forward-difference Jacobian and Marquardt's diagonal scaling
// (Marquardt 1963; Nocedal & Wright, "Numerical Optimization", section 10.3). For fits of a
// few parameters over a few thousand rows, a numeric Jacobian is cheap and removes a class of
// bugs (hand-written derivatives of a max/p-norm roofline).
LmResult levenberg_marquardt(const ResidualFunction& residuals, Eigen::VectorXd x0, int num_residuals,
                             const LmOptions& options = {});

}  // namespace batchsim::fit
