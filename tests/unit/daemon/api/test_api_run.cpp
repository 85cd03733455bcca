// run_api as the daemon runs it (daemon/api/api.h), against a FAKE engine
// (test_api_fakes.h): the server.* settings reach the transport (read
// timeout, connection limit), and the graceful stop — new requests 503
// "stopping" while running ones finish, the drain timeout and a second stop
// signal end the rest with an error event (never a silent cut), the socket
// file is gone afterwards. The real daemon's stop is tests/integration/test_drain.sh.
// clang-format off
#include <utility>  // first: Boost 1.74 Asio uses std::exchange (GCC 12)
// clang-format on
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <filesystem>
#include <future>
#include <thread>

#include "daemon/api/api.h"
#include "daemon/config/config.h"
#include "test_api_client.h"
#include "test_api_fakes.h"

using namespace kvasir;
using namespace std::chrono_literals;
using nlohmann::json;
using test::parse_resp;
using test::Resp;
using test::sse_events;
namespace asio = boost::asio;
using Socket = asio::local::stream_protocol::socket;
using Clock = std::chrono::steady_clock;

namespace {

std::string post_req(const std::string& body, bool close = true) {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" +
         std::string(close ? "Connection: close\r\n" : "") +
         "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

std::string read_all(Socket& s) {
  std::string out;
  boost::system::error_code ec;
  char buf[4096];
  for (;;) {
    size_t n = s.read_some(asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
  }
  return out;
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

class RunApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    cfg_.server.socket = "/tmp/kvasir-door-runapi-" + std::to_string(::getpid()) + "-" +
                         std::to_string(n++) + ".sock";
    cfg_.server.drain_timeout = 10;
  }
  void TearDown() override {
    stop_ = true;
    abort_ = true;
    if (thread_.joinable()) thread_.join();
  }
  void start() {
    ApiContext ctx;
    ctx.codec = std::make_shared<test::FakeCodec>();
    ctx.model_name = "fake";
    ctx.stop = &stop_;
    ctx.abort = &abort_;
    auto listening = std::make_shared<std::promise<void>>();
    ctx.on_listening = [listening] { listening->set_value(); };
    ctx.on_drained = [this](const std::string& line) { drained_line_ = line; };
    thread_ = std::thread([this, ctx] { rc_ = run_api(cfg_, engine_, ctx); });
    ASSERT_EQ(listening->get_future().wait_for(5s), std::future_status::ready);
  }
  std::unique_ptr<Socket> connect() {
    auto s = std::make_unique<Socket>(io_);
    s->connect(asio::local::stream_protocol::endpoint(cfg_.server.socket));
    return s;
  }
  Resp call(const std::string& request) {
    auto s = connect();
    asio::write(*s, asio::buffer(request));
    return parse_resp(read_all(*s));
  }
  int join() {
    thread_.join();
    return rc_;
  }

  Config cfg_;
  test::FakeEngine engine_;
  std::atomic<bool> stop_{false}, abort_{false};
  std::thread thread_;
  int rc_ = -1;
  std::string drained_line_;
  asio::io_context io_;
};

// A request running at stop finishes; the socket file is removed after.
TEST_F(RunApiTest, DrainsOnStop) {
  engine_.delay_ms = 20;
  start();
  auto s = connect();
  asio::write(*s, asio::buffer(post_req(R"({"prompt":"x","max_tokens":20,"ignore_eos":true})")));
  std::this_thread::sleep_for(100ms);
  stop_ = true;  // mid-generation
  Resp r = parse_resp(read_all(*s));
  EXPECT_EQ(join(), 0);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.j()["usage"]["completion_tokens"], 20);
  EXPECT_FALSE(std::filesystem::exists(cfg_.server.socket));
  EXPECT_NE(drained_line_.find("1 request(s) finished"), std::string::npos) << drained_line_;
}

// While draining, the daemon still answers: new generations and /health get
// 503 "stopping"; the stream that was running ends normally with [DONE].
TEST_F(RunApiTest, DrainRefusesNewRequestsAndFinishesStreams) {
  engine_.delay_ms = 25;
  start();
  auto s = connect();
  asio::write(
      *s,
      asio::buffer(post_req(R"({"prompt":"x","max_tokens":40,"ignore_eos":true,"stream":true})")));
  std::this_thread::sleep_for(150ms);
  stop_ = true;
  std::this_thread::sleep_for(150ms);  // the poll (100 ms) has seen it
  Resp fresh = call(post_req(R"({"prompt":"y","max_tokens":2})"));
  EXPECT_EQ(fresh.status, 503) << fresh.body;
  EXPECT_EQ(fresh.j()["error"]["code"], "stopping");
  Resp health = call("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.j()["status"], "stopping");

  Resp r = parse_resp(read_all(*s));
  EXPECT_EQ(join(), 0);
  bool done = false;
  auto ev = sse_events(r.body, &done);
  ASSERT_FALSE(ev.empty());
  EXPECT_TRUE(done);
  EXPECT_EQ(ev.back()["choices"][0]["finish_reason"], "length") << r.body;
  for (const auto& e : ev) EXPECT_FALSE(e.contains("error")) << e.dump();
  EXPECT_FALSE(std::filesystem::exists(cfg_.server.socket));
}

// server.drain_timeout passes: the running stream ends with an error event
// naming why, then [DONE]; the engine is told to cancel; run_api returns 1.
TEST_F(RunApiTest, DrainTimeoutEndsStreamsWithAnErrorEvent) {
  cfg_.server.drain_timeout = 0.3;
  engine_.delay_ms = 20;
  start();
  auto s = connect();
  asio::write(*s, asio::buffer(post_req(
                      R"({"prompt":"x","max_tokens":5000,"ignore_eos":true,"stream":true})")));
  std::this_thread::sleep_for(100ms);
  auto t0 = Clock::now();
  stop_ = true;
  Resp r = parse_resp(read_all(*s));
  EXPECT_LT(since(t0), 3.0);
  EXPECT_EQ(join(), 1);
  bool done = false;
  auto ev = sse_events(r.body, &done);
  ASSERT_FALSE(ev.empty()) << r.body;
  EXPECT_TRUE(done);
  ASSERT_TRUE(ev.back().contains("error")) << ev.back().dump();
  EXPECT_EQ(ev.back()["error"]["code"], "aborted");
  EXPECT_NE(ev.back()["error"]["message"].get<std::string>().find("drain_timeout"),
            std::string::npos);
  for (int i = 0; i < 100 && engine_.n_cancelled() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(engine_.n_cancelled(), 1u);
  EXPECT_NE(drained_line_.find("1 aborted"), std::string::npos) << drained_line_;
  EXPECT_FALSE(std::filesystem::exists(cfg_.server.socket));
}

// A second stop signal (ctx.abort) ends the drain at once: a stream gets the
// error event, a whole (non-stream) request a 503 error body.
TEST_F(RunApiTest, SecondSignalAbortsTheDrain) {
  cfg_.server.drain_timeout = 60;
  engine_.delay_ms = 20;
  start();
  auto s1 = connect(), s2 = connect();
  asio::write(*s1, asio::buffer(post_req(
                       R"({"prompt":"x","max_tokens":5000,"ignore_eos":true,"stream":true})")));
  asio::write(*s2, asio::buffer(post_req(R"({"prompt":"x","max_tokens":5000,"ignore_eos":true})")));
  std::this_thread::sleep_for(100ms);
  stop_ = true;
  std::this_thread::sleep_for(300ms);
  auto t0 = Clock::now();
  abort_ = true;
  Resp streamed = parse_resp(read_all(*s1));
  Resp whole = parse_resp(read_all(*s2));
  EXPECT_LT(since(t0), 3.0);
  EXPECT_EQ(join(), 1);
  bool done = false;
  auto ev = sse_events(streamed.body, &done);
  ASSERT_FALSE(ev.empty());
  EXPECT_TRUE(done);
  ASSERT_TRUE(ev.back().contains("error")) << streamed.body;
  EXPECT_NE(ev.back()["error"]["message"].get<std::string>().find("second stop signal"),
            std::string::npos);
  EXPECT_EQ(whole.status, 503) << whole.body;
  EXPECT_EQ(whole.j()["error"]["code"], "aborted");
  EXPECT_FALSE(std::filesystem::exists(cfg_.server.socket));
}

// server.read_timeout reaches the transport: a client that sends half a
// request and then nothing is answered 408 and cut near the timeout.
TEST_F(RunApiTest, ReadTimeoutFromConfigCutsAnUnfinishedRequest) {
  cfg_.server.read_timeout = 0.4;
  start();
  auto s = connect();
  auto t0 = Clock::now();
  asio::write(*s, asio::buffer(std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                           "Content-Length: 100\r\n\r\n{\"prompt\":")));
  Resp r = parse_resp(read_all(*s));  // never sends the rest
  double secs = since(t0);
  EXPECT_EQ(r.status, 408);
  EXPECT_GE(secs, 0.3);
  EXPECT_LT(secs, 2.5);  // the default (30 s) would hang here
  EXPECT_EQ(call("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").status, 200);
}

// server.max_connections: beyond it a new connection gets 503 (JSON, naming
// the setting) and is closed; once one closes, a new one is served.
TEST_F(RunApiTest, MaxConnectionsRefusesExtraConnectionsCleanly) {
  cfg_.server.max_connections = 2;
  start();
  auto a = connect(), b = connect();
  std::this_thread::sleep_for(100ms);  // both accepted (idle: waiting for a request)
  Resp refused = call("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.j()["error"]["message"].get<std::string>().find("server.max_connections"),
            std::string::npos);
  EXPECT_NE(refused.head.find("Retry-After"), std::string::npos);
  a.reset();  // closes: the server notices EOF
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(call("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").status, 200);
}

// Client bytes that are not UTF-8 end up in an error message: the body is
// still valid JSON (dump with error_handler_t::replace), the server lives on.
TEST_F(RunApiTest, NonUtf8InErrorTextIsReplacedNotThrown) {
  start();
  Resp r = call("GET /v1/\xff\xfe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.status, 404);
  json j = json::parse(r.body);  // throws on invalid UTF-8
  EXPECT_NE(j["error"]["message"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_EQ(call("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").status, 200);
}

}  // namespace
