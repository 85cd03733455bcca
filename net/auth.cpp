// net/auth.cpp — the cluster key file and the challenge-response handshake.
#include "net/auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/check.h"

namespace kvasir::net {
namespace {

constexpr const char* kHowToMake =
    "make one with: head -c 32 /dev/urandom > KEY; chmod 600 KEY (the same file on every host)";

template <typename... Args>
Status key_refused(const std::string& path, fmt::format_string<Args...> f, Args&&... args) {
  return Status(ErrorCode::kUnauthenticated,
                fmt::format("cluster key {}: {}; {}", path,
                            fmt::format(f, std::forward<Args>(args)...), kHowToMake));
}

// Closes the descriptor on every return path.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status check_key_stat(const std::string& path, const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return key_refused(path, "not a regular file");
  if (st.st_uid != ::geteuid())
    return key_refused(path, "owned by uid {}, not by uid {} that runs this process", st.st_uid,
                       ::geteuid());
  if ((st.st_mode & 07777) != 0600)
    return key_refused(path, "mode {:04o}, must be exactly 0600 (readable by its owner alone)",
                       st.st_mode & 07777);
  if (st.st_size < off_t(kMinKeyBytes) || st.st_size > off_t(kMaxKeyBytes))
    return key_refused(path, "{} bytes, must be {}..{}", st.st_size, kMinKeyBytes, kMaxKeyBytes);
  return Status();
}

}  // namespace

ClusterKey::~ClusterKey() {
  if (!bytes_.empty()) OPENSSL_cleanse(bytes_.data(), bytes_.size());
}

Status load_cluster_key(const std::string& path, ClusterKey* out) {
  // One descriptor for the checks and the read: the file checked is the
  // file read, whatever is renamed meanwhile.
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0)
    return Status(
        errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
        fmt::format("cluster key {}: cannot open: {}; {}", path, std::strerror(errno), kHowToMake));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    return Status(ErrorCode::kIo, fmt::format("cluster key {}: {}", path, std::strerror(errno)));
  KV_RETURN_IF_ERROR(check_key_stat(path, st));
  std::vector<uint8_t> bytes(size_t(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(f.fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      OPENSSL_cleanse(bytes.data(), bytes.size());
      return Status(ErrorCode::kIo, fmt::format("cluster key {}: short read ({} of {} bytes)", path,
                                                got, bytes.size()));
    }
    got += size_t(n);
  }
  *out = ClusterKey(std::move(bytes));
  return Status();
}

Mac handshake_proof(const ClusterKey& key, Side side, Role role, const Nonce& own,
                    const Nonce& peer, uint16_t wire_version) {
  // Distinct labels per direction: the listener's proof is never a valid
  // connector proof, so a peer cannot answer the challenge by reflection.
  const std::string label =
      side == Side::kConnector ? "kvasir-net connector proof" : "kvasir-net listener proof";
  std::vector<uint8_t> msg(label.begin(), label.end());
  msg.push_back(uint8_t(role));
  msg.insert(msg.end(), own.begin(), own.end());
  msg.insert(msg.end(), peer.begin(), peer.end());
  msg.push_back(uint8_t(wire_version)), msg.push_back(uint8_t(wire_version >> 8));
  Mac mac{};
  unsigned int len = 0;
  const auto& k = key.bytes();
  KV_CHECK_CODE(HMAC(EVP_sha256(), k.data(), int(k.size()), msg.data(), msg.size(), mac.data(),
                     &len) != nullptr &&
                    len == kMacBytes,
                ErrorCode::kInternal, "HMAC-SHA256 failed");
  return mac;
}

Nonce random_nonce() {
  Nonce n{};
  KV_CHECK_CODE(RAND_bytes(n.data(), int(n.size())) == 1, ErrorCode::kInternal,
                "the CSPRNG gave no random bytes");
  return n;
}

Handshake::Handshake(const ClusterKey& key, HandshakeConfig config)
    : Handshake(key, std::move(config), random_nonce()) {}

Handshake::Handshake(const ClusterKey& key, HandshakeConfig config, const Nonce& nonce)
    : key_(key), config_(std::move(config)), own_(nonce) {
  KV_CHECK(key_.bytes().size() >= kMinKeyBytes, "cluster key of {} bytes (min {})",
           key_.bytes().size(), kMinKeyBytes);
}

