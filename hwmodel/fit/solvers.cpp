// batchsim — NNLS and Levenberg–Marquardt (see solvers.h).
#include "hwmodel/fit/solvers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace batchsim::fit {

Eigen::VectorXd nnls(const Eigen::MatrixXd& a, const Eigen::VectorXd& b, int max_iterations) {
  const Eigen::Index n = a.cols();
  Eigen::VectorXd x = Eigen::VectorXd::Zero(n);
  std::vector<bool> passive(static_cast<size_t>(n), false);
  const double tol = 1e-12 * std::max(1.0, a.norm() * b.norm());

  // Least squares restricted to the passive set; zeros elsewhere.
  auto solve_passive = [&]() {
    std::vector<Eigen::Index> cols;
    for (Eigen::Index j = 0; j < n; ++j) {
      if (passive[static_cast<size_t>(j)]) cols.push_back(j);
    }
    Eigen::MatrixXd sub(a.rows(), static_cast<Eigen::Index>(cols.size()));
    for (size_t k = 0; k < cols.size(); ++k) sub.col(static_cast<Eigen::Index>(k)) = a.col(cols[k]);
    const Eigen::VectorXd zs = sub.colPivHouseholderQr().solve(b);
    Eigen::VectorXd z = Eigen::VectorXd::Zero(n);
    for (size_t k = 0; k < cols.size(); ++k) z(cols[k]) = zs(static_cast<Eigen::Index>(k));
    return z;
  };

  for (int outer = 0; outer < max_iterations; ++outer) {
    const Eigen::VectorXd w = a.transpose() * (b - a * x);
    Eigen::Index best = -1;
    double best_w = tol;
    for (Eigen::Index j = 0; j < n; ++j) {
      if (!passive[static_cast<size_t>(j)] && w(j) > best_w) {
        best_w = w(j);
        best = j;
      }
    }
    if (best < 0) break;  // KKT conditions hold
    passive[static_cast<size_t>(best)] = true;
    for (int inner = 0; inner < max_iterations; ++inner) {
      const Eigen::VectorXd z = solve_passive();
      bool feasible = true;
      for (Eigen::Index j = 0; j < n; ++j) {
        if (passive[static_cast<size_t>(j)] && z(j) <= 0) feasible = false;
      }
      if (feasible) {
        x = z;
        break;
      }
      // Step from x towards z until the first passive variable hits zero.
      double alpha = std::numeric_limits<double>::infinity();
      for (Eigen::Index j = 0; j < n; ++j) {
        if (passive[static_cast<size_t>(j)] && z(j) <= 0) alpha = std::min(alpha, x(j) / (x(j) - z(j)));
      }
      x += alpha * (z - x);
      for (Eigen::Index j = 0; j < n; ++j) {
        if (passive[static_cast<size_t>(j)] && x(j) <= tol) {
          passive[static_cast<size_t>(j)] = false;
          x(j) = 0;
        }
      }
    }
  }
  return x;
}

LmResult levenberg_marquardt(const ResidualFunction& residuals, Eigen::VectorXd x0, int num_residuals,
                             const LmOptions& options) {
  const Eigen::Index n = x0.size();
  Eigen::VectorXd r(num_residuals), r_trial(num_residuals), r_step(num_residuals);
  Eigen::MatrixXd jac(num_residuals, n);
  LmResult result;
  result.x = std::move(x0);
  residuals(result.x, r);
  result.cost = r.squaredNorm();
  double lambda = options.initial_lambda;

  for (int it = 0; it < options.max_iterations; ++it) {
    result.iterations = it + 1;
    for (Eigen::Index j = 0; j < n; ++j) {
      Eigen::VectorXd xs = result.x;
      const double h = 1e-7 * std::max(1.0, std::abs(xs(j)));
      xs(j) += h;
      residuals(xs, r_step);
      jac.col(j) = (r_step - r) / h;
    }
    const Eigen::MatrixXd jtj = jac.transpose() * jac;
    const Eigen::VectorXd g = jac.transpose() * r;
    bool improved = false;
    for (int tries = 0; tries < 30 && !improved; ++tries) {
      Eigen::MatrixXd damped = jtj;
      for (Eigen::Index j = 0; j < n; ++j) damped(j, j) += lambda * std::max(jtj(j, j), 1e-12);
      const Eigen::VectorXd step = damped.ldlt().solve(-g);
      const Eigen::VectorXd x_trial = result.x + step;
      residuals(x_trial, r_trial);
      const double cost = r_trial.squaredNorm();
      if (std::isfinite(cost) && cost < result.cost) {
        const double decrease = (result.cost - cost) / std::max(result.cost, 1e-300);
        result.x = x_trial;
        r = r_trial;
        result.cost = cost;
        lambda = std::max(lambda / 3, 1e-12);
        improved = true;
        if (decrease < options.tolerance) return result;
      } else {
        lambda *= 4;
      }
    }
    if (!improved) break;  // no step reduces the cost: a (local) minimum
  }
  return result;
}

}  // namespace batchsim::fit
