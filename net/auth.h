// net/auth.h — the cluster key and the mutual handshake of a host link.
//
// Every host of an instance holds the same cluster key file (0600, owned by
// the user kvasird runs as, 32..4096 bytes: `head -c 32 /dev/urandom > key;
// chmod 600 key`). Before any plan or hidden state crosses a link, both
// ends prove they hold it, without sending it:
//
//   connector → listener  Hello      {wire version, role, name, nonce_c}
//   listener  → connector Challenge  {wire version, role, nonce_l}
//   connector → listener  Proof      HMAC(key, "kvasir-net connector" || role_c || nonce_c ||
//   nonce_l || version) listener  → connector Proof      HMAC(key, "kvasir-net listener"  || role_l
//   || nonce_l || nonce_c || version)
//
// The nonces are fresh random bytes (RAND_bytes) on each side, so a proof
// recorded from an earlier session does not answer this one; the labels
// differ per direction, so a peer cannot reflect the listener's proof back;
// the connector proves first, so the listener never computes a proof for a
// peer that has not proven itself. Proofs are compared in constant time
// (CRYPTO_memcmp). A wrong key and a stale one (the peer still holds the
// key before a rotation) fail the same way: kUnauthenticated, and a Refuse
// to the peer that says no more than that.
//
// What the key does not do: it encrypts nothing. Hidden states and plans
// cross the link in the clear (docs/multi-host.md, "Security model").
//
// Handshake is a pure state machine over decoded frames (no sockets), so
// the tests drive every case directly and the link (net/ucx_link.h) only
// moves its frames.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "net/wire.h"

namespace kvasir::net {

inline constexpr size_t kMinKeyBytes = 32;
inline constexpr size_t kMaxKeyBytes = 4096;

// The key material, wiped when destroyed.
class ClusterKey {
 public:
  ClusterKey() = default;
  explicit ClusterKey(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  ClusterKey(const ClusterKey&) = default;
  ClusterKey& operator=(const ClusterKey&) = default;
  ~ClusterKey();
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Reads a key file: a regular file (a symbolic link to one is followed, as
// a Kubernetes Secret mounts it), owned by the effective user, mode exactly
// 0600, 32..4096 bytes. Refusals (kUnauthenticated; kNotFound, kIo when it
// cannot be read) name the file and what is wrong with it.
Status load_cluster_key(const std::string& path, ClusterKey* out);

// The proof one side sends: HMAC-SHA256(key, label || role || own nonce ||
// peer nonce || wire version), label by which end of the link it is.
enum class Side : uint8_t { kConnector, kListener };
Mac handshake_proof(const ClusterKey& key, Side side, Role role, const Nonce& own,
                    const Nonce& peer, uint16_t wire_version);

// A fresh nonce from OpenSSL's CSPRNG (throws kInternal if it has none).
Nonce random_nonce();

struct HandshakeConfig {
  Side side = Side::kConnector;
  Role role = Role::kWorker;
  std::string name;  // this host's name, for the peer's logs
};

class Handshake {
 public:
  // key must outlive the Handshake.
  Handshake(const ClusterKey& key, HandshakeConfig config);
  // Tests: the nonce this side uses instead of a random one.
  Handshake(const ClusterKey& key, HandshakeConfig config, const Nonce& nonce);

  // The connector's first frame (its Hello); nothing for the listener.
  std::optional<Payload> start();
  // One frame from the peer. Sets *reply to what to send back, if anything
  // (a Refuse when this side refuses: the peer learns why). Not ok ends the
  // handshake for good: kUnauthenticated for a failed proof, a frame out of
  // order or any frame before it finished; kInvalidArgument for another
  // wire version; the peer's own code when it sent a Refuse.
  Status on_frame(const Payload& frame, std::optional<Payload>* reply);

  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kFailed; }
  const std::string& peer_name() const { return peer_name_; }
  Role peer_role() const { return peer_role_; }

 private:
  enum class State { kStart, kWaitHello, kWaitChallenge, kWaitProof, kDone, kFailed };
  Status fail(std::optional<Payload>* reply, Status why, bool tell_peer);
  Status on_hello(const Hello& h, std::optional<Payload>* reply);
  Status on_challenge(const Challenge& c, std::optional<Payload>* reply);
  Status on_proof(const Proof& p, std::optional<Payload>* reply);

  const ClusterKey& key_;
  HandshakeConfig config_;
  Nonce own_{};
  Nonce peer_{};
  State state_ = State::kStart;
  std::string peer_name_;
  Role peer_role_ = Role::kWorker;
};

}  // namespace kvasir::net
