// /v1/models and the ids of responses, over the in-process HTTP fixture
// (test_api_http_fixture.h): every served name listed, retrievable
// percent-encoded and echoed; max_model_len and the chat default it sets;
// ids that are random, not serials.
#include <set>
#include <string>

#include "test_api_http_fixture.h"

using namespace kvasir;
using test::ApiHttpTest;
using test::Resp;

TEST_F(ApiHttpTest, HealthAndModels) {
  Resp h = get("/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.j()["status"], "ok");
  engine_.is_ready = false;
  EXPECT_EQ(get("/health").status, 503);
  EXPECT_EQ(post("/v1/completions", R"({"prompt":"x"})").status, 503);
  engine_.is_ready = true;
  Resp m = get("/v1/models");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.j()["data"][0]["id"], "fake-model");
  EXPECT_EQ(get("/v1/models/fake-model").status, 200);
  EXPECT_EQ(get("/v1/models/other").status, 404);
  // The id as a client sends it: percent-encoded (a listed id may hold spaces).
  EXPECT_EQ(get("/v1/models/fake%2Dmodel").status, 200);
  EXPECT_EQ(get("/v1/models/fake%2dmodel").status, 200);
  EXPECT_EQ(get("/v1/models/fake%2").status, 400);
  EXPECT_EQ(get("/v1/models/fake%zzmodel").status, 400);
  // Every served name is listed, retrievable and accepted; a response
  // answers with the name the request used.
  ASSERT_EQ(m.j()["data"].size(), 2u);
  EXPECT_EQ(m.j()["data"][1]["id"], "fake model two");
  Resp two = get("/v1/models/fake%20model%20two");
  EXPECT_EQ(two.status, 200);
  EXPECT_EQ(two.j()["id"], "fake model two");
  Resp r = post("/v1/completions", R"({"model":"fake model two","prompt":"Hi","max_tokens":1})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["model"], "fake model two");
  r = post("/v1/completions", R"({"prompt":"Hi","max_tokens":1})");
  EXPECT_EQ(r.j()["model"], "fake-model");
}

// max_model_len is the model's context (4096 here) until the engine knows
// better: a KV pool that holds fewer tokens for one sequence lowers it. A
// chat request without max_tokens may generate the rest of it (vLLM's
// default); a completion's default stays 16.
TEST_F(ApiHttpTest, MaxModelLenAndTheChatDefault) {
  const std::string chat = R"({"messages":[{"role":"user","content":"hello"}]})";
  ASSERT_EQ(post("/v1/chat/completions", chat).status, 200);
  const GenRequest first = engine_.last();
  EXPECT_EQ(int64_t(first.prompt.size()) + first.max_tokens, 4096);
  EXPECT_EQ(get("/v1/models").j()["data"][0]["max_model_len"], 4096);
  engine_.max_tokens_per_sequence = 1000;  // the pool holds less than the context
  EXPECT_EQ(get("/v1/models").j()["data"][0]["max_model_len"], 1000);
  ASSERT_EQ(post("/v1/chat/completions", chat).status, 200);
  const GenRequest second = engine_.last();
  EXPECT_EQ(int64_t(second.prompt.size()) + second.max_tokens, 1000);
  Resp over = post("/v1/completions", R"({"prompt":"Hi","max_tokens":999})");
  EXPECT_EQ(over.status, 400);
  EXPECT_EQ(over.j()["error"]["param"], "max_tokens");
  ASSERT_EQ(post("/v1/completions", R"({"prompt":"Hi"})").status, 200);
  EXPECT_EQ(engine_.last().max_tokens, 16);
}

// Response ids are 128 random bits: distinct for every response, and not a
// serial a client could predict (they were serial × constant, the same
// after every restart).
TEST_F(ApiHttpTest, ResponseIdsAreRandom) {
  std::set<std::string> ids;
  for (int i = 0; i < 8; ++i) {
    Resp r = post(i % 2 ? "/v1/chat/completions" : "/v1/completions",
                  i % 2 ? R"({"messages":[{"role":"user","content":"yo"}],"max_tokens":1})"
                        : R"({"prompt":"Hi","max_tokens":1})");
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string id = r.j()["id"];
    const std::string prefix = i % 2 ? "chatcmpl-" : "cmpl-";
    ASSERT_EQ(id.rfind(prefix, 0), 0u) << id;
    EXPECT_EQ(id.size(), prefix.size() + 32) << id;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef", prefix.size()), std::string::npos) << id;
    ids.insert(id.substr(prefix.size()));
  }
  EXPECT_EQ(ids.size(), 8u);
}
