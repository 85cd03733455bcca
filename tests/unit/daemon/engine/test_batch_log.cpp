// The batch log (daemon/engine/batch_log.h): what a micro-batch carried,
// counted from its rows, and the line written for it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/engine/batch_log.h"

namespace kvasir {
namespace {

ScheduledRow row(int32_t pos0, int32_t n_tokens, int32_t n_prompt, bool sample, bool pad = false) {
  ScheduledRow r;
  r.pos0 = pos0;
  r.n_tokens = n_tokens;
  r.n_prompt = n_prompt;
  r.sample = sample;
  r.pad = pad;
  return r;
}

TEST(BatchLog, CountsRowsByWhatTheyCompute) {
  SchedulerOutput out;
  out.rows.push_back(row(0, 16, 40, false));        // a first prompt piece
  out.rows.push_back(row(32, 8, 40, true));         // the prompt's last piece: sampled
  out.rows.push_back(row(57, 1, 40, true));         // a decode
  out.rows.push_back(row(36, 10, 40, false));       // a recompute across the prompt's end: 4 prompt
  out.rows.push_back(row(40, 3, 40, false, true));  // `static` filler
  const BatchCounts c = count_batch(out);
  EXPECT_EQ(c.rows, 5);
  EXPECT_EQ(c.tokens, 16 + 8 + 1 + 10 + 3);
  EXPECT_EQ(c.prompt_tokens, 16 + 8 + 4);
  EXPECT_EQ(c.decode_rows, 1);
  EXPECT_EQ(c.sampled, 2);
  EXPECT_EQ(c.pad_tokens, 3);
  EXPECT_EQ(count_batch(SchedulerOutput{}).rows, 0);
}

TEST(BatchLog, WritesOneJsonLinePerRecord) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("batch_log_" + std::to_string(getpid()) + ".jsonl"))
                               .string();
  {
    std::unique_ptr<BatchLog> log;
    ASSERT_TRUE(BatchLog::open(path, &log).ok());
    BatchRecord r;
    r.batch = 7;
    r.slot = 1;
    r.submit_s = 100.25;
    r.done_s = 100.5;
    r.counts.rows = 3;
    r.counts.tokens = 20;
    r.counts.decode_rows = 2;
    r.counts.prompt_tokens = 18;
    r.counts.sampled = 2;
    r.stage_busy_s = {0.125, 0.0625};
    log->write(r);
    r.batch = 8;
    r.ok = false;
    r.error = ErrorCode::kStageFailed;
    r.stage_busy_s = {};
    log->write(r);
    EXPECT_EQ(log->write_errors(), 0u);
  }
  std::ifstream in(path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const auto a = nlohmann::json::parse(line);
  EXPECT_EQ(a["batch"], 7);
  EXPECT_EQ(a["slot"], 1);
  EXPECT_DOUBLE_EQ(a["submit_s"].get<double>(), 100.25);
  EXPECT_DOUBLE_EQ(a["done_s"].get<double>(), 100.5);
  EXPECT_EQ(a["rows"], 3);
  EXPECT_EQ(a["tokens"], 20);
  EXPECT_EQ(a["decode_rows"], 2);
  EXPECT_EQ(a["prompt_tokens"], 18);
  EXPECT_EQ(a["sampled"], 2);
  EXPECT_EQ(a["pad_tokens"], 0);
  ASSERT_EQ(a["stage_busy_s"].size(), 2u);
  EXPECT_DOUBLE_EQ(a["stage_busy_s"][1].get<double>(), 0.0625);
  EXPECT_EQ(a["ok"], true);
  EXPECT_FALSE(a.contains("error"));
  ASSERT_TRUE(std::getline(in, line));
  const auto b = nlohmann::json::parse(line);
  EXPECT_EQ(b["batch"], 8);
  EXPECT_EQ(b["ok"], false);
  EXPECT_EQ(b["error"], error_code_name(ErrorCode::kStageFailed));
  EXPECT_TRUE(b["stage_busy_s"].empty());
  EXPECT_FALSE(std::getline(in, line));
  std::filesystem::remove(path);
}

TEST(BatchLog, AFileThatCannotBeWrittenIsAnIoErrorNamingIt) {
  std::unique_ptr<BatchLog> log;
  const Status st = BatchLog::open("/nonexistent-dir/b.jsonl", &log);
  EXPECT_EQ(st.code(), ErrorCode::kIo);
  EXPECT_NE(st.message().find("/nonexistent-dir/b.jsonl"), std::string::npos);
  EXPECT_EQ(log, nullptr);
}

}  // namespace
}  // namespace kvasir
