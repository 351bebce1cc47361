// Sessions from the command line and a run YAML: --trace-sessions is read, echoed and refused
// beside what it cannot go with.
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli_run.h"

namespace batchsim {
namespace {

using ::testing::HasSubstr;

// Two turns of one conversation and one other row (Mooncake JSONL, blocks of 512).
std::string conversation_trace() {
  return testing::write_text_file(
             testing::scratch_dir("trace"), "conversation.jsonl",
             "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 40, \"hash_ids\": [0, 1, 2]}\n"
             "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [0, 3]}\n"
             "{\"timestamp\": 1, \"input_length\": 1600, \"output_length\": 20, \"hash_ids\": [0, 1, 4, 5]}\n")
      .string();
}

TEST(SessionsCli, TraceSessionsAreReadFromTheFlagAndTheYamlAndEchoed) {
  const std::string trace = conversation_trace();
  const auto dir = testing::scratch_dir("flag");
  std::string text;
  ASSERT_EQ(testing::run_cli({"run", "--trace", trace, "--trace-sessions", "--model", "llama-3.1-8b", "--gpu",
                              "h100-sxm", "--out", dir.string()},
                             &text),
            0)
      << text;
  EXPECT_THAT(text, HasSubstr("sessions from the trace's hash_ids"));
  std::ifstream in(dir / "summary.json");
  const nlohmann::json flag = nlohmann::json::parse(in);
  EXPECT_EQ(flag["config"]["trace_sessions"], true);
  EXPECT_EQ(flag["requests"]["completed"], 3);
  const auto yaml = testing::write_text_file(testing::scratch_dir("yaml"), "run.yaml",
                                             "trace: " + trace + "\ntrace-sessions: true\nmodel: llama-3.1-8b\n");
  const nlohmann::json from_yaml = testing::run_summary("from-yaml", {"--config", yaml.string()});
  EXPECT_EQ(from_yaml["config"]["trace_sessions"], true);
  // Without it the key is left out, as in older files.
  const nlohmann::json plain = testing::run_summary("plain", {"--trace", trace, "--model", "llama-3.1-8b"});
  EXPECT_FALSE(plain["config"].contains("trace_sessions"));
}

TEST(SessionsCli, TraceSessionsRefuseWhatTheyCannotGoWith) {
  const std::string trace = conversation_trace();
  EXPECT_THAT(testing::cli_error_of({"run", "--trace", trace, "--trace-sessions", "--seeds", "3"}),
              HasSubstr("--trace-sessions with --seeds 3: not supported"));
  EXPECT_THAT(testing::cli_error_of({"run", "--trace", trace, "--trace-sessions", "--streaming"}),
              HasSubstr("--streaming with --trace-sessions: not supported"));
  EXPECT_THAT(testing::cli_error_of({"run", "--trace-sessions", "--num-requests", "5"}),
              HasSubstr("--trace-sessions: needs --trace FILE"));
}

TEST(SessionsCli, MaxConcurrencyCountsSessions) {
  const auto dir = testing::scratch_dir("closed");
  std::string text;
  ASSERT_EQ(testing::run_cli({"run", "--num-requests", "12", "--session-turns", "uniform:1:4", "--think-time",
                              "fixed:1", "--max-concurrency", "3", "--model", "llama-3.1-8b", "--out", dir.string()},
                             &text),
            0)
      << text;
  EXPECT_THAT(text, HasSubstr("sessions of uniform:1:4 turns (think time fixed:1 s), 3 at a time"));
  EXPECT_THAT(testing::cli_error_of({"run", "--num-requests", "12", "--session-turns", "fixed:2", "--max-concurrency",
                                     "3", "--client-connections", "2"}),
              HasSubstr("--client-connections 2 with --session-turns: not supported"));
}

}  // namespace
}  // namespace batchsim
