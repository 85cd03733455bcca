// The error table (daemon/api/errors.h): every ErrorCode's HTTP status,
// OpenAI type and code, spelled out here (not computed from the table), and
// the routes answering by it: an engine event with a code, and a
// kvasir::Error with a code thrown inside a route, reach the client with
// that code's row. docs/api.md, "Errors", is the same table for people.
#include <gtest/gtest.h>

#include <deque>

#include "base/check.h"
#include "daemon/api/api.h"
#include "daemon/api/api_internal.h"
#include "daemon/api/errors.h"
#include "test_api_fakes.h"

using namespace kvasir;
using nlohmann::json;

namespace {

struct Row {
  ErrorCode code;
  int status;
  const char* type;
  const char* code_string;  // "" → null in the body
};

// The table as docs/api.md states it.
const Row kRows[] = {
    {ErrorCode::kOk, 500, "server_error", ""},  // not an error: a bug if it reaches a client
    {ErrorCode::kInvalidArgument, 400, "invalid_request_error", ""},
    {ErrorCode::kContextLength, 400, "invalid_request_error", "context_length_exceeded"},
    {ErrorCode::kNotFound, 404, "invalid_request_error", "not_found"},
    {ErrorCode::kModelNotFound, 404, "invalid_request_error", "model_not_found"},
    {ErrorCode::kHeaderTooLarge, 431, "invalid_request_error", ""},
    {ErrorCode::kTimeout, 408, "invalid_request_error", ""},
    {ErrorCode::kUnauthenticated, 401, "invalid_request_error", "invalid_api_key"},
    {ErrorCode::kMethodNotAllowed, 405, "invalid_request_error", ""},
    {ErrorCode::kTooLarge, 413, "invalid_request_error", ""},
    {ErrorCode::kModelFormat, 500, "server_error", ""},
    {ErrorCode::kQueueFull, 429, "rate_limit_error", "queue_full"},
    {ErrorCode::kLoading, 503, "server_error", "not_ready"},
    {ErrorCode::kStopping, 503, "server_error", "stopping"},
    {ErrorCode::kAborted, 503, "server_error", "aborted"},
    {ErrorCode::kUnavailable, 503, "server_error", "unavailable"},
    {ErrorCode::kBatchRefused, 500, "server_error", ""},
    {ErrorCode::kStageFailed, 500, "server_error", ""},
    {ErrorCode::kBadResult, 500, "server_error", ""},
    {ErrorCode::kDevice, 500, "server_error", ""},
    {ErrorCode::kOutOfMemory, 500, "server_error", ""},
    {ErrorCode::kIo, 500, "server_error", ""},
    {ErrorCode::kInternal, 500, "server_error", ""},
};

const char* name(ErrorCode c) {
  return error_code_name(c);
}

// The "code" of an error body as the row spells it ("" for null).
std::string body_code(const json& error) {
  return error["code"].is_null() ? std::string() : error["code"].get<std::string>();
}

}  // namespace

TEST(Errors, EveryCodeHasItsRow) {
  for (const Row& r : kRows) {
    HttpError e = http_error(r.code);
    EXPECT_EQ(e.status, r.status) << name(r.code);
    EXPECT_EQ(e.type, r.type) << name(r.code);
    EXPECT_EQ(e.code, r.code_string) << name(r.code);
  }
}

// A code added to base/status.h without a row here fails this test.
TEST(Errors, NoCodeIsMissingFromTheTest) {
  for (int32_t v = 0; v < 1000; ++v) {
    auto c = static_cast<ErrorCode>(v);
    if (std::string_view(error_code_name(c)) == "unknown") continue;
    bool listed = false;
    for (const Row& r : kRows) listed |= r.code == c;
    EXPECT_TRUE(listed) << error_code_name(c) << " (" << v << ") has no row in kRows";
  }
}

TEST(Errors, ApiErrorAndItsBody) {
  ApiError e(ErrorCode::kContextLength, "too long", "max_tokens");
  EXPECT_EQ(e.code(), ErrorCode::kContextLength);
  EXPECT_EQ(e.status, 400);
  json j = error_body(e)["error"];
  EXPECT_EQ(j["message"], "too long");
  EXPECT_EQ(j["type"], "invalid_request_error");
  EXPECT_EQ(j["param"], "max_tokens");
  EXPECT_EQ(j["code"], "context_length_exceeded");
  json none = error_body(ApiError(ErrorCode::kInternal, "boom"))["error"];
  EXPECT_TRUE(none["param"].is_null());
  EXPECT_TRUE(none["code"].is_null());
}

// The status comes from the code; the words of the message change nothing.
TEST(Errors, StatusIsChosenByCodeNotText) {
  EXPECT_EQ(ApiError(ErrorCode::kInvalidArgument, "queue full; model is still loading").status,
            400);
  EXPECT_EQ(engine_error(Status(ErrorCode::kQueueFull, "bad request")).status, 429);
  EXPECT_EQ(engine_error(Status(ErrorCode::kDevice, "context length exceeded")).status, 500);
}

