#include "calibration/measure_options.h"

#include <stdexcept>
#include <string>

#include "calibration/shape_grid.h"

namespace batchsim::calibration {

MeasureOptions resolve_defaults(MeasureOptions o) {
  if (o.models.empty() && o.shapes_file.empty()) {
    if (o.quick) {
      o.models = {"llama-2-7b"};  // the model of the shared Vidur A100 data, for comparison
    } else {
      for (const CalibrationModel& m : calibration_models()) o.models.push_back(m.name);
    }
  }
  for (const std::string& name : o.models) {
    try {
      find_calibration_model(name);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string(e.what()) +
                                  ". Any model `batchsim run --model` accepts can be measured from its shape file: on "
                                  "a CPU machine, `batchsim calibrate shapes --model " +
                                  name +
                                  " --tp N [--ep N] --out shapes.csv`, then "
                                  "`batchsim-calibrate measure --shapes shapes.csv`");
    }
  }
  if (o.tensor_parallel_degrees.empty()) o.tensor_parallel_degrees = {1, 2, 4, 8};
  if (o.quick) o.fp16 = false;
  return o;
}

}  // namespace batchsim::calibration
