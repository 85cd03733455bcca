// tests/unit/net/test_ucx_link.cpp — one UCX link over loopback: the
// handshake, 1,000 boundary-sized Batch frames in order, a peer killed
// mid-stream, a rogue peer without the key, and the limits on the wire.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "net/ucx_link.h"

using namespace kvasir;
using namespace kvasir::net;
using Clock = std::chrono::steady_clock;

namespace {

const ClusterKey& good_key() {
  static const ClusterKey k(std::vector<uint8_t>(32, 0x42));
  return k;
}

LinkOptions leader_opts() {
  LinkOptions o;
  o.role = Role::kLeader, o.name = "leader";
  return o;
}
LinkOptions worker_opts(const std::string& name = "worker-1") {
  LinkOptions o;
  o.role = Role::kWorker, o.name = name;
  return o;
}

std::unique_ptr<UcxListener> listen_any(LinkOptions o = leader_opts()) {
  std::unique_ptr<UcxListener> l;
  Status s = UcxListener::listen("127.0.0.1", 0, good_key(), o, &l);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return l;
}

// [tokens, hidden] f32 whose every value depends on the batch id.
void fill_boundary(std::vector<float>& v, uint64_t id) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = float((i * 31 + id * 7) % 1000) * 0.25f;
}

ByteView bytes_of(const std::vector<float>& v) {
  return ByteView(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4);
}

Batch batch_of(uint64_t id, const std::vector<float>& boundary, uint32_t tokens, uint32_t hidden,
               const std::vector<uint8_t>& desc) {
  Batch b;
  b.msg_kind = 1, b.msg_version = 1, b.batch_id = id, b.slot = uint32_t(id % 4);
  b.n_rows = 1, b.n_tokens = int32_t(tokens), b.descriptor = desc;
  b.boundary_tokens = tokens, b.hidden = hidden, b.boundary = bytes_of(boundary);
  return b;
}

}  // namespace

TEST(UcxLink, ThousandBoundariesArriveIntactAndInOrder) {
  constexpr uint32_t kTokens = 256, kHidden = 576;  // 576 KiB a frame
  constexpr int kFrames = 1000;
  auto listener = listen_any();
  ASSERT_TRUE(listener);
  const uint16_t port = listener->port();
  Status sender_status;
  std::thread sender([&] {
    std::unique_ptr<UcxLink> link;
    sender_status = UcxLink::connect("127.0.0.1", port, good_key(), worker_opts(), &link);
    if (!sender_status.ok()) return;
    std::vector<float> bnd(size_t(kTokens) * kHidden);
    const std::vector<uint8_t> desc(200, 3);
    for (int i = 1; i <= kFrames && sender_status.ok(); ++i) {
      fill_boundary(bnd, uint64_t(i));
      sender_status = link->send(batch_of(uint64_t(i), bnd, kTokens, kHidden, desc));
    }
    Frame ack;  // wait for the receiver's Result before closing
    if (sender_status.ok()) sender_status = link->recv(10000, &ack);
    if (sender_status.ok()) sender_status = link->close();
  });
  std::unique_ptr<UcxLink> link;
  Status s = listener->accept(5000, &link);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(link->peer_name(), "worker-1");
  std::vector<float> want(size_t(kTokens) * kHidden);
  int bad = 0;
  for (int i = 1; i <= kFrames; ++i) {
    Frame f;
    s = link->recv(5000, &f);
    ASSERT_TRUE(s.ok()) << "frame " << i << ": " << s.to_string();
    ASSERT_EQ(f.header.type, FrameType::kBatch);
    const auto& b = std::get<Batch>(f.payload);
    EXPECT_EQ(b.batch_id, uint64_t(i));
    EXPECT_EQ(b.descriptor.size(), 200u);
    fill_boundary(want, uint64_t(i));
    bad += b.boundary.size() != want.size() * 4 ||
           std::memcmp(b.boundary.data(), want.data(), want.size() * 4) != 0;
  }
  EXPECT_EQ(bad, 0);
  const std::vector<uint8_t> res(64, 1);
  ASSERT_TRUE(link->send(Result{uint64_t(kFrames), 0, res}).ok());
  Frame bye;
  s = link->recv(5000, &bye);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(bye.header.type, FrameType::kBye);
  sender.join();
  EXPECT_TRUE(sender_status.ok()) << sender_status.to_string();
}

