// batchsim — reading a whole JSON file, with errors that name it.
#pragma once

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hwmodel/base/error.h"

namespace batchsim {

// The JSON document in `file` (nlohmann::json or nlohmann::ordered_json). Throws UserError
// naming the file when it cannot be opened or is not valid JSON (a number beyond a double, 1e400,
// included).
template <typename Json = nlohmann::json>
Json read_json_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UserError(fmt::format("{}: cannot open", file.string()));
  try {
    return Json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(fmt::format("{}: not valid JSON: {}", file.string(), e.what()));
  }
}

}  // namespace batchsim