namespace {

// Records the one answer of a request.
class RecordingResponder : public Responder {
 public:
  void respond(int s, std::string, std::string b) override {
    status = s;
    body = std::move(b);
  }
  void start_stream(int s, std::string) override { status = s; }
  void write(std::string data) override { body += data; }
  void finish() override {}
  void on_close(std::function<void()>) override {}
  int status = 0;
  std::string body;
};

// A codec whose encode() throws a kvasir::Error with `code` (kOk: works).
class ThrowingCodec : public test::FakeCodec {
 public:
  ErrorCode code = ErrorCode::kOk;
  std::vector<int32_t> encode(const std::string& text, bool add, bool parse) const override {
    if (code != ErrorCode::kOk) KV_FAIL_CODE(code, "the codec fails with {}", name(code));
    return FakeCodec::encode(text, add, parse);
  }
};

// ApiService::handle without a transport: engine events posted to a queue
// run after the route returns, as the io thread would run them.
class ErrorsRouteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    codec_ = std::make_shared<ThrowingCodec>();
    ApiContext ctx;
    ctx.codec = codec_;
    ctx.model_name = "fake-model";
    api_ = std::make_shared<ApiService>(engine_, ctx, ApiOptions{},
                                        [this](std::function<void()> f) { posted_.push_back(f); });
  }
  void TearDown() override { api_->shutdown(); }

  std::shared_ptr<RecordingResponder> call(const std::string& method, const std::string& path,
                                           const std::string& body) {
    HttpRequest req;
    req.method = method;
    req.path = req.target = path;
    req.body = body;
    auto res = std::make_shared<RecordingResponder>();
    api_->handle(req, res);
    while (!posted_.empty()) {
      auto f = std::move(posted_.front());
      posted_.pop_front();
      f();
    }
    return res;
  }
  static void expect_row(const RecordingResponder& r, const Row& row, const std::string& what) {
    EXPECT_EQ(r.status, row.status) << what << ": " << r.body;
    json e = json::parse(r.body)["error"];
    EXPECT_EQ(e["type"], row.type) << what;
    EXPECT_EQ(body_code(e), row.code_string) << what;
    EXPECT_TRUE(e["message"].is_string()) << what;
  }

  test::FakeEngine engine_;
  std::shared_ptr<ThrowingCodec> codec_;
  std::shared_ptr<ApiService> api_;
  std::deque<std::function<void()>> posted_;
};

}  // namespace

// The engine refuses a request with each code: the client gets that row.
TEST_F(ErrorsRouteTest, EngineEventCodeChoosesTheStatus) {
  for (const Row& row : kRows) {
    if (row.code == ErrorCode::kOk) continue;  // ok refuses nothing
    engine_.refuse = Status(row.code, fmt::format("refused: {}", name(row.code)));
    auto r = call("POST", "/v1/completions", R"({"prompt":"hi","max_tokens":2})");
    expect_row(*r, row, name(row.code));
    json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["message"], fmt::format("refused: {}", name(row.code)));
    // Only a refusal of the request's own making names the prompt.
    bool prompt = row.code == ErrorCode::kInvalidArgument || row.code == ErrorCode::kContextLength;
    EXPECT_EQ(e["param"], prompt ? json("prompt") : json(nullptr)) << name(row.code);
  }
}

// A kvasir::Error thrown inside a route answers with its code's row, in the
// small routes and in a generation request alike.
TEST_F(ErrorsRouteTest, ThrownErrorCodeChoosesTheStatus) {
  for (const Row& row : kRows) {
    if (row.code == ErrorCode::kOk) continue;
    codec_->code = row.code;
    expect_row(*call("POST", "/tokenize", R"({"prompt":"hi"})"), row,
               std::string("/tokenize ") + name(row.code));
    expect_row(*call("POST", "/v1/completions", R"({"prompt":"hi"})"), row,
               std::string("/v1/completions ") + name(row.code));
  }
  codec_->code = ErrorCode::kOk;
  EXPECT_EQ(call("POST", "/tokenize", R"({"prompt":"hi"})")->status, 200);
  EXPECT_TRUE(engine_.submitted.empty());  // no failed encode reached the engine
}

// The route's own refusals, each by its code.
TEST_F(ErrorsRouteTest, RouteRefusals) {
  auto row = [](ErrorCode c) {
    for (const Row& r : kRows)
      if (r.code == c) return r;
    return Row{};
  };
  expect_row(*call("GET", "/nope", ""), row(ErrorCode::kNotFound), "unknown route");
  expect_row(*call("GET", "/v1/models/other", ""), row(ErrorCode::kModelNotFound), "unknown model");
  expect_row(*call("GET", "/v1/completions", ""), row(ErrorCode::kMethodNotAllowed), "method");
  expect_row(*call("POST", "/v1/completions", "{nope"), row(ErrorCode::kInvalidArgument), "json");
  engine_.is_ready = false;
  expect_row(*call("POST", "/v1/completions", R"({"prompt":"x"})"), row(ErrorCode::kLoading),
             "loading");
  engine_.is_ready = true;
  api_->begin_drain();
  expect_row(*call("POST", "/v1/completions", R"({"prompt":"x"})"), row(ErrorCode::kStopping),
             "stopping");
}
