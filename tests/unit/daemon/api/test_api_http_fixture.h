// The in-process HTTP fixture of the API tests (test_api_http*.cpp): the
// server and routes against a FAKE engine and codec (test_api_fakes.h), a
// raw HTTP client over the Unix socket or TCP.
#pragma once
// clang-format off
#include <utility>  // first: Boost 1.74 Asio uses std::exchange (GCC 12)
// clang-format on
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "daemon/api/api.h"
#include "daemon/api/http_server.h"
#include "test_api_client.h"
#include "test_api_fakes.h"

namespace kvasir::test {

using namespace std::chrono_literals;
namespace asio = boost::asio;


// A whole answer, for a service driven without the HTTP server.
struct Capture : Responder {
  int status = 0;
  std::string body;
  void respond(int st, std::string, std::string b) override { status = st, body = b; }
  void start_stream(int st, std::string) override { status = st; }
  void write(std::string) override {}
  void finish() override {}
  void on_close(std::function<void()>) override {}
};

class ApiHttpTest : public ::testing::Test {
 protected:
  // The fake model's chat template source (its facts are read off it once).
  virtual std::string template_source() const { return "{{ messages }}"; }
  void SetUp() override {
    static int n = 0;
    sock_path_ =
        "/tmp/kvasir-api-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".sock";
    ApiContext ctx;
    codec_ = std::make_shared<test::FakeCodec>();
    codec_->source = template_source();
    ctx.codec = codec_;
    ctx.grammar = grammar_;
    ctx.model_name = "fake-model";
    ctx.listed_aliases = {"fake model two"};  // as server.served_model_name's second name
    ctx.max_model_len = 4096;
    engine_.ring.inflight = 2;
    engine_.ring.in_ring = 1;
    engine_.ring.stages.resize(2);
    for (int i = 0; i < 2; ++i) {
      StageReport& s = engine_.ring.stages[size_t(i)];
      s.index = i;
      s.first_layer = i == 0 ? 0 : 15;
      s.last_layer = i == 0 ? 14 : 29;
      s.device = "cpu";
      s.busy_s = i == 0 ? 1.5 : 2.5;
      s.starved_s = i == 0 ? 0.25 : 0.5;
      s.blocked_s = i == 0 ? 0.125 : 0.75;
      s.batches = i == 0 ? 10 : 11;
      s.tokens = i == 0 ? 80 : 88;
      s.refused = uint64_t(i);
      s.state = i == 0 ? "busy" : "starved";
      s.state_s = i == 0 ? 0.125 : 0.5;
    }
    engine_.ring.stages[1].simd = "cpu:avx2 amx:no q4_1/decode:avx2";
    engine_.ring.stages[1].position = 1;
    engine_.ring.stages[1].handoff_s = 0.25;
    engine_.ring.stages[1].handoffs = 11;
    engine_.ring.return_s = 0.5;
    engine_.ring.returns = 11;
    engine_.ring.stages[0].n_experts = 4;  // a MoE stage; stage 1 stays dense
    engine_.ring.stages[0].routed = {5, 0, 3, 0};
    ApiOptions aopts;
    aopts.api_key = "sekrit";
    api_ = std::make_shared<ApiService>(
        engine_, ctx, aopts, [this](std::function<void()> f) { asio::post(io_, std::move(f)); });
    HttpServerOptions hopts;
    hopts.read_timeout = 700ms;
    hopts.write_timeout = 500ms;
    hopts.max_header = 16 * 1024;
    server_ = std::make_unique<HttpServer>(io_, hopts,
                                           [this](HttpRequest r, std::shared_ptr<Responder> s) {
                                             api_->handle(std::move(r), std::move(s));
                                           });
    server_->listen_unix(sock_path_);
    port_ = server_->listen_tcp("127.0.0.1:0");
    work_.emplace(asio::make_work_guard(io_));
    thread_ = std::thread([this] { io_.run(); });
  }
  void TearDown() override {
    api_->shutdown();
    server_->stop();
    work_.reset();
    thread_.join();
    server_.reset();
  }

  // Sends raw bytes on a fresh Unix-socket connection; reads to EOF.
  std::string raw(const std::string& bytes, bool tcp = false) {
    asio::io_context io;
    std::string out;
    auto exchange = [&](auto& s) {
      boost::system::error_code ec;
      asio::write(s, asio::buffer(bytes), ec);  // may fail if the server answers early
      char buf[65536];
      for (;;) {
        size_t n = s.read_some(asio::buffer(buf), ec);
        out.append(buf, n);
        if (ec) break;
      }
    };
    if (tcp) {
      asio::ip::tcp::socket s(io);
      s.connect({asio::ip::make_address("127.0.0.1"), port_});
      exchange(s);
    } else {
      asio::local::stream_protocol::socket s(io);
      s.connect(asio::local::stream_protocol::endpoint(sock_path_));
      exchange(s);
    }
    return out;
  }
  static std::string req(const std::string& method, const std::string& path,
                         const std::string& body = "", const std::string& extra = "") {
    std::string r = method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra;
    if (!body.empty() || method == "POST")
      r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n";
    return r + "\r\n" + body;
  }
  Resp get(const std::string& path) { return parse_resp(raw(req("GET", path))); }
  Resp post(const std::string& path, const std::string& body) {
    return parse_resp(raw(req("POST", path, body)));
  }

  test::FakeEngine engine_;
  std::shared_ptr<test::FakeCodec> codec_;
  std::shared_ptr<test::FakeGrammar> grammar_ = std::make_shared<test::FakeGrammar>();
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::shared_ptr<ApiService> api_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::string sock_path_;
  uint16_t port_ = 0;
};


}  // namespace kvasir::test