std::optional<Payload> Handshake::start() {
  if (config_.side == Side::kListener) {
    state_ = State::kWaitHello;
    return std::nullopt;
  }
  state_ = State::kWaitChallenge;
  Hello h;
  h.role = config_.role, h.name = config_.name, h.nonce = own_;
  return Payload(h);
}

Status Handshake::fail(std::optional<Payload>* reply, Status why, bool tell_peer) {
  state_ = State::kFailed;
  if (tell_peer) *reply = Refuse{why.code(), why.message()};
  return why;
}

Status Handshake::on_frame(const Payload& frame, std::optional<Payload>* reply) {
  reply->reset();
  if (state_ == State::kDone || state_ == State::kFailed || state_ == State::kStart)
    return Status(ErrorCode::kInternal, "handshake: a frame outside the handshake");
  if (const auto* r = std::get_if<Refuse>(&frame)) {
    // A refusal is never ok, whatever code it carries.
    const ErrorCode code = r->code == ErrorCode::kOk ? ErrorCode::kInternal : r->code;
    return fail(reply, Status(code, "the peer refused the link: " + r->text), false);
  }
  if (state_ == State::kWaitHello && std::holds_alternative<Hello>(frame))
    return on_hello(std::get<Hello>(frame), reply);
  if (state_ == State::kWaitChallenge && std::holds_alternative<Challenge>(frame))
    return on_challenge(std::get<Challenge>(frame), reply);
  if (state_ == State::kWaitProof && std::holds_alternative<Proof>(frame))
    return on_proof(std::get<Proof>(frame), reply);
  return fail(reply,
              error_status(ErrorCode::kUnauthenticated,
                           "a {} frame before the cluster key handshake finished",
                           frame_type_name(type_of(frame))),
              true);
}

Status Handshake::on_hello(const Hello& h, std::optional<Payload>* reply) {
  if (h.wire_version != kWireVersion)
    return fail(reply,
                error_status(ErrorCode::kInvalidArgument,
                             "peer '{}' speaks wire version {}, this host speaks version {}",
                             h.name, h.wire_version, kWireVersion),
                true);
  peer_name_ = h.name, peer_role_ = h.role, peer_ = h.nonce;
  if (peer_ == own_)  // our own nonce reflected back: not a fresh peer
    return fail(reply, Status(ErrorCode::kUnauthenticated, "the peer echoed our nonce"), true);
  state_ = State::kWaitProof;
  Challenge c;
  c.role = config_.role, c.nonce = own_;
  *reply = c;
  return Status();
}

Status Handshake::on_challenge(const Challenge& c, std::optional<Payload>* reply) {
  if (c.wire_version != kWireVersion)
    return fail(reply,
                error_status(ErrorCode::kInvalidArgument,
                             "the listener speaks wire version {}, this host speaks version {}",
                             c.wire_version, kWireVersion),
                true);
  peer_role_ = c.role, peer_ = c.nonce;
  if (peer_ == own_)  // our own nonce reflected back: not a fresh peer
    return fail(reply, Status(ErrorCode::kUnauthenticated, "the peer echoed our nonce"), true);
  state_ = State::kWaitProof;
  *reply = Proof{handshake_proof(key_, Side::kConnector, config_.role, own_, peer_, kWireVersion)};
  return Status();
}

Status Handshake::on_proof(const Proof& p, std::optional<Payload>* reply) {
  const Side peer_side = config_.side == Side::kConnector ? Side::kListener : Side::kConnector;
  const Mac want = handshake_proof(key_, peer_side, peer_role_, peer_, own_, kWireVersion);
  if (CRYPTO_memcmp(want.data(), p.mac.data(), kMacBytes) != 0) {
    const std::string who = peer_name_.empty() ? "the peer" : "peer '" + peer_name_ + "'";
    return fail(reply,
                error_status(ErrorCode::kUnauthenticated,
                             "{} does not hold this cluster key (a wrong or stale key file)", who),
                true);
  }
  state_ = State::kDone;
  if (config_.side == Side::kListener)
    *reply = Proof{handshake_proof(key_, Side::kListener, config_.role, own_, peer_, kWireVersion)};
  return Status();
}

}  // namespace kvasir::net
