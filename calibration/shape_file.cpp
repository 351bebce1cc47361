#include "calibration/shape_file.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <stdexcept>

namespace batchsim::calibration {
namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    std::string cell = line.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!cell.empty() && (cell.back() == ' ' || cell.back() == '\r')) cell.pop_back();
    cell.erase(0, std::min(cell.find_first_not_of(' '), cell.size()));
    cells.push_back(std::move(cell));
    if (comma == std::string::npos) return cells;
    start = comma + 1;
  }
}

}  // namespace

std::vector<ShapeFileGemm> read_shape_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read the shape file " + path.string());
  std::vector<ShapeFileGemm> rows;
  std::map<std::string, size_t> column;
  std::string line;
  int line_number = 0;
  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument(path.string() + ":" + std::to_string(line_number) + ": " + what);
  };
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos || line[line.find_first_not_of(" \t")] == '#') continue;
    const std::vector<std::string> cells = split_csv_line(line);
    if (column.empty()) {
      for (size_t i = 0; i < cells.size(); ++i) column[cells[i]] = i;
      for (const char* required : {"model", "op", "k", "n"}) {
        if (!column.count(required)) {
          fail(std::string("the header has no '") + required +
               "' column (a shape file as `batchsim calibrate shapes` writes it starts with model,hf_id,tp,...)");
        }
      }
      continue;
    }
    if (cells.size() != column.size()) {
      fail(std::to_string(cells.size()) + " cells, the header has " + std::to_string(column.size()));
    }
    const auto text = [&](const char* name) -> std::string {
      const auto it = column.find(name);
      return it == column.end() ? std::string() : cells[it->second];
    };
    const auto number = [&](const char* name, int64_t fallback) -> int64_t {
      const std::string t = text(name);
      if (t.empty()) {
        if (fallback > 0) return fallback;
        fail(std::string("column '") + name + "' is empty");
      }
      int64_t value = 0;
      const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
      if (ec != std::errc() || ptr != t.data() + t.size() || value < 1) {
        fail(std::string("column '") + name + "': '" + t + "' is not a positive integer");
      }
      return value;
    };
    ShapeFileGemm g;
    g.model = text("model");
    g.hf_id = text("hf_id");
    g.op = text("op");
    if (g.model.empty() || g.op.empty()) fail("the model and op columns must not be empty");
    g.k = number("k", 0);
    g.n = number("n", 0);
    g.groups = number("groups", 1);
    g.tp = static_cast<int>(number("tp", 1));
    g.dp = static_cast<int>(number("dp", 1));
    g.ep = static_cast<int>(number("ep", 1));
    g.moe_tp = static_cast<int>(number("moe_tp", 1));
    g.layers = static_cast<int>(text("layers").empty() ? 0 : number("layers", 0));
    g.weight_format = text("weight_format");
    rows.push_back(std::move(g));
  }
  if (column.empty()) throw std::invalid_argument(path.string() + ": no header line (the file is empty)");
  if (rows.empty()) throw std::invalid_argument(path.string() + ": no GEMM rows below the header");
  return rows;
}

std::vector<DistinctGemm> distinct_gemms(const std::vector<ShapeFileGemm>& gemms, const std::string& model) {
  std::vector<DistinctGemm> distinct;
  for (const ShapeFileGemm& g : gemms) {
    if (g.model != model) continue;
    const auto same = std::find_if(distinct.begin(), distinct.end(), [&](const DistinctGemm& d) {
      return d.k == g.k && d.n == g.n && d.groups == g.groups;
    });
    if (same != distinct.end()) {
      same->rows.push_back(g);
    } else {
      distinct.push_back({g.k, g.n, g.groups, {g}});
    }
  }
  return distinct;
}

std::vector<std::string> shape_file_models(const std::vector<ShapeFileGemm>& gemms) {
  std::vector<std::string> models;
  for (const ShapeFileGemm& g : gemms) {
    if (std::find(models.begin(), models.end(), g.model) == models.end()) models.push_back(g.model);
  }
  return models;
}

}  // namespace batchsim::calibration