TEST(UcxLink, PeerKilledMidStreamEndsTheLinkQuickly) {
  // The child is forked before this process touches UCX in this test, and
  // learns the port through a pipe; it connects and streams until killed.
  int pipe_fd[2];
  ASSERT_EQ(::pipe(pipe_fd), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fd[1]);
    uint16_t port = 0;
    if (::read(pipe_fd[0], &port, sizeof port) != sizeof port) ::_exit(2);
    std::unique_ptr<UcxLink> link;
    if (!UcxLink::connect("127.0.0.1", port, good_key(), worker_opts("doomed"), &link).ok())
      ::_exit(3);
    std::vector<float> bnd(8 * 576);
    const std::vector<uint8_t> desc(16, 1);
    for (uint64_t i = 1;; ++i)
      if (!link->send(batch_of(i, bnd, 8, 576, desc)).ok()) ::_exit(4);
  }
  ::close(pipe_fd[0]);
  auto listener = listen_any();
  ASSERT_TRUE(listener);
  const uint16_t port = listener->port();
  ASSERT_EQ(::write(pipe_fd[1], &port, sizeof port), ssize_t(sizeof port));
  ::close(pipe_fd[1]);
  std::unique_ptr<UcxLink> link;
  Status s = listener->accept(5000, &link);
  ASSERT_TRUE(s.ok()) << s.to_string();
  Frame f;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(link->recv(5000, &f).ok());
  ::kill(child, SIGKILL);
  int wstatus = 0;
  ::waitpid(child, &wstatus, 0);
  const auto t0 = Clock::now();
  for (int i = 0; s.ok() && i < 1000000; ++i) s = link->recv(5000, &f);  // drain what was sent
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(s.code(), ErrorCode::kIo) << s.to_string();
  EXPECT_NE(s.message().find("doomed"), std::string::npos) << s.message();
  EXPECT_LT(waited, 3.0);
  EXPECT_TRUE(link->failed());
  EXPECT_EQ(link->send(Ping{1}).code(), ErrorCode::kIo);  // stays failed, no crash
}

TEST(UcxLink, RogueWithoutTheKeyRefusedAndTheNextPeerAccepted) {
  auto listener = listen_any();
  ASSERT_TRUE(listener);
  const uint16_t port = listener->port();
  Status rogue_status, good_status;
  int64_t pong = 0;
  std::thread peers([&] {
    const ClusterKey wrong(std::vector<uint8_t>(32, 0x13));
    std::unique_ptr<UcxLink> link;
    rogue_status = UcxLink::connect("127.0.0.1", port, wrong, worker_opts("rogue"), &link);
    good_status = UcxLink::connect("127.0.0.1", port, good_key(), worker_opts("good"), &link);
    if (!good_status.ok()) return;
    good_status = link->send(Ping{1234});
    Frame f;
    if (good_status.ok()) good_status = link->recv(5000, &f);
    if (good_status.ok() && f.header.type == FrameType::kPong)
      pong = std::get<Pong>(f.payload).sent_ns;
    (void)link->close();
  });
  std::unique_ptr<UcxLink> link;
  Status s = listener->accept(5000, &link);
  EXPECT_EQ(s.code(), ErrorCode::kUnauthenticated) << s.to_string();
  EXPECT_NE(s.message().find("rogue"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("peer at 127.0.0.1:"), std::string::npos) << s.message();
  EXPECT_FALSE(link);
  s = listener->accept(5000, &link);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(link->peer_name(), "good");
  Frame f;
  s = link->recv(5000, &f);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(f.header.type, FrameType::kPing);
  ASSERT_TRUE(link->send(Pong{std::get<Ping>(f.payload).sent_ns}).ok());
  ASSERT_TRUE(link->recv(5000, &f).ok());  // the Bye
  peers.join();
  EXPECT_EQ(rogue_status.code(), ErrorCode::kUnauthenticated) << rogue_status.to_string();
  EXPECT_TRUE(good_status.ok()) << good_status.to_string();
  EXPECT_EQ(pong, 1234);
}

TEST(UcxLink, SilentPeerTimesOutTheHandshake) {
  LinkOptions o = leader_opts();
  o.handshake_timeout_ms = 300;
  auto listener = listen_any(o);
  ASSERT_TRUE(listener);
  const uint16_t port = listener->port();
  // A connector whose handshake window closes before the listener answers:
  // the listener sits in accept() only after the connector gave up.
  LinkOptions w = worker_opts();
  w.handshake_timeout_ms = 200;
  Status conn_status;
  std::thread peer([&] {
    std::unique_ptr<UcxLink> link;
    conn_status = UcxLink::connect("127.0.0.1", port, good_key(), w, &link);
  });
  peer.join();
  EXPECT_EQ(conn_status.code(), ErrorCode::kTimeout) << conn_status.to_string();
  std::unique_ptr<UcxLink> link;
  const auto t0 = Clock::now();
  Status s = listener->accept(2000, &link);  // the Hello arrived, then nothing: refused in time
  EXPECT_FALSE(s.ok());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.5);
}

