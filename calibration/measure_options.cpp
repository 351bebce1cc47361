#include "calibration/measure_options.h"

#include "calibration/shape_grid.h"

namespace batchsim::calibration {

MeasureOptions resolve_defaults(MeasureOptions o) {
  if (o.models.empty()) {
    if (o.quick) {
      o.models = {"llama-2-7b"};  // the model of the shared Vidur A100 data, for comparison
    } else {
      for (const CalibrationModel& m : calibration_models()) o.models.push_back(m.name);
    }
  }
  for (const std::string& name : o.models) find_calibration_model(name);  // throws on unknown
  if (o.tensor_parallel_degrees.empty()) o.tensor_parallel_degrees = {1, 2, 4, 8};
  if (o.quick) o.fp16 = false;
  return o;
}

}  // namespace batchsim::calibration
