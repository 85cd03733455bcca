// The daemon's grammar service (daemon/api/grammar_service.cpp), real:
// checks run on its own worker, never on the caller's thread (the API's io
// thread, shared by every connection), in arrival order, with XGrammar's
// refusals and the queue's limits answered through done().
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/api/api.h"

namespace kvasir {
namespace {

using Kind = OutputConstraint::Kind;

struct Answer {
  Status status;
  bool has_spec = false;
  std::thread::id thread;
};

// Collects done() calls in order; wait(n) blocks until n arrived.
class Answers {
 public:
  GrammarService::Done sink() {
    return [this](Status st, std::shared_ptr<const std::string> spec) {
      std::lock_guard lk(mu_);
      got_.push_back({std::move(st), spec != nullptr, std::this_thread::get_id()});
      cv_.notify_all();
    };
  }
  std::vector<Answer> wait(size_t n) {
    std::unique_lock lk(mu_);
    EXPECT_TRUE(cv_.wait_for(lk, std::chrono::seconds(60), [&] { return got_.size() >= n; }));
    return got_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Answer> got_;
};

OutputConstraint regex(std::string pattern) {
  return {Kind::kRegex, std::move(pattern), {}, "structured_outputs.regex"};
}

// A counted repetition in a schema's pattern: building its grammar takes a
// large fraction of a second.
OutputConstraint slow_schema() {
  return {Kind::kJsonSchema,
          R"({"type":"object","properties":{"s":{"type":"string","pattern":"^[a-z]{1,2000}$"}},)"
          R"("required":["s"]})",
          {},
          "response_format"};
}

TEST(GrammarService, ChecksOffTheCallersThreadInOrder) {
  auto service = make_grammar_service({});
  Answers answers;
  // compile() must return before the slow check is done.
  const auto t0 = std::chrono::steady_clock::now();
  service->compile(slow_schema(), answers.sink());
  service->compile(regex("[0-9]+("), answers.sink());  // unbalanced: refused
  service->compile({Kind::kJsonObject, "", {}, "response_format"}, answers.sink());
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::milliseconds(50)) << "compile() checked on the caller's thread";

  const std::vector<Answer> got = answers.wait(3);
  ASSERT_EQ(got.size(), 3u);
  for (const Answer& a : got) EXPECT_NE(a.thread, std::this_thread::get_id());
  EXPECT_TRUE(got[0].status.ok()) << got[0].status.message();
  EXPECT_TRUE(got[0].has_spec);
  EXPECT_EQ(got[1].status.code(), ErrorCode::kInvalidArgument) << got[1].status.message();
  EXPECT_FALSE(got[1].has_spec);
  EXPECT_TRUE(got[2].status.ok()) << got[2].status.message();
}

TEST(GrammarService, QueuedChecksAnswerStoppingWhenItGoes) {
  Answers answers;
  {
    auto service = make_grammar_service({});
    for (int i = 0; i < 4; i++) service->compile(slow_schema(), answers.sink());
  }  // destroyed with checks still queued
  const std::vector<Answer> got = answers.wait(4);
  ASSERT_EQ(got.size(), 4u);
  int stopping = 0;
  for (const Answer& a : got) {
    if (a.status.code() == ErrorCode::kStopping) stopping++;
    else EXPECT_TRUE(a.status.ok()) << a.status.message();
  }
  EXPECT_GE(stopping, 1) << "every queued check ran to the end";
}

}  // namespace
}  // namespace kvasir