TEST(UcxLink, OversizeFrameRefusedAndTimeoutKeepsTheLink) {
  LinkOptions o = leader_opts();
  o.limits.max_frame_bytes = 64 * 1024;
  auto listener = listen_any(o);
  ASSERT_TRUE(listener);
  const uint16_t port = listener->port();
  Status st;
  ErrorCode refused = ErrorCode::kOk;
  std::thread peer([&] {
    std::unique_ptr<UcxLink> link;
    st = UcxLink::connect("127.0.0.1", port, good_key(), worker_opts(), &link);
    if (!st.ok()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    st = link->send(Ping{5});
    const std::vector<uint8_t> plan(100 * 1024, 7);
    if (st.ok()) st = link->send(Plan{plan});
    Frame f;  // the listener says why it drops the link
    if (st.ok()) st = link->recv(2000, &f);
    if (st.ok() && f.header.type == FrameType::kRefuse) refused = std::get<Refuse>(f.payload).code;
  });
  std::unique_ptr<UcxLink> link;
  ASSERT_TRUE(listener->accept(5000, &link).ok());
  Frame f;
  EXPECT_EQ(link->recv(50, &f).code(), ErrorCode::kTimeout);  // nothing yet
  Status s = link->recv(5000, &f);  // the read stayed posted: the Ping arrives whole
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(std::get<Ping>(f.payload).sent_ns, 5);
  s = link->recv(5000, &f);
  EXPECT_EQ(s.code(), ErrorCode::kTooLarge) << s.to_string();
  link.reset();
  peer.join();
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(refused, ErrorCode::kTooLarge);
}

TEST(UcxLink, NothingListeningIsAnErrorNotAHang) {
  uint16_t port = 0;
  {
    auto l = listen_any();  // a port that was just free, now closed again
    ASSERT_TRUE(l);
    port = l->port();
  }
  LinkOptions w = worker_opts();
  w.handshake_timeout_ms = 2000;
  std::unique_ptr<UcxLink> link;
  const auto t0 = Clock::now();
  Status s = UcxLink::connect("127.0.0.1", port, good_key(), w, &link);
  EXPECT_FALSE(s.ok());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3.0);
}

TEST(UcxLink, PlainTcpGarbageDoesNotStopTheListener) {
  // A port scanner, or anything not speaking UCX, connects and writes
  // junk: the listener must survive it and take the next real peer.
  auto listener = listen_any();
  ASSERT_TRUE(listener);
  const uint16_t port = listener->port();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET, sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  const std::string junk(1024, 'J');
  ASSERT_EQ(::write(fd, junk.data(), junk.size()), ssize_t(junk.size()));
  std::unique_ptr<UcxLink> link;
  EXPECT_FALSE(listener->accept(300, &link).ok());  // nothing valid came in
  ::close(fd);
  Status good;
  std::thread peer([&] {
    std::unique_ptr<UcxLink> l;
    good = UcxLink::connect("127.0.0.1", port, good_key(), worker_opts("after-junk"), &l);
    if (good.ok()) good = l->close();
  });
  Status s;
  for (int i = 0; i < 3 && !link; ++i) s = listener->accept(5000, &link);
  peer.join();
  ASSERT_TRUE(link) << s.to_string();
  EXPECT_EQ(link->peer_name(), "after-junk");
  EXPECT_TRUE(good.ok()) << good.to_string();
}
