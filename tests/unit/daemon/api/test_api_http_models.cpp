// /v1/models and the ids of responses, over the in-process HTTP fixture
// (test_api_http_fixture.h): every served name listed, retrievable
// percent-encoded and echoed; ids that are random, not serials.
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
