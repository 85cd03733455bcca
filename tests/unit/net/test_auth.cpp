// tests/unit/net/test_auth.cpp — the cluster key file checks and the handshake.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "net/auth.h"

using namespace kvasir;
using namespace kvasir::net;
namespace fs = std::filesystem;

namespace {

ClusterKey key_of(uint8_t fill, size_t n = 32) {
  return ClusterKey(std::vector<uint8_t>(n, fill));
}

// Feeds each side's frames to the other, through the real encoder and
// decoder, until neither has anything to send. Returns the first failure.
struct Pair {
  Handshake conn;
  Handshake lis;
  std::vector<Payload> sent_by_conn;
  Pair(const ClusterKey& kc, const ClusterKey& kl)
      : conn(kc, {Side::kConnector, Role::kWorker, "worker-1"}),
        lis(kl, {Side::kListener, Role::kLeader, "leader"}) {}

  static Payload wire(const Payload& p) {           // encode, decode: what the peer sees
    static std::vector<std::vector<uint8_t>> keep;  // decoded views point here
    keep.emplace_back();
    encode_frame(p, 0, keep.back());
    Frame f;
    EXPECT_TRUE(decode_frame(keep.back(), {}, &f).ok());
    return f.payload;
  }

  Status run() {
    std::optional<Payload> to_lis = conn.start(), to_conn;
    EXPECT_FALSE(lis.start().has_value());
    for (int i = 0; i < 8 && (to_lis || to_conn); ++i) {
      if (to_lis) {
        sent_by_conn.push_back(*to_lis);
        Payload p = wire(*to_lis);
        to_lis.reset();
        Status s = lis.on_frame(p, &to_conn);
        if (!s.ok()) return s;
      } else {
        Payload p = wire(*to_conn);
        to_conn.reset();
        Status s = conn.on_frame(p, &to_lis);
        if (!s.ok()) return s;
      }
    }
    return Status();
  }
};

class KeyFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("kvasir_key_{}", ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, size_t n, mode_t mode) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << std::string(n, 'k');
    ::chmod(p.c_str(), mode);
    return p.string();
  }
  fs::path dir_;
};

}  // namespace

TEST_F(KeyFile, GoodKeyLoads) {
  ClusterKey k;
  Status s = load_cluster_key(write("key", 32, 0600), &k);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(k.bytes().size(), 32u);
  ASSERT_TRUE(load_cluster_key(write("big", 4096, 0600), &k).ok());
  EXPECT_EQ(k.bytes().size(), 4096u);
}

TEST_F(KeyFile, ModeMustBeExactly0600) {
  ClusterKey k;
  for (mode_t m : {0644, 0640, 0604, 0400, 0700, 0660}) {
    const std::string p = write(fmt::format("key{:o}", m), 32, m);
    Status s = load_cluster_key(p, &k);
    EXPECT_EQ(s.code(), ErrorCode::kUnauthenticated) << m;
    EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(fmt::format("mode {:04o}", m)), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("head -c 32 /dev/urandom"), std::string::npos);
  }
}

TEST_F(KeyFile, SizeBounds) {
  ClusterKey k;
  Status s = load_cluster_key(write("short", 31, 0600), &k);
  EXPECT_EQ(s.code(), ErrorCode::kUnauthenticated);
  EXPECT_NE(s.message().find("31 bytes, must be 32..4096"), std::string::npos) << s.message();
  EXPECT_EQ(load_cluster_key(write("empty", 0, 0600), &k).code(), ErrorCode::kUnauthenticated);
  EXPECT_EQ(load_cluster_key(write("long", 4097, 0600), &k).code(), ErrorCode::kUnauthenticated);
}

TEST_F(KeyFile, NotARegularFileOrMissing) {
  ClusterKey k;
  fs::create_directories(dir_ / "adir");
  ::chmod((dir_ / "adir").c_str(), 0600);
  Status s = load_cluster_key((dir_ / "adir").string(), &k);
  EXPECT_EQ(s.code(), ErrorCode::kUnauthenticated);
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.message();
  s = load_cluster_key((dir_ / "nothing").string(), &k);
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_NE(s.message().find("nothing"), std::string::npos);
  // A symbolic link to a good key is followed (a Kubernetes Secret is mounted so).
  fs::create_symlink(write("target", 32, 0600), dir_ / "link");
  EXPECT_TRUE(load_cluster_key((dir_ / "link").string(), &k).ok());
}

