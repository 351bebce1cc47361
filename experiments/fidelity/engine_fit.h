// batchsim — `batchsim calibrate engine`: an engine's residual per-iteration time, fitted to
// measured closed-loop serving benchmarks.
//
//   batchsim calibrate engine --measurements FILE.csv[.gz] --gpu PROFILE --backend B
//       [--engine BASE] [--holdout osl|isl|none] [--name NAME] --out ENGINE.yaml [--report FILE.json]
//
// The kernels of a GPU profile and the CPU costs an engine profile cites leave a gap to what a
// serving engine measures end to end: on NVIDIA's H100 benchmarks (hwmodel/measured/
// aiconfigurator/silicon) the predicted TPOT falls short by about a millisecond per iteration,
// plus tens of microseconds per running sequence, growing with the tensor-parallel degree
// (hwmodel/README.md, "Fitting an engine to serving benchmarks"). Its cause is not in any table
// here (host-device synchronisation for the sampled tokens, the sampler, input copies, rank skew
// at the all-reduces), so it is fitted as what it looks like: a time per iteration, per sequence
// of the iteration and per tensor-parallel worker beyond the first, on every iteration's
// critical path (EngineProfile::residual).
//
// Each row of the backend is replayed as validate-serving replays it (experiments/
// validate_serving.h) with the base engine; the TPOT gap of the fitting rows is regressed,
// non-negatively, on [1, sequences per iteration, TP - 1], minimising the mean absolute relative
// error (what MAPE scores, and robust to the few rows the model misses for other reasons). Adding the fitted times
// changes the runs it was fitted on (longer iterations hold more requests waiting), so the replay and the fit repeat
// until the times move by less than 1% (at most 5 rounds). `--holdout osl` (the default) fits on the rows of every
// other distinct output length (the 1st, 3rd, ...) and scores on the rest; `isl` splits by prompt length; `none` fits
// on all. The report gives TPOT and TTFT MAPE before and after, on the fitting and the held-out rows. The engine
// written is BASE with the fitted `residual:` block and a `sources` line saying what it was fitted on.
#pragma once

#include <iosfwd>
#include <string>

#include "experiments/fidelity/validate_serving.h"

namespace batchsim {

// What `batchsim calibrate engine`'s options say, beside the replay's own.
struct EngineFitOptions : ServingReplayOptions {
  std::string measurements, out, report, holdout = "osl", base_engine, name;
};
int run_calibrate_engine(const EngineFitOptions& options, std::ostream& out);

}  // namespace batchsim
