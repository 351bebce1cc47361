// batchsim — the unconstrained coordinates the fits search in: log for positive quantities,
// logit for efficiencies in (0, 1), so that every fitted value is plausible by construction.
// Shared by fit_profile, fit_attention_kernels and fit_mla.
#pragma once

#include <algorithm>
#include <cmath>

namespace batchsim {

inline double from_log(double x) { return std::exp(std::clamp(x, -700.0, 700.0)); }
inline double to_log(double v) { return std::log(std::max(v, 1e-300)); }
inline double from_logit(double x) { return 1 / (1 + std::exp(-std::clamp(x, -700.0, 700.0))); }
inline double to_logit(double v) {
  v = std::clamp(v, 1e-6, 1 - 1e-6);
  return std::log(v / (1 - v));
}

}  // namespace batchsim