TEST_F(KeyFile, OwnedByAnotherUserRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  const std::string p = write("theirs", 32, 0600);
  ASSERT_EQ(::chown(p.c_str(), 65534, 65534), 0);
  ClusterKey k;
  Status s = load_cluster_key(p, &k);
  EXPECT_EQ(s.code(), ErrorCode::kUnauthenticated);
  EXPECT_NE(s.message().find("owned by uid 65534"), std::string::npos) << s.message();
}

TEST(Handshake, SameKeySucceedsBothWays) {
  const ClusterKey k = key_of(7);
  Pair p(k, k);
  Status s = p.run();
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(p.conn.done());
  EXPECT_TRUE(p.lis.done());
  EXPECT_EQ(p.lis.peer_name(), "worker-1");
  EXPECT_EQ(p.lis.peer_role(), Role::kWorker);
  EXPECT_EQ(p.conn.peer_role(), Role::kLeader);
  // Neither side ever sends key material: no frame carries the key's bytes.
  for (const Payload& f : p.sent_by_conn) {
    std::vector<uint8_t> b;
    encode_frame(f, 0, b);
    EXPECT_EQ(std::search(b.begin(), b.end(), k.bytes().begin(), k.bytes().end()), b.end());
  }
}

TEST(Handshake, WrongKeyRefusedByTheListener) {
  Pair p(key_of(1), key_of(2));
  Status s = p.run();
  EXPECT_EQ(s.code(), ErrorCode::kUnauthenticated);
  EXPECT_NE(s.message().find("worker-1"), std::string::npos) << s.message();
  EXPECT_TRUE(p.lis.failed());
  EXPECT_FALSE(p.conn.done());
}

TEST(Handshake, StaleKeyRefusedTheSameWay) {
  // After a rotation the worker still holds the key before it: the same
  // refusal as any wrong key (the listener cannot tell, and should not say).
  const ClusterKey old_key = key_of(1, 40), new_key = key_of(9, 40);
  Pair stale(old_key, new_key), wrong(key_of(3, 40), new_key);
  Status a = stale.run(), b = wrong.run();
  EXPECT_EQ(a.code(), ErrorCode::kUnauthenticated);
  EXPECT_EQ(a.to_string(), b.to_string());
}

TEST(Handshake, ConnectorRefusesAListenerWithoutTheKey) {
  // A rogue listener that answers the Hello and then sends a made-up proof.
  const ClusterKey k = key_of(5);
  Handshake conn(k, {Side::kConnector, Role::kWorker, "w"});
  std::optional<Payload> reply;
  ASSERT_TRUE(conn.start().has_value());
  Challenge c;
  c.nonce = random_nonce();
  ASSERT_TRUE(conn.on_frame(c, &reply).ok());
  ASSERT_TRUE(reply && std::holds_alternative<Proof>(*reply));
  Proof forged;
  forged.mac =
      handshake_proof(key_of(6), Side::kListener, Role::kLeader, c.nonce, {}, kWireVersion);
  Status s = conn.on_frame(forged, &reply);
  EXPECT_EQ(s.code(), ErrorCode::kUnauthenticated);
  EXPECT_FALSE(conn.done());
  ASSERT_TRUE(reply && std::holds_alternative<Refuse>(*reply));
}

TEST(Handshake, ReplayedProofFromAnEarlierSessionRefused) {
  const ClusterKey k = key_of(4);
  Pair first(k, k);
  ASSERT_TRUE(first.run().ok());
  const Payload old_hello = first.sent_by_conn.at(0), old_proof = first.sent_by_conn.at(1);
  // An eavesdropper replays the recorded Hello and Proof to a new session:
  // the listener's nonce is fresh, so the old proof answers nothing.
  Handshake lis(k, {Side::kListener, Role::kLeader, "leader"});
  std::optional<Payload> reply;
  EXPECT_FALSE(lis.start().has_value());
  ASSERT_TRUE(lis.on_frame(old_hello, &reply).ok());
  Status s = lis.on_frame(old_proof, &reply);
  EXPECT_EQ(s.code(), ErrorCode::kUnauthenticated);
  EXPECT_TRUE(lis.failed());
}

