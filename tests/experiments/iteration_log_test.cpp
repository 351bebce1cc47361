// --iteration-log: iterations.csv, and with =ids each iteration's requests.
#include <fstream>
#include <map>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "experiments/cli/cli.h"
#include "hwmodel/base/error.h"
#include "test_support.h"

namespace batchsim {
namespace {

using testing::run_cli;

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

// --iteration-log=ids: each row lists its prefill chunks as ID:TOKENS and its decodes as IDs.
// With no preemption every request's chunks add up to its prompt and it decodes once per
// output token after the first, which a wrong id or a wrong split would break.
TEST(IterationLog, IdsListEachIterationsPrefillChunksAndDecodes) {
  const fs::path dir = testing::scratch_dir("iteration-log-ids");
  for (const std::string how : {"flag", "yaml"}) {
    SCOPED_TRACE(how);
    const fs::path out = dir / how;
    std::vector<std::string> args = {"run",
                                     "--policy",
                                     "vllm",
                                     "--replicas",
                                     "2",
                                     "--arrival",
                                     "poisson:20",
                                     "--num-requests",
                                     "60",
                                     "--prompt-len",
                                     "uniform:64:3000",
                                     "--out",
                                     out.string()};
    if (how == "flag") {
      args.push_back("--iteration-log=ids");
    } else {
      testing::write_text_file(dir, "ids.yaml", "iteration-log: ids\n");
      args.insert(args.end(), {"--config", (dir / "ids.yaml").string()});
    }
    ASSERT_EQ(run_cli(args), 0);
    const json summary = json::parse(testing::read_text_file(out / "summary.json"));
    ASSERT_EQ(summary["preemptions"], 0);
    std::ifstream in(out / "iterations.csv");
    std::string line;
    std::getline(in, line);
    const std::vector<std::string> header = split(line, ',');
    std::map<std::string, size_t> column;
    for (size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
    ASSERT_TRUE(column.count("prefill_chunks") && column.count("decode_ids") && column.count("replica"));
    std::map<int64_t, int64_t> prefilled, decodes;
    int64_t rows = 0;
    while (std::getline(in, line)) {
      ++rows;
      std::vector<std::string> cells = split(line, ',');
      cells.resize(header.size());  // a trailing empty decode_ids cell
      const auto chunks = split(cells[column["prefill_chunks"]], ' ');
      const auto ids = split(cells[column["decode_ids"]], ' ');
      EXPECT_EQ(static_cast<int64_t>(chunks.size()), std::stoll(cells[column["num_prefills"]])) << line;
      EXPECT_EQ(static_cast<int64_t>(ids.size()), std::stoll(cells[column["num_decodes"]])) << line;
      int64_t tokens = 0;
      for (const std::string& chunk : chunks) {
        const auto colon = chunk.find(':');
        ASSERT_NE(colon, std::string::npos) << chunk;
        prefilled[std::stoll(chunk.substr(0, colon))] += std::stoll(chunk.substr(colon + 1));
        tokens += std::stoll(chunk.substr(colon + 1));
      }
      EXPECT_EQ(tokens, std::stoll(cells[column["prefill_tokens"]])) << line;
      for (const std::string& id : ids) ++decodes[std::stoll(id)];
    }
    EXPECT_EQ(rows, summary["iterations"].get<int64_t>());
    const auto requests = split(testing::read_text_file(out / "requests.csv"), '\n');
    ASSERT_EQ(requests.size(), 61u);
    for (size_t i = 1; i < requests.size(); ++i) {
      const auto cells = split(requests[i], ',');
      const int64_t id = std::stoll(cells[0]), prompt = std::stoll(cells[2]), output = std::stoll(cells[3]);
      EXPECT_EQ(prefilled[id], prompt) << "request " << id;
      EXPECT_EQ(decodes[id], output - 1) << "request " << id;
    }
  }
  // Without =ids the columns are not there.
  ASSERT_EQ(run_cli({"run", "--num-requests", "10", "--iteration-log", "--out", (dir / "plain").string()}), 0);
  const std::string plain = testing::read_text_file(dir / "plain" / "iterations.csv");
  EXPECT_THAT(plain.substr(0, plain.find('\n')), ::testing::EndsWith(",waiting"));
}

TEST(IterationLog, AnUnknownValueIsRefusedByName) {
  EXPECT_THAT(testing::user_error_of([] {
                run_cli({"run", "--num-requests", "5", "--iteration-log=all", "--out", "x"});
              }),
              HasSubstr("--iteration-log: 'all' is not an iteration log"));
  const fs::path dir = testing::scratch_dir("iteration-log-bad");
  testing::write_text_file(dir, "bad.yaml", "iteration-log: every\n");
  EXPECT_THAT(testing::user_error_of([&] {
                run_cli({"run", "--config", (dir / "bad.yaml").string(), "--out", "x"});
              }),
              HasSubstr("bad.yaml:1: iteration-log: 'every'"));
}

}  // namespace
}  // namespace batchsim