TEST(Handshake, ReflectedListenerProofRefused) {
  // A peer without the key cannot pass the listener's own proof off as its
  // own: the labels differ per direction.
  const ClusterKey k = key_of(4);
  const Nonce nc = random_nonce(), nl = random_nonce();
  EXPECT_NE(handshake_proof(k, Side::kConnector, Role::kWorker, nc, nl, 1),
            handshake_proof(k, Side::kListener, Role::kWorker, nc, nl, 1));
  EXPECT_NE(handshake_proof(k, Side::kConnector, Role::kWorker, nc, nl, 1),
            handshake_proof(k, Side::kConnector, Role::kWorker, nc, nl, 2));
  EXPECT_NE(handshake_proof(k, Side::kConnector, Role::kWorker, nc, nl, 1),
            handshake_proof(k, Side::kConnector, Role::kLeader, nc, nl, 1));
}

TEST(Handshake, OldWireVersionRefusedNamingBoth) {
  const ClusterKey k = key_of(4);
  Handshake lis(k, {Side::kListener, Role::kLeader, "leader"});
  lis.start();
  Hello h;
  h.wire_version = kWireVersion - 1, h.name = "old-worker", h.nonce = random_nonce();
  std::optional<Payload> reply;
  Status s = lis.on_frame(h, &reply);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find(fmt::format("wire version {}", kWireVersion - 1)), std::string::npos);
  EXPECT_NE(s.message().find(fmt::format("version {}", kWireVersion)), std::string::npos);
  ASSERT_TRUE(reply && std::holds_alternative<Refuse>(*reply));
  EXPECT_TRUE(lis.failed());
}

TEST(Handshake, BatchBeforeTheHandshakeFinishedRefused) {
  const ClusterKey k = key_of(4);
  for (int stage = 0; stage < 2; ++stage) {
    Handshake lis(k, {Side::kListener, Role::kLeader, "leader"});
    lis.start();
    std::optional<Payload> reply;
    if (stage == 1) {  // after the Hello, before the Proof
      Hello h;
      h.nonce = random_nonce();
      ASSERT_TRUE(lis.on_frame(h, &reply).ok());
    }
    Status s = lis.on_frame(Batch{}, &reply);
    EXPECT_EQ(s.code(), ErrorCode::kUnauthenticated);
    EXPECT_NE(s.message().find("batch frame before the cluster key handshake finished"),
              std::string::npos)
        << s.message();
    EXPECT_TRUE(lis.failed());
    // ...and nothing afterwards: a failed handshake stays failed.
    EXPECT_FALSE(lis.on_frame(Proof{}, &reply).ok());
    EXPECT_FALSE(lis.done());
  }
}

TEST(Handshake, PeerRefusalCarriesItsCode) {
  const ClusterKey k = key_of(4);
  Handshake conn(k, {Side::kConnector, Role::kWorker, "w"});
  conn.start();
  std::optional<Payload> reply;
  Status s = conn.on_frame(Refuse{ErrorCode::kUnauthenticated, "no key"}, &reply);
  EXPECT_EQ(s.code(), ErrorCode::kUnauthenticated);
  EXPECT_NE(s.message().find("no key"), std::string::npos);
  EXPECT_FALSE(reply.has_value());
}

TEST(Handshake, RefusalWithAnOkCodeStillFails) {
  const ClusterKey k = key_of(4);
  Handshake conn(k, {Side::kConnector, Role::kWorker, "w"});
  conn.start();
  std::optional<Payload> reply;
  EXPECT_EQ(conn.on_frame(Refuse{ErrorCode::kOk, "ok?"}, &reply).code(), ErrorCode::kInternal);
  EXPECT_TRUE(conn.failed());
}

TEST(Handshake, EchoedNonceRefused) {
  const ClusterKey k = key_of(4);
  const Nonce n = random_nonce();
  Handshake conn(k, {Side::kConnector, Role::kWorker, "w"}, n);
  conn.start();
  Challenge c;
  c.nonce = n;
  std::optional<Payload> reply;
  EXPECT_EQ(conn.on_frame(c, &reply).code(), ErrorCode::kUnauthenticated);
}
